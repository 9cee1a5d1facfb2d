"""Part III: evaluate a trained run of the table, then score it (the last two steps of a run).

A run reads top to bottom (:func:`attnlab.experiments.in_context.table.table_rows`): the
:class:`~.recipe.Recipe`, :func:`attnlab.icl_training.train_plan`, then here:

- :func:`evaluate` measures every trained model: its adjusted loss (its ½ squared error minus the
  oracle's, ridge with the prompt's true noise variance) on ``n_eval`` fresh prompts of its own
  noise distribution (mean, median, and the mean without the worst ``trim`` share of prompts,
  :func:`attnlab.baselines.trimmed_mean`), on the recipe's validation prompts, and at the fixed σ of
  the per-noise profiles (paper Fig. 3); and its training curve and weights;
- :func:`score` picks each cell's best seed (the lowest mean on the evaluation prompts, as the
  paper's best of five seeds), flags a cell whose mean exceeds ``outlier_ratio`` times its trimmed
  mean (``outliers``), and writes the result rows: ``table`` (one per model), ``profile`` (the
  best seed's), ``curve`` and ``weights``.

Noise distributions are the strings of :class:`attnlab.tasks.icl_regression.Noise`
(``"uniform:3"``, ``"categorical:1,3"``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from attnlab import baselines as bl
from attnlab.experiments.in_context.recipe import Recipe, prompt_set
from attnlab.icl_training import TrainedICL


@dataclass
class Evaluation:
    """What :func:`evaluate` measured: per cell (noise, param, L) the per-seed statistics in
    ``cells``; ``profiles[(sigma, noise, param, L)]`` the per-seed adjusted loss at a fixed σ;
    ``trained_rows`` the curves and weights; ``seeds`` and the trainer's ``reruns``."""

    cells: list[dict]
    profiles: dict
    trained_rows: list[dict]
    seeds: list[int]
    reruns: list[dict] = field(default_factory=list)


def evaluate(trained: TrainedICL, recipe: Recipe) -> Evaluation:
    """Measure every model of ``trained`` as ``recipe.evaluation`` says (see the module)."""
    if not isinstance(trained, TrainedICL) or not isinstance(recipe, Recipe):
        raise ValueError("evaluate needs a TrainedICL (train_plan's result) and its Recipe")
    ev = recipe.evaluation
    prompts = prompt_set(ev.n_eval, recipe.d, recipe.n, ev.eval_seed, noise=trained.noise, chunk=ev.chunk)
    val = recipe.validation.validation_losses(trained)
    cells = []
    for si, spec in enumerate(trained.noise):
        for (param, L), grp in trained.groups.items():
            per_prompt, sq = prompts.adjusted(grp.models(si), spec)  # [R, B]
            adj = per_prompt.mean(-1).numpy()
            adj = np.where(grp.diverged[si] | ~np.isfinite(adj), np.inf, adj)
            R = len(adj)
            cells.append(
                {
                    "param": param,
                    "n_layers": L,
                    "noise": spec,
                    "adjusted": adj,
                    "median": [float(per_prompt[r].median()) for r in range(R)],
                    "trimmed": [
                        bl.trimmed_mean(per_prompt[r], ev.trim) if np.isfinite(adj[r]) else np.inf
                        for r in range(R)
                    ],
                    "val": val[(param, L)][si],
                    "loss": [float(sq[r].mean()) for r in range(R)],
                    "oracle_loss": float(prompts.oracle_sq[spec].mean()),
                    "diverged": grp.diverged[si],
                    "skipped": grp.skipped[si],
                    "lr": trained.lr_used[(param, L)][si],
                }
            )
    profiles = {}
    if ev.profile_noise and ev.profile_sigmas:
        fixed = prompt_set(
            ev.profile_n, recipe.d, recipe.n, ev.eval_seed + 7, sigmas=ev.profile_sigmas, chunk=ev.chunk
        )
        for s in ev.profile_sigmas:
            for si, spec in enumerate(trained.noise):
                if spec not in ev.profile_noise:
                    continue
                for (param, L), grp in trained.groups.items():
                    profiles[(float(s), spec, param, L)] = [
                        float(fixed.adjusted(grp.models((si, r)), float(s))[0].mean())
                        for r in range(len(trained.seeds))
                    ]
    return Evaluation(
        cells, profiles, _trained_rows(trained, recipe.keep_weights), list(trained.seeds), trained.reruns
    )


def _trained_rows(res: TrainedICL, keep_weights: bool) -> list[dict]:
    """The training curve of every model and, with ``keep_weights``, its packed weights."""
    rows = []
    for (param, L), grp in res.groups.items():
        for si, spec in enumerate(res.noise):
            for r, seed in enumerate(res.seeds):
                for k, step in enumerate(grp.steps):
                    rows.append(
                        {
                            "kind": "curve",
                            "param": param,
                            "n_layers": L,
                            "noise": spec,
                            "seed": seed,
                            "step": int(step),
                            "train_loss": float(grp.loss[si, r, k]),
                        }
                    )
                if keep_weights:
                    rows.append(
                        {
                            "kind": "weights",
                            "param": param,
                            "n_layers": L,
                            "noise": spec,
                            "seed": seed,
                            "weights": grp.weights[si, r].double().cpu().numpy().tolist(),
                        }
                    )
    return rows


def score(evaluation: Evaluation, recipe: Recipe) -> tuple[list[dict], dict]:
    """The result rows of a run (see the module) and its meta (the trainer's re-runs)."""
    if not isinstance(evaluation, Evaluation):
        raise ValueError(f"evaluation must be an Evaluation (from evaluate), got {type(evaluation).__name__}")
    ratio = recipe.evaluation.outlier_ratio
    rows, best = [], {}
    for c in evaluation.cells:
        b = int(np.argmin(c["adjusted"]))
        best[(c["param"], c["n_layers"], c["noise"])] = b
        for r, seed in enumerate(evaluation.seeds):
            rows.append(
                {
                    "kind": "table",
                    "param": c["param"],
                    "n_layers": c["n_layers"],
                    "noise": c["noise"],
                    "seed": seed,
                    "adjusted": float(c["adjusted"][r]),
                    "adjusted_median": c["median"][r],
                    "adjusted_trimmed": float(c["trimmed"][r]),
                    "adjusted_val": float(c["val"][r]),
                    "outliers": bool(c["adjusted"][r] > ratio * c["trimmed"][r]),
                    "loss": c["loss"][r],
                    "oracle_loss": c["oracle_loss"],
                    "best": r == b,
                    "diverged": bool(c["diverged"][r]),
                    "skipped": int(c["skipped"][r]),
                    "lr": float(c["lr"][r]),
                }
            )
    for (s, spec, param, L), adjusted in evaluation.profiles.items():
        r = best[(param, L, spec)]
        rows.append(
            {
                "kind": "profile",
                "param": param,
                "n_layers": L,
                "noise": spec,
                "seed": evaluation.seeds[r],
                "sigma": s,
                "adjusted": adjusted[r],
            }
        )
    return rows + evaluation.trained_rows, {"reruns": evaluation.reruns}
