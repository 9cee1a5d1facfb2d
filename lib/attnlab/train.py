"""The training loop: full-batch gradient descent, minibatch SGD and Adam on any ``nn.Module``.

One function, :func:`train`, covers the three optimizers used in the book. The data are either a
tuple of tensors whose first dimension indexes samples (a fixed training set) or a *sampler*, a
callable ``sample(batch_size, generator) -> tuple of tensors`` that draws fresh data every step
(online learning, as in Parts I and III). The loss is a callable ``loss_fn(model, *batch)``
returning a scalar tensor, so any model and any loss fit; a model that holds a batch of models
(leading models dimensions on every parameter) returns one loss per model and the models train
side by side, each on its own gradient, with per-model divergence detection.

Every run returns a :class:`History` with the loss at each recorded step and any tracked
quantity (overlaps, weights, ...) computed by user callbacks. The progress bar is ``tqdm`` on
*stdout* and is shown only when stdout is a terminal, so book builds and tests stay silent.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from attnlab.optim import SGD, Adam
from attnlab.validation import (
    check_choice,
    check_int,
    check_positive,
    check_real,
    make_generator,
    resolve_device,
    resolve_dtype,
)

OPTIMIZERS = ("gd", "sgd", "adam", "adamw")
LR_SCHEDULES = ("constant", "cosine", "warmup_stable_decay", "warmup:W")


@dataclass
class History:
    """What a training run recorded.

    ``steps[k]`` is the optimizer step after which ``loss[k]`` and every ``tracked[name][k]`` were
    measured (step 0 is the initial point). ``loss[k]`` is a float for one model, an array of
    per-model losses (``nan`` once a model diverged) for a batch of models, a dict of them for
    groups of models; ``diverged`` marks the models whose loss became non-finite (shape of the
    per-model losses, ``()`` for one model; a dict for groups).
    """

    steps: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    tracked: dict[str, list] = field(default_factory=dict)
    diverged: np.ndarray = field(default_factory=lambda: np.zeros((), dtype=bool))

    def as_arrays(self) -> dict[str, np.ndarray]:
        """``{"step": ..., "loss": ..., name: ...}`` as numpy arrays (``loss`` a dict of them for groups)."""
        grouped = bool(self.loss) and isinstance(self.loss[0], dict)
        loss = (
            {k: np.asarray([v[k] for v in self.loss]) for k in self.loss[0]}
            if grouped
            else np.asarray(self.loss)
        )
        out = {"step": np.asarray(self.steps), "loss": loss}
        for name, values in self.tracked.items():
            out[name] = np.asarray(values)
        return out


def _progress_enabled(progress) -> bool:
    if progress is None:
        return bool(getattr(sys.stdout, "isatty", lambda: False)())
    return bool(progress)


def _to(batch, device, dtype):
    out = []
    for x in batch:
        if not isinstance(x, torch.Tensor):
            x = torch.as_tensor(x)
        x = x.to(device=device, dtype=dtype) if torch.is_floating_point(x) else x.to(device=device)
        out.append(x)
    return tuple(out)


def check_schedule(schedule) -> str:
    """``schedule`` if it names a schedule of :data:`LR_SCHEDULES` (``"warmup:W"`` with an integer
    ``W >= 1``), else ``ValueError``."""
    if isinstance(schedule, str) and schedule.startswith("warmup:"):
        count = schedule.partition(":")[2]
        if count.isdigit() and int(count) >= 1:
            return schedule
        raise ValueError(f"lr_schedule must be 'warmup:W' with an integer W >= 1, got {schedule!r}")
    return check_choice("lr_schedule", schedule, LR_SCHEDULES[:-1])


def lr_factor(schedule: str, step: int, steps: int) -> float:
    """Multiplier of the learning rate at update ``step`` (0-based) of ``steps``.

    ``"constant"``: 1. ``"cosine"``: a linear warm-up over the first 10% of the steps, then a
    cosine decay to zero. ``"warmup_stable_decay"``: a linear warm-up over the first 25% of the
    steps, 1, and a linear decay over the last 25% (to ``1/warm`` at the last update, the
    warm-up's first factor). ``"warmup:W"``: a linear warm-up over ``W`` updates, then 1 (the
    recipe of chapter 05's deep models: the warm-up keeps 7-layer models at high noise from
    diverging in their first steps).
    """
    schedule = check_schedule(schedule)
    if schedule == "constant":
        return 1.0
    if schedule.startswith("warmup:"):
        return min(1.0, (step + 1) / int(schedule.partition(":")[2]))
    warm = max(1, steps // (10 if schedule == "cosine" else 4))
    if step < warm:
        return (step + 1) / warm
    if schedule == "cosine":
        return 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, steps - warm)))
    if step >= steps - warm:  # warmup_stable_decay
        return (steps - step) / warm
    return 1.0


def _make_optimizer(name, model, lr, param_lr, weight_decay, betas):
    named = dict(model.named_parameters())
    unknown = set(param_lr) - set(named)
    if unknown:
        raise ValueError(
            f"param_lr must name parameters of the model ({sorted(named)}), got {sorted(unknown)}"
        )
    groups = [{"params": [p for k, p in named.items() if k not in param_lr]}]
    groups += [
        {"params": [named[k]], "lr": check_positive(f"param_lr[{k!r}]", v)} for k, v in param_lr.items()
    ]
    groups = [g for g in groups if g["params"]]
    if name in ("gd", "sgd"):
        return SGD(groups, lr, weight_decay)
    return Adam(groups, lr, betas, weight_decay=weight_decay, decoupled=name == "adamw")


def _mask_gradients(model, use, max_grad_norm):
    """Zero the gradient of every model not updated this step (``use`` False) and of every model
    whose gradient is not finite, and scale each other model's gradient to a norm of at most
    ``max_grad_norm`` (if given; the norm over all of that model's entries). Returns the mask of
    the models that are updated.

    A parameter's leading dimensions are the models dimensions, ``use.shape``.
    """
    grads = [p for p in model.parameters() if p.grad is not None]
    sq = torch.zeros(use.shape, dtype=grads[0].grad.dtype if grads else torch.float64, device=use.device)
    for p in grads:
        if tuple(p.shape[: use.ndim]) != tuple(use.shape):
            raise ValueError(
                f"loss_fn returned per-model losses of shape {list(use.shape)}, but a parameter has "
                f"shape {list(p.shape)}: parameters must lead with the models dimensions"
            )
        g2 = p.grad.double().pow(2)
        if p.ndim > use.ndim:  # (a sum over no dimensions would sum over all of them)
            g2 = g2.sum(tuple(range(use.ndim, p.ndim)))
        sq = sq + g2.to(sq.dtype)
    norm = sq.double().sqrt()
    use = use & torch.isfinite(norm)
    scale = torch.ones_like(norm)
    if max_grad_norm is not None:
        scale = torch.clamp(max_grad_norm / norm.clamp_min(1e-300), max=1.0)
    for p in grads:
        shape = (*use.shape, *([1] * (p.ndim - use.ndim)))
        factor = torch.where(use, scale, torch.zeros_like(scale)).to(p.grad.dtype).reshape(shape)
        p.grad = torch.where(use.reshape(shape), p.grad * factor, torch.zeros_like(p.grad))
    return use


def _evaluate_callbacks(model, callbacks, history):
    with torch.no_grad():
        for name, fn in callbacks.items():
            value = fn(model)
            if isinstance(value, torch.Tensor):
                value = value.detach().cpu().numpy()
                value = value.item() if value.ndim == 0 else value
            history.tracked.setdefault(name, []).append(value)


def train(
    model: nn.Module,
    loss_fn: Callable[..., torch.Tensor],
    data: Sequence[torch.Tensor] | Callable[[int, torch.Generator], Sequence[torch.Tensor]],
    *,
    optimizer: str = "gd",
    lr: float = 0.1,
    steps: int = 1000,
    batch_size: int | None = None,
    weight_decay: float = 0.0,
    betas: tuple[float, float] = (0.9, 0.999),
    lr_schedule: str | Callable[[int, int], float] = "constant",
    param_lr: Mapping[str, float] | None = None,
    max_grad_norm: float | None = None,
    patience: int = 1,
    seed: int | torch.Generator = 0,
    device: str | torch.device = "cpu",
    dtype: str | torch.dtype = "float32",
    callbacks: Mapping[str, Callable[[nn.Module], object]] | None = None,
    record_every: int = 1,
    record: str = "last",
    progress: bool | None = None,
    stop_after: int | None = None,
) -> History:
    """Train ``model`` in place and return its :class:`History`.

    Parameters
    ----------
    model:
        Any ``nn.Module``; it is moved to ``device`` and ``dtype``.
    loss_fn:
        ``loss_fn(model, *batch)`` returning a scalar tensor, or a tensor of per-model losses when
        ``model`` holds a batch of models: its shape is then the models dimensions, which every
        parameter of ``model`` leads with. The loop backpropagates the sum, so each model gets
        the gradient of its own loss. A model whose loss is not finite is *diverged*: from that
        step on its loss is excluded from the sum and its gradient set to zero (the others go on
        unaffected); :attr:`History.diverged` marks it. (SGD then leaves it where it is; Adam
        still moves it by its decaying first moment.) Several batches of models of different
        shapes train side by side when ``loss_fn`` returns a dict ``{submodule name: per-model
        losses}`` (e.g. for an ``nn.ModuleDict`` of batched models): each submodule's
        parameters lead with the shape of its losses.
    data:
        A tuple of tensors with a common first (sample) dimension, or a sampler
        ``sample(batch_size, generator) -> tuple of tensors`` drawing fresh data each step.
    optimizer:
        ``"gd"`` (full batch, plain gradient descent), ``"sgd"`` (minibatches of
        ``batch_size``), ``"adam"`` or ``"adamw"`` (minibatches if ``batch_size`` is given); the
        optimisers of :mod:`attnlab.optim`.
    weight_decay:
        For GD/SGD and ``"adam"`` it adds ``weight_decay * param`` to the gradient, i.e. the
        gradient of ``weight_decay/2 * ||param||^2`` (``torch.optim.SGD``/``Adam``); for
        ``"adamw"`` it is decoupled (``torch.optim.AdamW``).
    lr_schedule:
        One of :data:`LR_SCHEDULES` (:func:`lr_factor`): ``"constant"``, ``"cosine"`` (a linear
        warm-up over the first 10% of the steps, then a cosine decay to zero),
        ``"warmup_stable_decay"`` (a linear warm-up over the first 25%, 1, and a linear decay
        over the last 25%) or ``"warmup:W"`` (a linear warm-up over ``W`` updates, then 1); or a
        callable ``factor(step, steps)`` giving the multiplier of the learning rate at update
        ``step`` (0-based).
    param_lr:
        ``{parameter name: learning rate}`` for parameters (names of ``model.named_parameters()``)
        that do not use ``lr``.
    max_grad_norm:
        Clip each model's gradient to this norm (the norm over all of that model's entries, for a
        batch of models one norm per model) before the optimiser step; ``None``: no clipping.
    patience:
        A model whose loss (or gradient) is not finite at a step skips that update (its gradient
        is zeroed; :attr:`History.skipped` counts these); it is declared diverged, and stops
        training, once its loss has been non-finite on ``patience`` steps in a row. The default
        1 declares it at the first. Larger values let a model of the kind whose prediction is a
        high-degree polynomial of the input survive one rare batch that overflows.
    seed:
        An int or a ``torch.Generator``; it drives minibatch selection and the sampler.
    dtype:
        ``"float32"`` or ``"float64"``.
    callbacks:
        ``{name: fn(model)}``; each value is recorded with the loss every ``record_every`` steps.
    record:
        ``"last"``: record the loss at steps ``0, record_every, ...`` and ``steps`` (the loss of
        that step's batch at the current weights; ``steps + 1`` batches are drawn). ``"mean"``:
        record at steps ``record_every, 2 record_every, ...`` and ``steps`` the mean of the
        training losses of the updates since the previous record (``steps`` batches are drawn;
        the mean is over the finite losses of the updates the model took, ``nan`` if none).
    progress:
        Show a tqdm bar on stdout; ``None`` (default) shows it only when stdout is a terminal.
    stop_after:
        Stop after this many updates of a run of ``steps`` (``None``: run them all). The
        schedule and the records are those of the whole run, so the history is the first part
        of the whole run's (a cheap checkpoint of a long run; ``tests/test_committed_results.py``).
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not callable(loss_fn):
        raise ValueError("loss_fn must be callable as loss_fn(model, *batch)")
    optimizer = check_choice("optimizer", optimizer, OPTIMIZERS)
    lr = check_real("lr", lr, minimum=0.0, strict_minimum=True)
    steps = check_int("steps", steps, minimum=0)
    stop = steps if stop_after is None else min(steps, check_int("stop_after", stop_after, minimum=0))
    weight_decay = check_real("weight_decay", weight_decay, minimum=0.0)
    if callable(lr_schedule):
        factor_of = lr_schedule
    else:
        factor_of = functools.partial(lr_factor, check_schedule(lr_schedule))
    record_every = check_int("record_every", record_every, minimum=1)
    if max_grad_norm is not None:
        max_grad_norm = check_positive("max_grad_norm", max_grad_norm)
    patience = check_int("patience", patience, minimum=1)
    masked = max_grad_norm is not None or patience > 1
    record = check_choice("record", record, ("last", "mean"))
    device = resolve_device(device)
    dtype = resolve_dtype(dtype)
    callbacks = dict(callbacks or {})
    for name, fn in callbacks.items():
        if not callable(fn):
            raise ValueError(f"callbacks[{name!r}] must be callable as fn(model)")

    sampler = data if callable(data) else None
    if sampler is None:
        if not isinstance(data, (tuple, list)) or not data:
            raise ValueError("data must be a non-empty tuple of tensors or a sampler callable")
        tensors = _to(data, device, dtype)
        n = tensors[0].shape[0]
        if any(t.shape[0] != n for t in tensors):
            raise ValueError("data tensors must share their first (sample) dimension")
    if optimizer == "gd" and batch_size is not None:
        raise ValueError("batch_size must be None for optimizer='gd' (full-batch descent)")
    if optimizer == "sgd" and batch_size is None:
        raise ValueError("batch_size must be given for optimizer='sgd'")
    if sampler is not None and batch_size is None:
        raise ValueError("batch_size must be given when data is a sampler")
    if batch_size is not None:
        batch_size = check_int("batch_size", batch_size, minimum=1)
        if sampler is None and batch_size > n:
            raise ValueError(f"batch_size must be <= the number of samples ({n}), got {batch_size}")

    gen = make_generator(seed, device="cpu")
    model.to(device=device, dtype=dtype)
    opt = _make_optimizer(optimizer, model, lr, dict(param_lr or {}), weight_decay, betas)

    def next_batch():
        if sampler is not None:
            return _to(sampler(batch_size, gen), device, dtype)
        if batch_size is None:
            return tensors
        idx = torch.randperm(n, generator=gen)[:batch_size].to(device)
        return tuple(t[idx] for t in tensors)

    history = History()
    alive, bad_run, skipped, window, count, grouped = None, None, None, None, None, False
    bar = tqdm(total=steps, file=sys.stdout, disable=not _progress_enabled(progress), leave=False)
    try:
        for step in range(steps + (record == "last")):
            out = loss_fn(model, *next_batch())
            grouped = isinstance(out, Mapping)
            parts = _loss_parts(out, model)
            if alive is None:
                alive = {k: torch.ones(v.shape, dtype=torch.bool, device=v.device) for k, v in parts.items()}
                bad_run = {k: torch.zeros_like(v, dtype=torch.long) for k, v in alive.items()}
                skipped = {k: torch.zeros_like(v) for k, v in bad_run.items()}
            elif {k: v.shape for k, v in parts.items()} != {k: v.shape for k, v in alive.items()}:
                raise ValueError("loss_fn must return the same keys and shapes every step")
            finite = {k: torch.isfinite(v.detach()) for k, v in parts.items()}
            bad_run = {k: torch.where(finite[k], 0, bad_run[k] + 1) for k in parts}
            alive = {k: alive[k] & (bad_run[k] < patience) for k in parts}
            use = {k: alive[k] & finite[k] for k in parts}
            kept = {
                k: torch.where(use[k], v.detach(), torch.full_like(v, float("nan"))) for k, v in parts.items()
            }
            if record == "last" and (step % record_every == 0 or step == steps):
                _record(history, step, kept, grouped, model, callbacks)
            if step == stop:
                break
            opt.zero_grad()
            if not grouped and out.ndim == 0 and not masked:  # one model: its loss as it is
                out.backward()
            else:
                sum(torch.where(use[k], v, torch.zeros_like(v)).sum() for k, v in parts.items()).backward()
                for k in parts:
                    updated = _mask_gradients(model.get_submodule(k), use[k], max_grad_norm)
                    skipped[k] += alive[k] & ~updated
            opt.step(factor_of(step, steps))
            bar.update(1)
            if record == "mean":
                if window is None:
                    window = {k: torch.zeros_like(v) for k, v in kept.items()}
                    count = {k: torch.zeros_like(v) for k, v in kept.items()}
                for k, v in kept.items():
                    window[k] += torch.nan_to_num(v, nan=0.0)
                    count[k] += torch.isfinite(v)
                if (step + 1) % record_every == 0 or step + 1 == steps:
                    _record(
                        history,
                        step + 1,
                        {k: window[k] / count[k] for k in window},
                        grouped,
                        model,
                        callbacks,
                    )
                    window, count = None, None
    finally:
        bar.close()
    if alive is not None:
        diverged = {k: ~v.cpu().numpy() for k, v in alive.items()}
        history.diverged = diverged if grouped else diverged[""]
        counts = {k: v.cpu().numpy() for k, v in skipped.items()}
        history.skipped = counts if grouped else counts[""]
    return history


def _loss_parts(out, model) -> dict:
    """``{submodule name: losses}`` from what ``loss_fn`` returned (``""``: the whole model)."""
    if isinstance(out, torch.Tensor):
        return {"": out}
    if not isinstance(out, Mapping) or not out:
        raise ValueError("loss_fn must return a tensor (a scalar or one loss per model) or a dict of them")
    names = dict(model.named_modules())
    for k, v in out.items():
        if k not in names or not k:
            raise ValueError(f"loss_fn's dict keys must name submodules of the model, got {k!r}")
        if not isinstance(v, torch.Tensor):
            raise ValueError(f"loss_fn's dict values must be tensors, got {type(v).__name__} for {k!r}")
    return dict(out)


def _record(history, step, losses, grouped, model, callbacks):
    history.steps.append(step)
    values = {k: float(v) if v.ndim == 0 else v.cpu().numpy() for k, v in losses.items()}
    history.loss.append(values if grouped else values[""])
    _evaluate_callbacks(model, callbacks, history)
