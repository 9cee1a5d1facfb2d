"""Train many multi-layer linear transformers at once (Part III, chapters 04 and 05).

The paper trains one model per (parameterization, depth, noise distribution, seed); that is
hundreds of tiny models. :func:`train_icl` builds, for every (parameterization, depth), one
:class:`attnlab.models.LinearTransformer` holding the models of every noise setting and seed
(``batch_shape = (S, R)``) and trains them all with the library's loop,
:func:`attnlab.train.train`, on per-model losses: every model gets the gradient of its own loss
and Adam (an elementwise update) treats the models exactly as if they were trained one by one.
The forward pass is each model's fast exact form (Gram form, spectral for GD++), whose inputs are
computed once per step for all of them (:func:`attnlab.models.fast_inputs`); the Gram form's
backward pass is written by hand, in the compiled kernel of :mod:`attnlab.models.gram_kernel`
(every model in one call; :mod:`attnlab.models.gram_backward`, the same in torch, where the kernel
is not built).

Data: every step draws fresh sequences for every (noise setting, seed) from the seed's own
stream (:func:`attnlab.tasks.icl_regression.sample_regression`), and every (parameterization,
depth) sees the same stream.

Optimizer: Adam (no weight decay) as in the paper, ``lr = 1e-4``, batch 2048; von Oswald et
al.'s initialisation ``N(0, (0.002/L)²)`` and ``β₂ = 0.98``. A cosine decay of the learning rate
is available for the reduced CPU runs.

A run of Part III's table is decided before it starts (:mod:`attnlab.experiments.in_context.recipe`)
and handed to :func:`train_plan` as data: a :class:`TrainingPlan` (the :func:`train_icl` calls,
each with its models' learning rate, steps, schedule and dtype), a :class:`RetryRule` (which
models count as failed and how they are trained again) and a :class:`PromptSet` of validation
prompts with the oracle's loss on each. The trainer never calls back into the experiment.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from attnlab.models import LT_PARAMS, LinearTransformer, fast_inputs
from attnlab.tasks.icl_regression import Noise, sample_regression
from attnlab.train import check_schedule, train
from attnlab.validation import (
    check_choice,
    check_int,
    check_positive,
    check_shape,
    make_generator,
    resolve_device,
    resolve_dtype,
)

PARAMS = LT_PARAMS

# Initialisation seed of seed s, depth L: 1000 s + 7 L + offset (the runs behind the committed results).
_INIT_SEED_OFFSET = {"full": 0, "diag": 1, "gdpp": 3}

__all__ = [
    "PARAMS",
    "PromptSet",
    "RetryRule",
    "TrainedGroup",
    "TrainedICL",
    "TrainingPlan",
    "TrainingRun",
    "diagonal_mass",
    "evaluate",
    "fast_half_mse_loss",
    "num_threads_scope",
    "train_icl",
    "train_plan",
]


@dataclass
class TrainedGroup:
    """The models of one parameterization and depth: ``model`` (models ``(S, R)``), losses ``[S, R, T]``."""

    param: str
    n_layers: int
    model: LinearTransformer
    loss: np.ndarray
    diverged: np.ndarray  # [S, R] bool
    skipped: np.ndarray  # [S, R] updates skipped for a non-finite loss or gradient
    steps: np.ndarray | None = None  # [T] the steps of ``loss`` (groups trained apart may differ)

    @property
    def weights(self) -> torch.Tensor:
        """The packed weights ``[S, R, L, H, ...]`` (:meth:`LinearTransformer.packed_weights`)."""
        return self.model.packed_weights().detach()

    def models(self, index) -> LinearTransformer:
        """A float64 copy of the models at ``index`` of ``(S, R)``, e.g. ``si`` or ``(si, r)``."""
        w = self.weights[index].double()
        return LinearTransformer.from_packed(w, self.model.d, self.param, diag_mode=self.model.diag_mode)


@dataclass
class TrainedICL:
    """Everything :func:`train_icl` trained, with its settings."""

    noise: list[str]
    seeds: list[int]
    steps: np.ndarray
    groups: dict[tuple[str, int], TrainedGroup] = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    lr_used: dict[tuple[str, int], np.ndarray] = field(default_factory=dict)  # [S, R] each (train_plan)
    reruns: list[dict] = field(default_factory=list)  # the re-runs of train_plan's retry rule

    def group(self, param: str, n_layers: int) -> TrainedGroup:
        if (param, n_layers) not in self.groups:
            raise ValueError(
                f"param/n_layers ({param!r}, {n_layers}) was not trained; have {sorted(self.groups)}"
            )
        return self.groups[(param, n_layers)]


@contextlib.contextmanager
def num_threads_scope(n: int | None):
    """Run a block with ``torch.set_num_threads(n)``, restoring the previous value (``None``: no change)."""
    if n is None:
        yield
        return
    n = check_int("num_threads", n, minimum=1)
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def fast_half_mse_loss(model, X, y, x_query, target, *rest):
    """Per-model ½·MSE ``[*models]``, as :func:`~attnlab.tasks.icl_regression.half_mse_loss` but through
    the model's fast exact form (:meth:`~attnlab.models.LinearTransformer.predict_fast`)."""
    return model.half_mse_from(fast_inputs(X, y, x_query, {model.fast_form}), target)


def _group_losses(models, X, y, x_query, target, *rest):
    """``{name: per-model ½·MSE [S, R]}`` for every batched model, sharing the data's fast inputs."""
    inputs = fast_inputs(X, y, x_query, {m.fast_form for m in models.values()})
    return {k: m.half_mse_from(inputs, target) for k, m in models.items()}


def _sampler(noise, seeds, data_seed, d, n, device, dtype):
    """A sampler for :func:`attnlab.train.train` with its own data stream per seed: ``[S, R, B, ...]``."""
    gens = [make_generator(10_000 + data_seed * 1000 + s, device=device) for s in seeds]

    def sample(batch_size, _generator):
        batches = [
            sample_regression(batch_size, d, n, noise=noise, generator=g, dtype=dtype, device=device)
            for g in gens
        ]
        return tuple(torch.stack([b[i] for b in batches], dim=1) for i in range(4))  # X, y, x_query, target

    return sample


def train_icl(
    params: Sequence[str] = ("diag",),
    depths: Sequence[int] = (1,),
    noise: Sequence[str | Noise] = ("uniform:0",),
    seeds: Sequence[int] = (0,),
    *,
    d: int = 10,
    n: int = 20,
    n_heads: int = 1,
    diag_mode: str = "pq",
    steps: int = 1000,
    batch_size: int = 2048,
    lr: float | dict = 1e-4,
    betas: tuple[float, float] = (0.9, 0.98),
    lr_schedule: str = "constant",
    max_grad_norm: float | None = None,
    patience: int = 1,
    init_scale: float | None = None,
    data_seed: int = 0,
    record_every: int = 10,
    device="cpu",
    dtype="float32",
    num_threads: int | None = 1,
    stop_after: int | None = None,
) -> TrainedICL:
    """Train every (param, depth) × noise setting × seed model with Adam on fresh data each step.

    ``params`` ⊂ :data:`PARAMS` (with ``diag_mode`` as in :class:`LinearTransformer`); ``depths``
    numbers of layers; ``noise`` :class:`~attnlab.tasks.icl_regression.Noise` specifications;
    ``seeds`` initialisation seeds (one model per seed; the data of seed ``r`` come from its own
    stream). ``lr`` is one learning rate or a dict ``{param: lr}``; ``lr_schedule`` as in
    :func:`attnlab.train.train` (e.g. ``"warmup:W"``: a linear warm-up over ``W`` updates, then
    constant). Losses are ½·MSE per model, recorded every ``record_every``
    steps (the mean over those steps). ``max_grad_norm`` clips each model's gradient norm and
    ``patience`` is the number of consecutive steps with a non-finite loss after which a model is
    marked ``diverged`` and stops training; a model skips the update of a step whose loss or
    gradient is not finite (:func:`attnlab.train.train`; the others are unaffected: the models
    share no parameters). ``num_threads`` limits torch's CPU threads during the run (restored
    afterwards): the many tiny batched matrix products run faster on one thread, and far faster
    on a busy machine; ``None`` leaves the setting alone. ``stop_after`` stops after that many
    updates of the run of ``steps`` (its schedule and records unchanged; :func:`attnlab.train.train`).
    """
    params = [check_choice("params", p, PARAMS) for p in params]
    if not params:
        raise ValueError("params must name at least one parameterization")
    depths = [check_int("depths", L, minimum=1) for L in depths]
    if not depths:
        raise ValueError("depths must list at least one number of layers")
    noise = [str(Noise.parse(s)) if isinstance(s, Noise) else s for s in noise]
    if not noise:
        raise ValueError("noise must list at least one noise distribution")
    settings = [Noise.parse(s) for s in noise]
    seeds = [check_int("seeds", s, minimum=0) for s in seeds]
    if not seeds:
        raise ValueError("seeds must list at least one seed")
    d, n = check_int("d", d, minimum=1), check_int("n", n, minimum=1)
    n_heads = check_int("n_heads", n_heads, minimum=1)
    steps = check_int("steps", steps, minimum=1)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    if isinstance(lr, dict):
        missing = set(params) - set(lr)
        if missing:
            raise ValueError(
                f"lr must be a number or a dict with an entry for every param, missing {sorted(missing)}"
            )
        lrs = {p: check_positive("lr", lr[p]) for p in params}
    else:
        lrs = dict.fromkeys(params, check_positive("lr", lr))
    schedule = check_schedule(lr_schedule)
    data_seed = check_int("data_seed", data_seed, minimum=0)
    dev, dt = resolve_device(device), resolve_dtype(dtype)
    S, R = len(noise), len(seeds)

    models = nn.ModuleDict(
        {
            f"{p}_{L}": LinearTransformer(
                d, L, n_heads, p, diag_mode=diag_mode, batch_shape=(S, R), init_scale=init_scale,
                seed=[1000 * s + 7 * L + _INIT_SEED_OFFSET[p] for s in seeds], dtype=dt, device=dev,
            )
            for p in params
            for L in depths
        }
    )  # fmt: skip
    param_lr = {f"{k}.{name}": lrs[m.param] for k, m in models.items() for name, _ in m.named_parameters()}
    with num_threads_scope(num_threads):
        hist = train(
            models, _group_losses, _sampler(settings, seeds, data_seed, d, n, dev, dt), optimizer="adam",
            lr=min(lrs.values()), param_lr=param_lr, steps=steps, batch_size=batch_size, betas=betas,
            lr_schedule=schedule, max_grad_norm=max_grad_norm, patience=patience, device=dev, dtype=dt,
            record_every=record_every, record="mean", stop_after=stop_after,
        )  # fmt: skip
    result = TrainedICL(noise=noise, seeds=seeds, steps=np.asarray(hist.steps))
    losses = hist.as_arrays()["loss"]
    for k, m in models.items():
        loss = np.moveaxis(losses[k], 0, -1)  # [S, R, T]
        result.groups[(m.param, m.n_layers)] = TrainedGroup(
            m.param,
            m.n_layers,
            m.requires_grad_(False),
            loss,
            hist.diverged[k],
            hist.skipped[k],
            result.steps,
        )
    result.config = dict(
        params=params,
        depths=depths,
        noise=noise,
        seeds=seeds,
        d=d,
        n=n,
        n_heads=n_heads,
        diag_mode=diag_mode,
        steps=steps,
        batch_size=batch_size,
        lr=dict(lrs),
        betas=tuple(betas),
        lr_schedule=lr_schedule,
        max_grad_norm=max_grad_norm,
        patience=patience,
        init_scale=init_scale,
        data_seed=data_seed,
    )
    return result


@torch.no_grad()
def evaluate(model: LinearTransformer, X, y, x_query, *, chunk: int = 20_000, return_layers: bool = False):
    """Predictions ``[*models, B]`` of ``model`` (one or a batch) on shared data ``X [B, n, d]``.

    Computed in float64 (on a copy of the model) with its fast exact form, in chunks of ``chunk``
    sequences; ``[*models, L+1, B]`` with ``return_layers``.
    """
    if not isinstance(model, LinearTransformer):
        raise ValueError(f"model must be an attnlab.models.LinearTransformer, got {type(model).__name__}")
    X = torch.as_tensor(X, dtype=torch.float64)
    if X.ndim != 3:
        raise ValueError(f"X must have shape [B, n, d], got {list(X.shape)}")
    B, n, d = X.shape
    check_shape("y", y, (B, n))
    check_shape("x_query", x_query, (B, d))
    chunk = check_int("chunk", chunk, minimum=1)
    y = torch.as_tensor(y, dtype=torch.float64)
    xq = torch.as_tensor(x_query, dtype=torch.float64)
    m64 = copy.deepcopy(model).to(
        device=X.device, dtype=torch.float64
    )  # models trained on a GPU: evaluated here
    outs = [
        m64.predict_fast(X[i : i + chunk], y[i : i + chunk], xq[i : i + chunk], return_layers=return_layers)
        for i in range(0, B, chunk)
    ]
    return torch.cat(outs, dim=-1)


def diagonal_mass(P: torch.Tensor) -> torch.Tensor:
    """Share of ``‖P‖_F²`` in the DIAG pattern ``diag(c I_d, c_y)``: ``[...]`` for ``P [..., d+1, d+1]``.

    The projection onto that pattern keeps the mean of the x-block's diagonal (times ``I_d``) and
    the ``y``-``y`` entry, so the share is ``(tr(P_xx)²/d + P_yy²) / ‖P‖_F²`` (chapter 05). A
    random Gaussian matrix has about ``2/(d+1)²``; a DIAG matrix has 1. A diagnostic: computed on
    ``P`` detached from any autograd graph.
    """
    if not isinstance(P, torch.Tensor) or P.ndim < 2 or P.shape[-1] != P.shape[-2] or P.shape[-1] < 2:
        raise ValueError(f"P must be a tensor [..., d+1, d+1], got {getattr(P, 'shape', type(P).__name__)}")
    P = P.detach()
    d = P.shape[-1] - 1
    tr = P[..., :d, :d].diagonal(dim1=-2, dim2=-1).sum(-1)
    return (tr**2 / d + P[..., d, d] ** 2) / (P**2).sum((-2, -1))


# ------------------------------------------------------------------------------------------------
# A planned run: the trainer's calls, the re-run rule and the validation prompts, decided upfront.
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainingRun:
    """One :func:`train_icl` call: ``params`` × ``depths`` with one learning rate (a number, or
    ``{param: lr}``), number of steps, schedule and dtype."""

    params: tuple[str, ...]
    depths: tuple[int, ...]
    lr: float | dict
    steps: int
    lr_schedule: str
    dtype: str


@dataclass(frozen=True)
class TrainingPlan:
    """Every model of a run: its :class:`TrainingRun` calls, in order, on ``noise`` × ``seeds``,
    with the keyword arguments of :func:`train_icl` they share (``d``, ``n``, ``batch_size``, ...)."""

    runs: tuple[TrainingRun, ...]
    noise: tuple[str, ...]
    seeds: tuple[int, ...]
    shared: dict = field(default_factory=dict)

    def lr_of(self, param: str, n_layers: int) -> float:
        """The learning rate the plan gives ``(param, n_layers)``."""
        for run in self.runs:
            if param in run.params and n_layers in run.depths:
                return float(run.lr[param] if isinstance(run.lr, dict) else run.lr)
        raise ValueError(f"param/n_layers ({param!r}, {n_layers}) is not in the plan")

    def rerun(self, param: str, n_layers: int, noise: Sequence[str], lr: float) -> TrainingPlan:
        """The plan that trains ``(param, n_layers)`` again on ``noise`` at ``lr``, with its own
        steps, schedule and dtype."""
        run = next(r for r in self.runs if param in r.params and n_layers in r.depths)
        again = TrainingRun((param,), (n_layers,), float(lr), run.steps, run.lr_schedule, run.dtype)
        return TrainingPlan((again,), tuple(noise), self.seeds, self.shared)


@dataclass(frozen=True)
class RetryRule:
    """Which trained models failed, and how they are trained again (:func:`train_plan`).

    A model failed if it diverged, if its validation loss is not finite, or if it exceeds
    ``fail_ratio`` times that of the best shallower model of the same parameterization and noise
    (a deeper model contains the shallower ones: a layer with ``P = 0`` is the identity). Up to
    ``reruns`` times, every failed model is trained again from its initialisation at
    ``lr_factor`` times the learning rate of its last run, and the new model replaces it if its
    validation loss is lower.
    """

    reruns: int = 0
    lr_factor: float = 1 / 3
    fail_ratio: float = 1.1


@dataclass(frozen=True)
class PromptSet:
    """Prompts of several noise settings that share their inputs (common random numbers), with the
    oracle's per-prompt loss: ``X [B, n, d]``, ``x_query``, ``target [B]``, and per setting
    (a noise string, or a fixed σ) the labels ``y[key] [B, n]`` and ``oracle_sq[key] [B]``."""

    X: torch.Tensor
    x_query: torch.Tensor
    target: torch.Tensor
    y: dict
    oracle_sq: dict
    chunk: int = 20_000

    def adjusted(self, model: LinearTransformer, key) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-prompt adjusted losses ``[*models, B]`` of ``model`` on setting ``key`` (its ½
        squared error minus the oracle's), and the ½ squared errors themselves."""
        pred = evaluate(model, self.X, self.y[key], self.x_query, chunk=self.chunk)
        sq = 0.5 * (pred - self.target) ** 2
        return sq - self.oracle_sq[key], sq

    def validation_losses(self, res: TrainedICL) -> dict:
        """``{(param, L): [S, R]}`` mean adjusted losses of ``res``'s models (inf if diverged)."""
        val = {}
        for si, spec in enumerate(res.noise):
            for key, grp in res.groups.items():
                adj = self.adjusted(grp.models(si), spec)[0].mean(-1).numpy()
                val.setdefault(key, np.full(grp.diverged.shape, np.inf))[si] = np.where(
                    grp.diverged[si] | ~np.isfinite(adj), np.inf, adj
                )
        return val


def _failed(res: TrainedICL, val: dict, fail_ratio: float) -> dict:
    """``{(param, L): [S, R] bool}``: the models of ``res`` that :class:`RetryRule` calls failed."""
    failed = {}
    for (param, L), grp in res.groups.items():
        shallower = [v for (p, Lp), v in val.items() if p == param and Lp < L]
        bound = fail_ratio * np.min(shallower, axis=0) if shallower else np.inf
        failed[(param, L)] = grp.diverged | ~np.isfinite(val[(param, L)]) | (val[(param, L)] > bound)
    return failed


def _train_runs(plan: TrainingPlan, device) -> TrainedICL:
    """Train every :class:`TrainingRun` of ``plan`` and join their groups into one result."""
    merged = None
    for run in plan.runs:
        res = train_icl(
            run.params, run.depths, plan.noise, plan.seeds, lr=run.lr, steps=run.steps,
            lr_schedule=run.lr_schedule, dtype=run.dtype, device=device, **plan.shared,
        )  # fmt: skip
        if merged is None:
            merged = res
        else:
            merged.groups.update(res.groups)
    return merged


def train_plan(
    plan: TrainingPlan, retry: RetryRule = RetryRule(), validation: PromptSet | None = None, device="cpu"
) -> TrainedICL:
    """Train ``plan``'s models, then apply ``retry`` on the ``validation`` prompts.

    Returns the trained models with ``lr_used`` (the learning rate of every kept model,
    ``{(param, L): [S, R]}``) and ``reruns`` (one record per model trained again: its attempt,
    rate, validation loss before and after, and whether the new model was kept).
    """
    if not isinstance(plan, TrainingPlan) or not plan.runs:
        raise ValueError("plan must be a TrainingPlan with at least one run")
    if not isinstance(retry, RetryRule):
        raise ValueError(f"retry must be a RetryRule, got {type(retry).__name__}")
    if retry.reruns and not isinstance(validation, PromptSet):
        raise ValueError("validation must be a PromptSet when retry.reruns > 0")
    res = _train_runs(plan, device)
    last_lr = {key: np.full(g.diverged.shape, plan.lr_of(*key)) for key, g in res.groups.items()}
    res.lr_used = {key: v.copy() for key, v in last_lr.items()}
    for attempt in range(1, retry.reruns + 1):
        val = validation.validation_losses(res)
        for (param, L), bad in _failed(res, val, retry.fail_ratio).items():
            grp = res.groups[(param, L)]
            for lr_new in sorted({float(v) * retry.lr_factor for v in last_lr[(param, L)][bad]}):
                idx = [
                    si
                    for si in range(len(res.noise))
                    if np.any(bad[si] & np.isclose(last_lr[(param, L)][si] * retry.lr_factor, lr_new))
                ]
                sub = _train_runs(plan.rerun(param, L, [res.noise[si] for si in idx], lr_new), device)
                new, sub_val = sub.groups[(param, L)], validation.validation_losses(sub)[(param, L)]
                for j, si in enumerate(idx):
                    for r in np.flatnonzero(bad[si]):
                        kept = bool(sub_val[j, r] < val[(param, L)][si, r])
                        res.reruns.append(
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
                            res.lr_used[(param, L)][si, r] = lr_new
    return res
