"""Part III's task, evaluation and training core: mixed-noise in-context regression.

- ``icl_baselines``: adjusted losses of OLS, ConstRR, AdaRR, TunedRR and the Bayes-optimal
  predictor for every noise distribution of Table 1 (Monte Carlo, common random numbers: every
  noise distribution is evaluated on the same inputs, weights and standard noise draws).
- The trainer of ``icl_mixed_noise`` and its variants (:mod:`attnlab.experiments.icl_recipe`):
  train GD++, DIAG and FULL linear transformers batched over parameterizations, depths, noise
  distributions and seeds (:func:`attnlab.icl_training.train_icl`), re-run the failed ones, and
  evaluate the adjusted loss on fresh sequences (Table 1), per-noise-level profiles and training
  curves (``_rows``). Per-model settings (a number, ``{param: value}`` or ``{param: {L:
  value}}``) are read by :func:`per_model`.

Noise distributions are the strings of :class:`attnlab.tasks.icl_regression.Noise`
(``"uniform:3"``, ``"categorical:1,3"``).
"""

from __future__ import annotations

import numpy as np
import torch

from attnlab import baselines as bl
from attnlab import icl_training as it
from attnlab.experiments import experiment
from attnlab.experiments.icl_table1 import TABLE1_NOISE
from attnlab.tasks.icl_regression import Noise


def _prior(spec: str, nodes: int):
    """``(sigmas, probs)`` of the Bayes-optimal predictor for a noise string, or None if noiseless."""
    noise = Noise.parse(spec)
    kind, values = noise.kind, noise.values
    if kind == "uniform":
        return None if values[0] == 0 else bl.uniform_sigma_grid(values[0], nodes)
    if kind == "fixed":
        return None if values[0] == 0 else (np.asarray(values), np.ones(1))
    probs = np.full(len(values), 1 / len(values)) if noise.probs is None else np.asarray(noise.probs)
    return np.asarray(values), probs


def _common_data(n_seq: int, d: int, n: int, seed: int) -> dict:
    """Inputs, weights, queries and standard noise shared by every noise distribution (float64)."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n_seq, n, d, generator=g, dtype=torch.float64)
    w = torch.randn(n_seq, d, generator=g, dtype=torch.float64)
    xq = torch.randn(n_seq, d, generator=g, dtype=torch.float64)
    xi = torch.randn(n_seq, n, generator=g, dtype=torch.float64)
    u = torch.rand(n_seq, generator=g, dtype=torch.float64)
    return {"X": X, "w": w, "x_query": xq, "xi": xi, "u": u, "target": (xq * w).sum(-1)}


def _sigma(spec: str, u: torch.Tensor) -> torch.Tensor:
    """σ per sequence from uniform draws ``u``: the same ``u`` serve every noise distribution."""
    return Noise.parse(spec).from_uniform(u)


def _labels(data: dict, sigma: torch.Tensor) -> torch.Tensor:
    return (data["X"] @ data["w"][..., None])[..., 0] + sigma[:, None] * data["xi"]


# ------------------------------------------------------------------------------------------------
# Baselines.
# ------------------------------------------------------------------------------------------------


@experiment(
    "icl_baselines",
    book={
        "noise": TABLE1_NOISE,
        "n_eval": 50_000,
        "n_tune": 20_000,
        "d": 10,
        "n": 20,
        "nodes": 32,
        "seed": 0,
    },
    paper={
        "noise": TABLE1_NOISE,
        "n_eval": 1_000_000,
        "n_tune": 100_000,
        "d": 10,
        "n": 20,
        "nodes": 96,
        "seed": 0,
    },
    description="Adjusted losses of OLS, ConstRR, AdaRR, TunedRR and Bayes-optimal (Table 1 baselines)",
)
def icl_baselines(config: dict, device: str) -> list[dict]:
    d, n = config["d"], config["n"]
    tune = _common_data(config["n_tune"], d, n, config["seed"] + 1)
    ev = _common_data(config["n_eval"], d, n, config["seed"] + 2)
    # One eigendecomposition per data set serves every noise distribution and every baseline.
    sp_tune = bl.Spectral(tune["X"], _labels(tune, torch.zeros_like(tune["u"])), tune["x_query"])
    sp_ev = bl.Spectral(ev["X"], _labels(ev, torch.zeros_like(ev["u"])), ev["x_query"])
    rows = []
    for spec in config["noise"]:
        s_tune, s_ev = _sigma(spec, tune["u"]), _sigma(spec, ev["u"])
        tr = sp_tune.with_y(_labels(tune, s_tune))
        sp = sp_ev.with_y(_labels(ev, s_ev))
        const = bl.ConstRR().fit(tr, target=tune["target"])
        tuned = bl.TunedRR().fit(tr, target=tune["target"])
        # Weight vectors: the loss of a weight estimate, averaged over the query x_t ~ N(0, I),
        # is ½‖ŵ − w‖², so it is used per prompt instead of ½(x_tᵀ(ŵ − w))²: the same expectation
        # with a smaller variance (the heavy tails of AdaRR need it).
        ws = {
            "oracle": sp.ridge_w(s_ev**2),
            "ols": sp.ridge_w(0.0),
            "const": sp.ridge_w(const.lam),
            "ada": sp.ridge_w(sp.ada_sigma2()),
            "tuned": sp.ridge_w(tuned._rule(sp.ada_sigma2(), tuned.c, tuned.tau)),
        }
        prior = _prior(spec, config["nodes"])
        if prior is None:
            ws["bayes"] = ws["ols"]
        else:
            _, ws["bayes"] = sp.bayes(torch.as_tensor(prior[0]), torch.as_tensor(prior[1]))
        sq = {k: 0.5 * ((v - ev["w"]) ** 2).sum(-1) for k, v in ws.items()}  # per-prompt ½‖ŵ − w‖²
        row = {"noise": spec, "oracle_loss": float(sq["oracle"].mean())}
        for k in ("ols", "const", "ada", "tuned", "bayes"):
            diff = sq[k] - sq["oracle"]
            row[k] = float(diff.mean())
            row[f"{k}_se"] = float(diff.std() / np.sqrt(len(diff)))
        gap = sq["tuned"] - sq["bayes"]  # paired: the Bayes floor below TunedRR
        row["tuned_minus_bayes"], row["tuned_minus_bayes_se"] = (
            float(gap.mean()),
            float(gap.std() / np.sqrt(len(gap))),
        )
        row.update(const_lam=const.lam, tuned_c=tuned.c, tuned_tau=tuned.tau)
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------------------------
# Trained linear transformers.
# ------------------------------------------------------------------------------------------------


def _adjusted(grp: it.TrainedGroup, si: int, spec: str, data: dict, chunk: int):
    """Per-prompt adjusted losses ``[R, B]`` of the models of noise ``si``, and ``(sq, oracle_sq)``."""
    sigma = _sigma(spec, data["u"])
    y = _labels(data, sigma)
    oracle_sq = 0.5 * (bl.oracle_ridge(data["X"], y, data["x_query"], sigma) - data["target"]) ** 2
    pred = it.evaluate(grp.models(si), data["X"], y, data["x_query"], chunk=chunk)  # [R, B]
    sq = 0.5 * (pred - data["target"]) ** 2
    return sq - oracle_sq, sq, oracle_sq


def _eval_models(res: it.TrainedICL, config: dict, lr_used: dict, val: dict) -> list[dict]:
    """Table rows: adjusted loss of every model on ``n_eval`` fresh sequences of its own noise.

    Besides the mean (the paper's statistic) each row has the median and the mean without the
    worst ``trim`` share of prompts (:func:`attnlab.baselines.trimmed_mean`); ``outliers`` flags a
    cell whose mean is more than ``outlier_ratio`` times its trimmed mean; ``adjusted_val`` is the
    mean on the ``n_val`` validation prompts (``val``, from :func:`_validation`), by which the best
    seed could be chosen without looking at the evaluation prompts.
    """
    d, n = config["d"], config["n"]
    data = _common_data(config["n_eval"], d, n, config["eval_seed"])
    rows = []
    for si, spec in enumerate(res.noise):
        for (param, L), grp in res.groups.items():
            per_prompt, sq, oracle_sq = _adjusted(grp, si, spec, data, config["chunk"])
            adj = per_prompt.mean(-1).numpy()  # [R]
            adj = np.where(grp.diverged[si] | ~np.isfinite(adj), np.inf, adj)
            best = int(np.argmin(adj))
            for r, seed in enumerate(res.seeds):
                trimmed = bl.trimmed_mean(per_prompt[r], config["trim"]) if np.isfinite(adj[r]) else np.inf
                rows.append(
                    {
                        "kind": "table",
                        "param": param,
                        "n_layers": L,
                        "noise": spec,
                        "seed": seed,
                        "adjusted": float(adj[r]),
                        "adjusted_median": float(per_prompt[r].median()),
                        "adjusted_trimmed": float(trimmed),
                        "adjusted_val": float(val[(param, L)][si, r]),
                        "outliers": bool(adj[r] > config["outlier_ratio"] * trimmed),
                        "loss": float(sq[r].mean()),
                        "oracle_loss": float(oracle_sq.mean()),
                        "best": r == best,
                        "diverged": bool(grp.diverged[si, r]),
                        "skipped": int(grp.skipped[si, r]),
                        "lr": float(lr_used[(param, L)][si, r]),
                    }
                )
    return rows


def _profiles(res: it.TrainedICL, table: list[dict], config: dict) -> list[dict]:
    """Adjusted loss of the best seed at fixed noise levels σ (per-noise profiles, paper Fig. 3)."""
    d, n = config["d"], config["n"]
    data = _common_data(config["profile_n"], d, n, config["eval_seed"] + 7)
    best = {(r["param"], r["n_layers"], r["noise"]): r["seed"] for r in table if r["best"]}
    rows = []
    for s_eval in config["profile_sigmas"]:
        sigma = torch.full_like(data["u"], float(s_eval))
        y = _labels(data, sigma)
        oracle_sq = 0.5 * (bl.oracle_ridge(data["X"], y, data["x_query"], sigma) - data["target"]) ** 2
        for si, spec in enumerate(res.noise):
            if spec not in config["profile_noise"]:
                continue
            for (param, L), grp in res.groups.items():
                r = res.seeds.index(best[(param, L, spec)])
                pred = it.evaluate(grp.models((si, r)), data["X"], y, data["x_query"], chunk=config["chunk"])
                adj = float((0.5 * (pred - data["target"]) ** 2 - oracle_sq).mean())
                rows.append(
                    {
                        "kind": "profile",
                        "param": param,
                        "n_layers": L,
                        "noise": spec,
                        "seed": best[(param, L, spec)],
                        "sigma": float(s_eval),
                        "adjusted": adj,
                    }
                )
    return rows


def _train_once(config: dict, device: str, params, depths, noise, lr) -> it.TrainedICL:
    """One batched :func:`~attnlab.icl_training.train_icl` call per parameterization when
    ``depths`` is a dict ``{param: [depths]}``, one call for all of them otherwise."""
    kw = {
        "d": config["d"],
        "n": config["n"],
        "batch_size": config["batch_size"],
        "betas": tuple(config["betas"]),
        "max_grad_norm": config["max_grad_norm"],
        "patience": config["patience"],
        "init_scale": config["init_scale"],
        "record_every": config["record_every"],
        "data_seed": config["data_seed"],
        "device": device,
    }
    seeds = list(range(config["seed_start"], config["seed_start"] + config["n_seeds"]))
    if not isinstance(depths, dict):  # one call: every model must have the same steps, schedule, dtype
        for key in ("steps", "lr_schedule", "dtype"):
            values = {per_model(config[key], p, L) for p in params for L in depths}
            if len(values) != 1:
                raise ValueError(f"{key} must be one value for the models {params} x {depths}, got {values}")
        L0 = depths[0]
        return it.train_icl(
            params, depths, noise, seeds, lr=lr, steps=_steps_of(config["steps"], params[0], L0),
            lr_schedule=per_model(config["lr_schedule"], params[0], L0),
            dtype=_dtype_of(config, params[0], L0), **kw,
        )  # fmt: skip
    merged = None
    for param in params:
        by_run = {}  # depths that share a learning rate, steps, schedule and dtype train in one call
        for L in depths[param]:
            run = (
                _lr_of(lr, param, L),
                _steps_of(config["steps"], param, L),
                per_model(config["lr_schedule"], param, L),
                _dtype_of(config, param, L),
            )
            by_run.setdefault(run, []).append(L)
        for (lr_p, steps_p, schedule_p, dtype_p), Ls in by_run.items():
            res = it.train_icl(
                [param], Ls, noise, seeds, lr=lr_p, steps=steps_p, lr_schedule=schedule_p,
                dtype=dtype_p, **kw,
            )  # fmt: skip
            if merged is None:
                merged = res
            else:
                merged.groups.update(res.groups)
    return merged


def per_model(value, param: str, L: int):
    """The setting of ``(param, L)`` from a number, ``{param: value}`` or ``{param: {L: value}}``
    (the depths may be strings, as after a round trip through JSON)."""
    value = value[param] if isinstance(value, dict) else value
    if isinstance(value, dict):
        value = value[L] if L in value else value[str(L)]
    return value


def _lr_of(lr, param: str, L: int) -> float:
    """The learning rate of ``(param, L)`` (:func:`per_model`)."""
    return float(per_model(lr, param, L))


def _steps_of(steps, param: str, L: int) -> int:
    """The number of training steps of ``(param, L)`` (:func:`per_model`)."""
    return int(per_model(steps, param, L))


def _dtype_of(config: dict, param: str, L: int) -> str:
    """The training dtype of ``(param, L)`` (:func:`per_model`); a result from before the setting
    existed has none, and trained in float32."""
    return str(per_model(config.get("dtype", "float32"), param, L))


def _validation(res: it.TrainedICL, config: dict) -> dict:
    """``{(param, L): [S, R]}`` adjusted losses on ``n_val`` validation prompts (inf if diverged)."""
    data = _common_data(config["n_val"], config["d"], config["n"], config["eval_seed"] + 13)
    val = {}
    for si, spec in enumerate(res.noise):
        for key, grp in res.groups.items():
            adj = _adjusted(grp, si, spec, data, config["chunk"])[0].mean(-1).numpy()
            val.setdefault(key, np.full(grp.diverged.shape, np.inf))[si] = np.where(
                grp.diverged[si] | ~np.isfinite(adj), np.inf, adj
            )
    return val


def _failed(res: it.TrainedICL, val: dict, fail_ratio: float) -> dict:
    """``{(param, L): [S, R] bool}``: the models a re-run should replace.

    A model failed if the trainer reported it diverged (a non-finite loss), or if its validation
    loss exceeds ``fail_ratio`` times that of the best shallower model of the same
    parameterization and noise: a deeper model contains the shallower ones (a layer with
    ``P = 0`` is the identity), so being worse than them is a failure of training.
    """
    failed = {}
    for (param, L), grp in res.groups.items():
        shallower = [v for (p, Lp), v in val.items() if p == param and Lp < L]
        bound = fail_ratio * np.min(shallower, axis=0) if shallower else np.inf
        failed[(param, L)] = grp.diverged | ~np.isfinite(val[(param, L)]) | (val[(param, L)] > bound)
    return failed


def _train(config: dict, device: str):
    """Train the configured models, re-running failed ones at a lower learning rate.

    ``depths`` may be a list or a dict ``{param: [depths]}``; ``lr`` a number or ``{param: lr}``.
    Up to ``reruns`` times, every failed model (:func:`_failed`) is trained again from its
    initialisation at ``rerun_lr_factor`` times the learning rate of its last run, and the
    re-run replaces it if its validation loss is lower. Returns the trained models, the learning
    rate of every kept model ``{(param, L): [S, R]}`` and a list of the re-runs.
    """
    params, depths, lr = config["params"], config["depths"], config["lr"]
    res = _train_once(config, device, params, depths, config["noise"], lr)
    last_lr = {key: np.full(g.diverged.shape, _lr_of(lr, *key)) for key, g in res.groups.items()}
    lr_used = {key: v.copy() for key, v in last_lr.items()}
    reruns = []
    for attempt in range(1, config["reruns"] + 1):
        val = _validation(res, config)
        for (param, L), bad in _failed(res, val, config["fail_ratio"]).items():
            grp = res.groups[(param, L)]
            for lr_new in sorted({float(v) * config["rerun_lr_factor"] for v in last_lr[(param, L)][bad]}):
                idx = [
                    si
                    for si in range(len(res.noise))
                    if np.any(
                        bad[si] & np.isclose(last_lr[(param, L)][si] * config["rerun_lr_factor"], lr_new)
                    )
                ]
                sub = _train_once(config, device, [param], [L], [res.noise[si] for si in idx], lr_new)
                new, sub_val = sub.groups[(param, L)], _validation(sub, config)[(param, L)]
                for j, si in enumerate(idx):
                    for r in np.flatnonzero(bad[si]):
                        kept = bool(sub_val[j, r] < val[(param, L)][si, r])
                        reruns.append(
                            {"param": param, "n_layers": L, "noise": res.noise[si], "seed": int(r),
                             "attempt": attempt, "lr": lr_new, "diverged_before": bool(grp.diverged[si, r]),
                             "val_before": float(val[(param, L)][si, r]), "val_after": float(sub_val[j, r]),
                             "diverged_after": bool(new.diverged[j, r]), "kept": kept}
                        )  # fmt: skip
                        last_lr[(param, L)][si, r] = lr_new
                        if kept:
                            for old_p, new_p in zip(
                                grp.model.parameters(), new.model.parameters(), strict=True
                            ):
                                old_p.data[si, r] = new_p.data[j, r]
                            grp.loss[si, r], grp.diverged[si, r] = new.loss[j, r], new.diverged[j, r]
                            grp.skipped[si, r] = new.skipped[j, r]
                            lr_used[(param, L)][si, r] = lr_new
    return res, lr_used, reruns


def _select_part(config: dict) -> dict:
    """A long run split into processes: ``part = "k/m"`` keeps the noise settings ``noise[k::m]``;
    ``part`` = one of ``params`` (e.g. ``"diag"``) keeps that parameterization."""
    part = str(config["part"])
    if part == "all":
        return config
    if part in config["params"]:
        return {**config, "params": [part]}
    k, _, m = part.partition("/")
    if not (k.isdigit() and m.isdigit() and 0 <= int(k) < int(m)):
        raise ValueError(
            f"part must be 'all', one of params {config['params']} or 'k/m' with 0 <= k < m, got {part!r}"
        )
    return {**config, "noise": list(config["noise"])[int(k) :: int(m)]}


def _rows(config: dict, device: str) -> tuple[list[dict], dict]:
    config = _select_part(config)
    res, lr_used, reruns = _train(config, device)
    rows = _eval_models(res, config, lr_used, _validation(res, config))
    rows += _profiles(res, rows, config)
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
                if config["keep_weights"]:
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
    return rows, {"reruns": reruns}
