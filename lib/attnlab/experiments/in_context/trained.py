"""Chapter 05's experiments: well-trained models to look inside, and decayed attention.

- ``icl_trained_models``: the CPU recipe on DIAG with 3, 4 and 7 layers and FULL with 4, three
  seeds each, with their weights; :func:`trained_model` rebuilds one as a
  :class:`~attnlab.models.LinearTransformer`; :func:`trained_gated_model` rebuilds a gated model
  of chapter 06's runs that kept their omegas.
- ``icl_decay``: the reviewers' "other variants" question: linear attention whose keys decay with
  their distance from the query (RetNet-like), with the decay learned or fixed.
"""

from __future__ import annotations

import json

import numpy as np
import torch

from attnlab import baselines as bl
from attnlab import icl_training as it
from attnlab.experiments import experiment
from attnlab.experiments.in_context.recipe import BOOK, CPU
from attnlab.experiments.in_context.table import table_rows
from attnlab.models import DecayedLinearTransformer, GatedLinearTransformer, LinearTransformer
from attnlab.tasks.icl_regression import MixedNoiseRegression, shared_prompts
from attnlab.train import train

# ------------------------------------------------------------------------------------------------
# Chapter 05: well-trained models to look inside, and the decayed-attention variant.
# ------------------------------------------------------------------------------------------------


# The CPU recipe of icl_mixed_noise (its guards, schedule, steps and re-runs) on the deep models
# chapter 05 looks inside, three seeds each, with their weights; DIAG with 3 layers is there for the
# re-run rule (a model worse than a shallower one of its kind is re-run).
_TRAINED_CPU = dict(
    CPU,
    params=["diag", "full"],
    depths={"diag": [3, 4, 7], "full": [4]},
    noise=["uniform:0", "uniform:1", "uniform:3", "uniform:5", "uniform:7"],
    n_seeds=3,
    keep_weights=True,
)


@experiment(
    "icl_trained_models",
    book={
        **BOOK,
        "params": ["gdpp", "diag", "full"],
        "depths": {"gdpp": [4], "diag": [2, 4], "full": [2]},
        "noise": ["uniform:5"],
        "n_seeds": 1,
        "steps": 1000,
        "batch_size": 128,
        "lr": {"gdpp": 1e-2, "diag": 3e-3, "full": 1e-3},
        "record_every": 50,
        "n_eval": 10_000,
        "chunk": 10_000,
        "profile_noise": [],
        "keep_weights": True,
    },
    # the same models with the paper's optimisation (200k Adam steps at batch 2048, lr 1e-4, five
    # seeds), for a GPU (--device cuda); not run here
    paper=dict(_TRAINED_CPU, steps=200_000, batch_size=2048, lr=1e-4, lr_schedule="constant", n_seeds=5),
    cpu=_TRAINED_CPU,
    description="Book: GD++, DIAG, FULL on sigma_max = 5; cpu: deep DIAG and FULL trained with the CPU "
    "recipe of Table 1, with their weights (chapter 05); paper: the same with the paper's optimisation",
)
def icl_trained_models(config: dict, device: str) -> tuple[list[dict], dict]:
    return table_rows(config, device)


def trained_model(result, param: str, n_layers: int, noise: str, seed: int = 0) -> LinearTransformer:
    """The trained model ``(param, n_layers, noise, seed)`` of a result with weights, frozen, in float64.

    ``result`` is a :class:`~attnlab.experiments.Result` of ``icl_trained_models`` (or of
    ``icl_mixed_noise`` with ``keep_weights``), from a run (weights as lists) or from a result
    file (weights as their JSON text).
    """
    found = result.column("weights", kind="weights", param=param, n_layers=n_layers, noise=noise, seed=seed)
    if len(found) != 1:
        raise ValueError(
            f"param/n_layers/noise/seed ({param!r}, {n_layers}, {noise!r}, {seed}) must name one "
            f"trained model of the result, found {len(found)}"
        )
    weights = json.loads(found[0]) if isinstance(found[0], str) else found[0]
    model = LinearTransformer.from_packed(np.asarray(weights, dtype=np.float64), result.config["d"], param)
    return model.requires_grad_(False)


def trained_gated_model(result, seed: int, noise: str | None = None) -> GatedLinearTransformer:
    """The gated model ``seed`` of a result that kept its omegas (rows ``"gate"``, ``"gate_omega"``).

    ``result``: an ``icl_beyond*`` result run with ``keep_omegas``; ``noise`` is needed only if it
    trained gated models on more than one noise. Frozen, in float64, with the result's gate features.
    """
    rows = {}
    for kind in ("gate", "gate_omega"):
        found = [r for r in result.rows if r["kind"] == kind and r["seed"] == seed]
        found = [r for r in found if noise is None or r["noise"] == noise]
        rows[kind] = sorted(found, key=lambda r: r["layer"])
    gate, omega = rows["gate"], rows["gate_omega"]
    if not gate or len(gate) != len(omega) or len({r["noise"] for r in gate}) != 1:
        raise ValueError(
            f"seed/noise ({seed}, {noise!r}) must name one gated model whose omegas the result kept, "
            f"found {len(gate)} gate rows and {len(omega)} omega rows"
        )
    model = GatedLinearTransformer(
        result.config["d"],
        len(gate),
        diag_mode="omega",
        features=result.config.get("gate_features", "raw"),
        init_scale=0.0,
        dtype="float64",
    )
    with torch.no_grad():
        model.gate.copy_(torch.tensor([[r[k] for k in "abc"] for r in gate], dtype=torch.float64))
        blocks = ("omega_xx", "omega_xy", "omega_yx", "omega_yy")
        model.omega.copy_(torch.tensor([[r[k] for k in blocks] for r in omega], dtype=torch.float64))
    return model.requires_grad_(False)


_DECAY_BOOK = {
    "variants": ["none", "learned", "fixed:0.8"],
    "n_layers": 2,
    "noise": "uniform:3",
    "n_seeds": 2,
    "steps": 400,
    "batch_size": 64,
    "lr": 3e-3,
    "lr_gamma": 3e-2,
    "gamma_init": 0.8,
    "d": 10,
    "n": 20,
    "n_eval": 20_000,
    "eval_seed": 321,
}


@experiment(
    "icl_decay",
    book=_DECAY_BOOK,
    paper={
        **_DECAY_BOOK,
        "n_seeds": 5,
        "steps": 20_000,
        "batch_size": 2048,
        "lr": 1e-3,
        "lr_gamma": 1e-2,
        "n_eval": 100_000,
    },
    description="Linear attention with decayed keys (RetNet-like), learned or fixed decay (chapter 05)",
)
def icl_decay(config: dict, device: str) -> list[dict]:
    variants, L, R = config["variants"], config["n_layers"], config["n_seeds"]
    d, n = config["d"], config["n"]
    M = len(variants) * R
    # "none": the logit 30, gamma = sigmoid(30) = 1 in float32; "fixed:g" and "learned" start at g.
    start = [
        config["gamma_init"] if v == "learned" else (None if v == "none" else float(v.split(":")[1]))
        for v in variants
    ]
    model = DecayedLinearTransformer(
        d,
        L,
        1,
        batch_shape=(M,),
        gamma_init=[g for g in start for _ in range(R)],
        learn_decay=[v == "learned" for v in variants for _ in range(R)],
        seed=0,
    )
    task = MixedNoiseRegression(d, n, noise=config["noise"])
    with it.num_threads_scope(1):
        train(
            model,
            it.fast_half_mse_loss,
            task,
            optimizer="adam",
            lr=config["lr"],
            param_lr={"decay_logit": config["lr_gamma"]},
            betas=(0.9, 0.98),
            lr_schedule="cosine",
            steps=config["steps"],
            batch_size=config["batch_size"],
            seed=1,
            record="mean",
            record_every=config["steps"],
        )
        data = shared_prompts(config["n_eval"], d, n, config["eval_seed"])
        sigma = data.sigma(config["noise"])
        y = data.labels(sigma)
        oracle_sq = 0.5 * (bl.oracle_ridge(data.X, y, data.x_query, sigma) - data.target) ** 2
        pred = it.evaluate(model, data.X, y, data.x_query, chunk=2000)  # [M, B]
        adj = (0.5 * (pred - data.target) ** 2 - oracle_sq).mean(-1)  # [M]
    logit = model.decay_logit.detach()
    rows = []
    for m in range(M):
        gam = torch.sigmoid(logit[m]).tolist()
        rows.append(
            {"variant": variants[m // R], "seed": m % R, "adjusted": float(adj[m]),
             **{f"gamma_{l + 1}": gam[l] for l in range(L)}}
        )  # fmt: skip
    return rows
