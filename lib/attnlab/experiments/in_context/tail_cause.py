"""Part III: the cause of the heavy tails of a deep model's per-prompt losses (chapter 04).

A deep linear transformer applies to its prompt a polynomial in ``Sigma = X^T X`` that
approximates ``Sigma^-1`` on the eigenvalues it was trained on. For a DIAG-like model the x-steps
``s -> s (1 + omega_xx s)^2`` contract an eigenvalue only below an edge
(:func:`attnlab.tails.stability_edge`); a prompt whose largest eigenvalue lies beyond it is
amplified at every layer. ``icl_tail_cause`` tests this on one model of the table (by default
3-layer DIAG at sigma_max = 0 with the seed picked on validation, as ``icl_scoring`` scores it),
on ``icl_scoring``'s first chunk of held-out prompts:

- the per-prompt losses with ``lambda_max`` (``kind = "prompt"``: every prompt beyond the edge,
  and a thinned sample of the others for a figure);
- the same prompts with only ``lambda_max`` moved to the sample's median wherever it is beyond
  the edge (:func:`attnlab.tails.with_top_eigenvalue`): the counterfactual that removes the
  suspected cause and keeps everything else;
- prompts drawn exactly at given ``lambda_max`` (``n_given`` at each of ``given``,
  :func:`attnlab.tails.sample_given_lmax`): the median and mean loss at each (``kind =
  "given"``);
- ``kind = "summary"``: :func:`attnlab.tails.tail_summary` of the prompts as drawn, as moved,
  and of those inside the edge only, with the edge and the worst prompt.
"""

from __future__ import annotations

import torch

from attnlab import tails
from attnlab.experiments import experiment, load_result
from attnlab.experiments.in_context.scoring import adjusted_losses, pick_seed
from attnlab.experiments.in_context.table1 import TABLE1_NOISE
from attnlab.experiments.in_context.trained import trained_model
from attnlab.tasks.icl_regression import sample_regression

_CONFIG = {
    "source": "icl_table_diag3",
    "source_scale": "cpu",
    "model": ["diag", 3],
    "noise": "uniform:0",
    "n_prompts": 100_000,
    "test_seed": 50_000,  # icl_scoring's first chunk of this noise distribution
    "trim": 1e-4,
    "thin": 50,
    "given": [50.0, 60.0, 70.0, 80.0, 85.0, 90.0, 95.0, 100.0, 110.0, 120.0],
    "n_given": 400,
}


@experiment(
    "icl_tail_cause",
    book={**_CONFIG, "given": [60.0, 100.0], "n_given": 100},
    paper=_CONFIG,
    description="The cause of a deep model's heavy tail: per-prompt loss against lambda_max, and "
    "the tail gone when only lambda_max is moved inside the model's edge (chapter 4)",
)
def icl_tail_cause(config: dict, device: str) -> list[dict]:
    """Rows of kinds ``"summary"`` (one per arm: ``drawn``, ``moved``, ``inside``), ``"prompt"``
    (``lmax``, ``loss``, ``moved``) and ``"given"`` (``lmax``, ``median``, ``mean``); see the
    module."""
    param, L = config["model"]
    run = load_result(config["source"], config["source_scale"])
    val = [
        float(r["adjusted_val"])
        for r in sorted(run.rows, key=lambda r: r["seed"])
        if r["kind"] == "table" and (r["param"], r["n_layers"], r["noise"]) == (param, L, config["noise"])
    ]
    seed = pick_seed(val)
    m = trained_model(run, param, L, config["noise"], seed)
    edge = tails.stability_edge(m.omegas()[:, 0].tolist())
    gen = config["test_seed"] + 1000 * TABLE1_NOISE.index(config["noise"])
    b = sample_regression(config["n_prompts"], 10, 20, noise=config["noise"], generator=gen, dtype="float64")
    lmax = torch.linalg.eigvalsh(b.X.transpose(1, 2) @ b.X)[:, -1]
    loss = adjusted_losses([m], b)[0]
    beyond = lmax > edge
    target = torch.where(beyond, lmax.median(), lmax)
    moved = adjusted_losses([m], tails.with_top_eigenvalue(b, target))[0]
    rows = []
    worst = int(loss.argmax())
    for arm, v in (("drawn", loss), ("moved", moved), ("inside", loss[~beyond])):
        s = tails.tail_summary(v.numpy(), config["trim"])
        rows.append({"kind": "summary", "arm": arm, **s, "seed": seed, "edge": edge,
                     "n_beyond": int(beyond.sum()), "worst": worst, "worst_lmax": float(lmax[worst]),
                     "worst_loss": float(loss[worst]), "worst_moved": float(moved[worst])})  # fmt: skip
    keep = beyond | (torch.arange(len(loss)) % config["thin"] == 0)
    for i in torch.nonzero(keep)[:, 0].tolist():
        row = {"kind": "prompt", "lmax": float(lmax[i]), "loss": float(loss[i]), "moved": float(moved[i])}
        rows.append(row)
    for j, t in enumerate(config["given"]):
        c = tails.sample_given_lmax(config["n_given"], t, noise=config["noise"], generator=j)
        v = adjusted_losses([m], c)[0]
        rows.append({"kind": "given", "lmax": t, "median": float(v.median()), "mean": float(v.mean())})
    return rows


__all__ = ["icl_tail_cause"]
