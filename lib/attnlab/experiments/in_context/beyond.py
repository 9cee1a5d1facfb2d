"""Part III beyond the paper (chapter 06): gated keys, the Bayes floor, and GD++ against Thm 5.1.

``icl_beyond`` trains three groups of models with one recipe (Adam, constant learning rate,
fresh data every step, the data of seed ``r`` from its own stream) and evaluates them on fresh
prompts shared by every model (common random numbers):

- ``gated``: :class:`~attnlab.models.GatedLinearTransformer` against DIAG of the same depth, the
  same initial omegas and the same data, on the ``gated_noise`` settings (the paper's uniform
  priors, and per-token ``"token:..."`` noise where the gates have something to gate);
- ``depth``: DIAG at ``depth_depths`` on uniform priors, against the Bayes-optimal predictor;
- ``gdpp``: GD++ at ``gdpp_depths`` on noiseless prompts, against the construction of Thm 5.1
  (:func:`attnlab.models.gdpp_construction`) with three choices of its spectrum bounds.

``gate_lr`` (``None``: the common ``lr``) sets the gates' own learning rate; ``icl_beyond_gate_lr``
reruns the gated group on per-token noise with gates learning ten times faster;
``icl_beyond_gated_long`` trains it three times longer (``keep_omegas``: rows ``"gate_omega"``
hold the gated models' omegas, so that the chapter can rebuild them and read their gates);
``icl_beyond_gated_normalised`` trains gates that read their features relative to the prompt
(``gate_features="normalised"``), which do not saturate with the prompt's scale.

Rows: ``kind`` ``"model"`` (adjusted loss of every trained model), ``"baseline"`` (Bayes-optimal,
ConstRR), ``"gate"`` (learned gate coefficients), ``"omega"`` (trained GD++ omegas),
``"construction"`` (the Thm 5.1 schedule and its loss).
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn

from attnlab import baselines as bl
from attnlab.experiments import experiment
from attnlab.icl_training import num_threads_scope
from attnlab.models import (
    GatedLinearTransformer,
    LinearTransformer,
    fast_inputs,
    gdpp_construction,
    gdpp_schedule,
)
from attnlab.tasks.icl_regression import Noise, sample_regression
from attnlab.train import train
from attnlab.validation import make_generator

_BOOK = {
    "d": 10,
    "n": 20,
    "steps": 60,
    "batch_size": 64,
    "lr": 1e-3,
    "betas": [0.9, 0.98],
    "n_seeds": 1,
    "gated_depth": 2,
    "gated_noise": ["uniform:3", "token:0.5,5@0.8,0.2"],
    "depth_depths": [1, 2],
    "depth_noise": ["uniform:3"],
    "gdpp_depths": [1, 2],
    "n_eval": 2_000,
    "n_tune": 1_000,
    "nodes": 16,
    "eval_seed": 77,
    "chunk": 5_000,
    "gate_lr": None,
}
_PAPER = dict(
    _BOOK,
    steps=3000,
    batch_size=512,
    n_seeds=2,
    gated_depth=3,
    gated_noise=["uniform:3", "uniform:7", "token:0.5,5@0.8,0.2"],
    depth_depths=[1, 2, 3, 4],
    depth_noise=["uniform:1", "uniform:3", "uniform:5", "uniform:7"],
    gdpp_depths=[1, 2, 3, 4, 5],
    n_eval=50_000,
    n_tune=20_000,
    nodes=64,
)


def _sampler(noise, seeds, d, n):
    """Fresh prompts ``[S, R, B, ...]`` each step: the data of seed ``r`` come from its own stream."""
    gens = [make_generator(10_000 + s) for s in seeds]

    def sample(batch_size, _generator):
        batches = [sample_regression(batch_size, d, n, noise=noise, generator=g) for g in gens]
        return tuple(torch.stack([b[i] for b in batches], dim=1) for i in range(4))  # X, y, x_query, target

    return sample


def _losses(models, X, y, x_query, target):
    """``{name: ½·MSE [S, R]}``: every model through its fast exact form (token form for gates),
    the inputs of the Gram and spectral forms computed once for all of them."""
    inputs = fast_inputs(X, y, x_query, {m.fast_form for m in models.values()} - {"token"})
    pred = {
        k: m.predict(X, y, x_query) if m.fast_form == "token" else m.predict_from(inputs)
        for k, m in models.items()
    }
    return {k: 0.5 * ((p - target) ** 2).mean(-1) for k, p in pred.items()}


def _train(models: nn.ModuleDict, noise, config, param_lr=None) -> dict:
    """Train every model of ``models`` (each ``batch_shape = (S, R)``) side by side; ``{name: diverged}``."""
    hist = train(
        models, _losses, _sampler(noise, range(config["n_seeds"]), config["d"], config["n"]),
        optimizer="adam", lr=config["lr"], param_lr=param_lr, steps=config["steps"],
        batch_size=config["batch_size"], betas=tuple(config["betas"]), record_every=config["steps"],
        record="mean",
    )  # fmt: skip
    return hist.diverged


def _eval_data(spec_list, config) -> dict:
    """Fresh float64 prompts: one ``X, w, x_query`` and standard noise for every noise setting."""
    d, n, B = config["d"], config["n"], config["n_eval"]
    g = make_generator(config["eval_seed"])
    X = torch.randn(B, n, d, generator=g, dtype=torch.float64)
    w = torch.randn(B, d, generator=g, dtype=torch.float64)
    xq = torch.randn(B, d, generator=g, dtype=torch.float64)
    xi = torch.randn(B, n, generator=g, dtype=torch.float64)
    u = torch.rand(B, n, generator=g, dtype=torch.float64)  # per token; column 0 serves per-prompt noise
    out = {"X": X, "x_query": xq, "target": (xq * w).sum(-1), "y": {}, "sigma": {}}
    for spec in spec_list:
        noise = Noise.parse(spec)
        sigma = noise.from_uniform(u if noise.per_token else u[:, 0])
        out["sigma"][spec] = sigma
        out["y"][spec] = (X @ w[:, :, None])[..., 0] + (sigma if noise.per_token else sigma[:, None]) * xi
    return out


@torch.no_grad()
def _predict(model, X, y, x_query, chunk) -> torch.Tensor:
    """``[*models, B]`` predictions of a float64 copy of ``model`` on one data set."""
    m64 = copy.deepcopy(model).double()
    return torch.cat(
        [
            m64.predict_fast(X[i : i + chunk], y[i : i + chunk], x_query[i : i + chunk])
            for i in range(0, len(X), chunk)
        ],
        dim=-1,
    )


def _model_rows(group, name, model, noise, diverged, data, oracle_sq, config) -> list[dict]:
    rows = []
    for si, spec in enumerate(noise):
        pred = _predict(model, data["X"], data["y"][spec], data["x_query"], config["chunk"])[si]  # [R, B]
        sq = 0.5 * (pred - data["target"]) ** 2
        adj = (sq - oracle_sq[spec]).mean(-1)
        for r in range(config["n_seeds"]):
            rows.append(
                {"kind": "model", "group": group, "model": name.split("_")[0], "n_layers": model.n_layers,
                 "noise": spec, "seed": r, "adjusted": float(adj[r]), "loss": float(sq[r].mean()),
                 "oracle_loss": float(oracle_sq[spec].mean()), "diverged": bool(diverged[si, r])}
            )  # fmt: skip
    return rows


def _oracle_sq(noise, data) -> dict:
    return {
        s: 0.5
        * (bl.oracle_ridge(data["X"], data["y"][s], data["x_query"], data["sigma"][s]) - data["target"]) ** 2
        for s in noise
    }


def _baseline_rows(noise, data, oracle_sq, config) -> list[dict]:
    """Bayes-optimal (uniform priors) and ConstRR (tuned on separate prompts) per noise setting."""
    tune = _eval_data(noise, {**config, "n_eval": config["n_tune"], "eval_seed": config["eval_seed"] + 1})
    rows = []
    for spec in noise:
        X, y, xq, t = data["X"], data["y"][spec], data["x_query"], data["target"]
        preds = {
            "const_rr": bl.ConstRR()
            .fit(tune["X"], tune["y"][spec], tune["x_query"], tune["target"])
            .predict(X, y, xq)
        }
        noise_spec = Noise.parse(spec)
        if noise_spec.kind == "uniform" and noise_spec.values[0] > 0:
            preds["bayes"] = bl.bayes_optimal(
                X, y, xq, *bl.uniform_sigma_grid(noise_spec.values[0], config["nodes"])
            )
        for name, p in preds.items():
            diff = 0.5 * (p - t) ** 2 - oracle_sq[spec]
            se = float(diff.std() / np.sqrt(len(diff)))
            rows.append(
                {"kind": "baseline", "model": name, "noise": spec, "adjusted": float(diff.mean()),
                 "adjusted_se": se, "oracle_loss": float(oracle_sq[spec].mean())}
            )  # fmt: skip
    return rows


def _batched(cls, d, L, S, R, **kw):
    """A batch of ``(S, R)`` models; seed ``r`` starts from the same weights in every class."""
    return cls(d, L, batch_shape=(S, R), seed=[100 * r + L for r in range(R)], **kw)


@torch.no_grad()
def _construction_rows(config) -> list[dict]:
    """Thm 5.1's GD++ on the evaluation prompts (noiseless), for three choices of ``[mu, nu]``.

    ``"worst"``: the extreme eigenvalues of ``Sigma`` over the evaluation prompts (the bounds
    hold for every prompt, as the theorem asks); ``"mp"``: the Marchenko–Pastur edges
    ``n(1 ± sqrt(d/n))²``; ``"tuned"``: the quantile pair on a grid with the lowest loss on
    separate tuning prompts (the construction's form with the best bounds for this data).
    """
    d, n = config["d"], config["n"]
    data = _eval_data(["fixed:0"], config)
    tune = _eval_data(
        ["fixed:0"], {**config, "n_eval": config["n_tune"], "eval_seed": config["eval_seed"] + 1}
    )

    def loss(model, dat):
        pred = _predict(model, dat["X"], dat["y"]["fixed:0"], dat["x_query"], config["chunk"])
        return float((0.5 * (pred - dat["target"]) ** 2).mean())

    eig = torch.linalg.eigvalsh(data["X"].mT @ data["X"])
    eig_t = torch.linalg.eigvalsh(tune["X"].mT @ tune["X"])
    qs = [0.0, 0.01, 0.05, 0.1, 0.25, 0.5]
    rows = []
    for L in config["gdpp_depths"]:
        bounds = {
            "worst": (float(eig[:, 0].min()), float(eig[:, -1].max())),
            "mp": (n * (1 - (d / n) ** 0.5) ** 2, n * (1 + (d / n) ** 0.5) ** 2),
        }
        grid = [
            (float(torch.quantile(eig_t[:, 0], q)), float(torch.quantile(eig_t[:, -1], 1 - p)))
            for q in qs
            for p in qs
        ]
        bounds["tuned"] = min(grid, key=lambda b: loss(gdpp_construction(d, L, *b), tune))
        for choice, (mu, nu) in bounds.items():
            sched = gdpp_schedule(L, mu, nu)
            rows.append(
                {"kind": "construction", "bounds": choice, "n_layers": L, "mu": mu, "nu": nu,
                 "loss": loss(gdpp_construction(d, L, mu, nu), data), "eps": sched["eps"],
                 "gamma": sched["gamma"], "eta": sched["eta"]}
            )  # fmt: skip
    return rows


def _train_and_evaluate(group, models, noise, config, param_lr=None):
    """Train ``models`` side by side on ``noise``, evaluate them on fresh prompts; (rows, data, osq)."""
    diverged = _train(models, noise, config, param_lr)
    data = _eval_data(noise, config)
    osq = _oracle_sq(noise, data)
    rows = []
    for k, m in models.items():
        rows += _model_rows(group, k, m, noise, diverged[k], data, osq, config)
    return rows, data, osq


def _gated_rows(config) -> list[dict]:
    """Gated keys against DIAG: same depth, same initial omegas, same data; the learned gates."""
    d, R = config["d"], config["n_seeds"]
    noise = list(config["gated_noise"])
    L, S = config["gated_depth"], len(noise)
    models = nn.ModuleDict(
        {
            f"gla_{L}": _batched(
                GatedLinearTransformer, d, L, S, R, features=config.get("gate_features", "raw")
            ),
            f"diag_{L}": _batched(LinearTransformer, d, L, S, R, param="diag"),
        }
    )
    gate_lr = None if config["gate_lr"] is None else {f"gla_{L}.gate": config["gate_lr"]}
    rows, data, osq = _train_and_evaluate("gated", models, noise, config, gate_lr)
    rows += _baseline_rows(noise, data, osq, config)
    gate = models[f"gla_{L}"].gate.detach()  # [S, R, L, 3]
    omega = models[f"gla_{L}"].omegas().detach()  # [S, R, L, 4]
    for si, spec in enumerate(noise):
        for r in range(R):
            for layer in range(L):
                a, b, c = gate[si, r, layer].tolist()
                rows.append(
                    {"kind": "gate", "noise": spec, "seed": r, "layer": layer + 1, "a": a, "b": b, "c": c}
                )
                if config.get("keep_omegas", False):  # the gated model can be rebuilt from its rows
                    rows.append(
                        {"kind": "gate_omega", "noise": spec, "seed": r, "layer": layer + 1}
                        | dict(
                            zip(
                                ("omega_xx", "omega_xy", "omega_yx", "omega_yy"),
                                omega[si, r, layer].tolist(),
                                strict=True,
                            )
                        )
                    )
    return rows


def _depth_rows(config) -> list[dict]:
    """DIAG against depth on uniform priors, with the Bayes-optimal floor."""
    d, R = config["d"], config["n_seeds"]
    noise = list(config["depth_noise"])
    S = len(noise)
    models = nn.ModuleDict(
        {f"diag_{L}": _batched(LinearTransformer, d, L, S, R, param="diag") for L in config["depth_depths"]}
    )
    rows, data, osq = _train_and_evaluate("depth", models, noise, config)
    return rows + _baseline_rows(noise, data, osq, config)


def _gdpp_rows(config) -> list[dict]:
    """GD++ on noiseless prompts, its trained omegas, and the Thm 5.1 construction."""
    d, R = config["d"], config["n_seeds"]
    noise = ["fixed:0"]
    models = nn.ModuleDict(
        {f"gdpp_{L}": _batched(LinearTransformer, d, L, 1, R, param="gdpp") for L in config["gdpp_depths"]}
    )
    rows, _, _ = _train_and_evaluate("gdpp", models, noise, config)
    for m in models.values():
        om = m.omegas().detach()[0]  # [R, L, 4]
        for r in range(R):
            for layer in range(m.n_layers):
                rows.append(
                    {"kind": "omega", "n_layers": m.n_layers, "seed": r, "layer": layer + 1,
                     "omega_xx": float(om[r, layer, 0]), "omega_yx": float(om[r, layer, 2])}
                )  # fmt: skip
    return rows + _construction_rows(config)


def _rows(config: dict, device: str) -> list[dict]:
    """The groups whose settings are not empty: gated (``gated_noise``), depth, GD++."""
    rows = []
    with num_threads_scope(1):
        if config["gated_noise"]:
            rows += _gated_rows(config)
        if config["depth_depths"]:
            rows += _depth_rows(config)
        if config["gdpp_depths"]:
            rows += _gdpp_rows(config)
    return rows


@experiment(
    "icl_beyond",
    book=_BOOK,
    paper=_PAPER,
    description="Beyond paper C: gated keys vs DIAG, the Bayes floor by depth, trained GD++ vs Thm 5.1",
)
def icl_beyond(config: dict, device: str) -> list[dict]:
    return _rows(config, device)


#: The variants below train icl_beyond's gated models on per-token noise only.
_GATED_ONLY = {"gated_noise": ["token:0.5,5@0.8,0.2"], "depth_depths": [], "gdpp_depths": []}


@experiment(
    "icl_beyond_gate_lr",
    book={
        **_BOOK,
        **_GATED_ONLY,
        "gate_lr": 1e-2,
    },
    paper={
        **_PAPER,
        **_GATED_ONLY,
        "gate_lr": 1e-2,
    },
    description="icl_beyond's gated models on per-token noise with a 10x learning rate for the gates",
)
def icl_beyond_gate_lr(config: dict, device: str) -> list[dict]:
    return _rows(config, device)


@experiment(
    "icl_beyond_gated_long",
    book={
        **_BOOK,
        **_GATED_ONLY,
        "keep_omegas": True,
    },
    paper={
        **_PAPER,
        **_GATED_ONLY,
        "steps": 9000,
        "keep_omegas": True,
    },
    description="icl_beyond's gated models on per-token noise, trained three times longer, with their omegas",
)
def icl_beyond_gated_long(config: dict, device: str) -> list[dict]:
    return _rows(config, device)


@experiment(
    "icl_beyond_gated_normalised",
    book={
        **_BOOK,
        **_GATED_ONLY,
        "keep_omegas": True,
        "gate_features": "normalised",
    },
    paper={
        **_PAPER,
        **_GATED_ONLY,
        "keep_omegas": True,
        "gate_features": "normalised",
    },
    description="icl_beyond's gated models on per-token noise, with gate features relative to the prompt",
)
def icl_beyond_gated_normalised(config: dict, device: str) -> list[dict]:
    return _rows(config, device)


# The Bayes floor of per-token prompts (chapter 06): the posterior mean of the query's target,
# averaging the weighted ridge over the levels' posterior (attnlab.token_noise), on icl_beyond's
# evaluation prompts (the same eval_seed and size, so the same prompts). Gibbs sampling: at the
# paper scale 8 chains of 440 sweeps per prompt, the first 100 dropped (on chapter 06's prompts a
# chain mixes in about 2 sweeps for the median prompt and at most about 35); the book scale runs
# the first n_floor prompts with shorter chains. Rows: one per block of `block` prompts.
_FLOOR_PAPER = {
    "d": 10,
    "n": 20,
    "noise": "token:0.5,5@0.8,0.2",
    "n_eval": _PAPER["n_eval"],
    "eval_seed": _PAPER["eval_seed"],
    "n_floor": _PAPER["n_eval"],
    "block": 5_000,
    "n_chains": 8,
    "n_sweeps": 440,
    "burn_in": 100,
    "n_batches": 10,
    "seed": 0,
    "chunk": 5_000,
}


@experiment(
    "icl_bayes_floor",
    book=dict(_FLOOR_PAPER, n_floor=5_000, n_chains=8, n_sweeps=25, burn_in=5, n_batches=1),
    paper=_FLOOR_PAPER,
    description="The Bayes posterior mean on icl_beyond's per-token prompts: the floor of chapter 06",
)
def icl_bayes_floor(config: dict, device: str) -> list[dict]:
    """Per block of prompts: the Bayes floor's adjusted loss (its mean over the block, the standard
    error of that mean over prompts, and its Monte Carlo error and bias) and the oracle's loss."""
    noise = Noise.parse(config["noise"])
    if not noise.per_token:
        raise ValueError(f"noise must be a per-token setting 'token:...', got {config['noise']!r}")
    spec = config["noise"]
    data = _eval_data([spec], config)
    N, block = config["n_floor"], config["block"]
    if not 0 < N <= config["n_eval"] or N % block:
        raise ValueError(f"n_floor must be in (0, n_eval] and a multiple of block, got {N} and {block}")
    X, y, xq, t = data["X"][:N], data["y"][spec][:N], data["x_query"][:N], data["target"][:N]
    oracle_sq = 0.5 * (bl.oracle_ridge(X, y, xq, data["sigma"][spec][:N]) - t) ** 2
    pred, mc_se = bl.bayes_per_token(
        *(v.to(device) for v in (X, y, xq)), noise.values, noise.probs, n_sweeps=config["n_sweeps"],
        burn_in=config["burn_in"], n_chains=config["n_chains"], n_batches=config["n_batches"],
        generator=make_generator(config["seed"], device=device), chunk=config["chunk"], return_se=True,
    )  # fmt: skip
    pred, mc_se = pred.double().cpu(), mc_se.double().cpu()
    adj, err = 0.5 * (pred - t) ** 2 - oracle_sq, pred - t
    rows = []
    for start in range(0, N, block):
        s = slice(start, start + block)
        rows.append(
            {"start": start, "prompts": block, "bayes": float(adj[s].mean()),
             "bayes_se": float(adj[s].std() / block**0.5),
             # the Monte Carlo error of the block's mean, and its bias: E(p̂ − t)² = (p − t)² + var p̂
             "bayes_mc_se": float((err[s] * mc_se[s]).norm() / block),
             "bayes_mc_bias": float(0.5 * (mc_se[s] ** 2).mean()), "oracle_loss": float(oracle_sq[s].mean())}
        )  # fmt: skip
    return rows
