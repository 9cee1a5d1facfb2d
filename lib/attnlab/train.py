"""Trainers: full-batch gradient descent, minibatch SGD and Adam on any ``nn.Module``.

One function, :func:`train`, covers the three optimizers used in the book. The data are either a
tuple of tensors whose first dimension indexes samples (a fixed training set) or a *sampler*, a
callable ``sample(batch_size, generator) -> tuple of tensors`` that draws fresh data every step
(online learning, as in Parts I and III). The loss is a callable ``loss_fn(model, *batch)``
returning a scalar tensor, so any model and any loss fit.

Every run returns a :class:`History` with the loss at each recorded step and any tracked
quantity (overlaps, weights, ...) computed by user callbacks. The progress bar is ``tqdm`` on
*stdout* and is shown only when stdout is a terminal, so book builds and tests stay silent.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from attnlab.validation import (
    check_choice,
    check_int,
    check_real,
    make_generator,
    resolve_device,
    resolve_dtype,
)

OPTIMIZERS = ("gd", "sgd", "adam")


@dataclass
class History:
    """What a training run recorded.

    ``steps[k]`` is the optimizer step after which ``loss[k]`` and every ``tracked[name][k]`` were
    measured (step 0 is the initial point).
    """

    steps: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    tracked: dict[str, list] = field(default_factory=dict)

    def as_arrays(self) -> dict[str, np.ndarray]:
        """Return ``{"step": ..., "loss": ..., name: ...}`` as numpy arrays."""
        out = {"step": np.asarray(self.steps), "loss": np.asarray(self.loss)}
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


class _SGD:
    """Plain (stochastic) gradient descent: ``p <- p - lr * (grad + weight_decay * p)``.

    Written out rather than taken from ``torch.optim``, whose first use imports ``torch._dynamo``
    and costs seconds in every fresh kernel of a book build.
    """

    def __init__(self, params, lr, weight_decay):
        self.params, self.lr, self.weight_decay = list(params), lr, weight_decay

    @torch.no_grad()
    def step(self):
        for p in self.params:
            if p.grad is not None:
                p.add_(p.grad + self.weight_decay * p if self.weight_decay else p.grad, alpha=-self.lr)


class _AdamW:
    """Adam with decoupled weight decay (Loshchilov and Hutter), as ``torch.optim.AdamW``."""

    def __init__(self, params, lr, weight_decay, betas, eps=1e-8):
        self.params, self.lr, self.weight_decay, self.betas, self.eps = (
            list(params),
            lr,
            weight_decay,
            betas,
            eps,
        )
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]
        self.t = 0

    @torch.no_grad()
    def step(self):
        self.t += 1
        b1, b2 = self.betas
        c1, c2 = 1 - b1**self.t, 1 - b2**self.t
        for p, m, v in zip(self.params, self.m, self.v, strict=True):
            if p.grad is None:
                continue
            if self.weight_decay:
                p.mul_(1 - self.lr * self.weight_decay)
            m.mul_(b1).add_(p.grad, alpha=1 - b1)
            v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            p.addcdiv_(m, (v / c2).sqrt_().add_(self.eps), value=-self.lr / c1)


def _make_optimizer(name, params, lr, weight_decay, betas):
    if name in ("gd", "sgd"):
        return _SGD(params, lr, weight_decay)
    return _AdamW(params, lr, weight_decay, betas)


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
    seed: int | torch.Generator = 0,
    device: str | torch.device = "cpu",
    dtype: str | torch.dtype = "float32",
    callbacks: Mapping[str, Callable[[nn.Module], object]] | None = None,
    record_every: int = 1,
    progress: bool | None = None,
) -> History:
    """Train ``model`` in place and return its :class:`History`.

    Parameters
    ----------
    model:
        Any ``nn.Module``; it is moved to ``device`` and ``dtype``.
    loss_fn:
        ``loss_fn(model, *batch) -> scalar tensor``.
    data:
        A tuple of tensors with a common first (sample) dimension, or a sampler
        ``sample(batch_size, generator) -> tuple of tensors`` drawing fresh data each step.
    optimizer:
        ``"gd"`` (full batch, plain gradient descent), ``"sgd"`` (minibatches of
        ``batch_size``) or ``"adam"`` (AdamW; minibatches if ``batch_size`` is given).
    weight_decay:
        Decoupled for Adam; for GD/SGD it adds ``weight_decay * param`` to the gradient, i.e.
        the gradient of ``weight_decay/2 * ||param||^2``.
    seed:
        An int or a ``torch.Generator``; it drives minibatch selection and the sampler.
    dtype:
        ``"float32"`` or ``"float64"``.
    callbacks:
        ``{name: fn(model)}``; each value is recorded with the loss every ``record_every`` steps.
    progress:
        Show a tqdm bar on stdout; ``None`` (default) shows it only when stdout is a terminal.
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not callable(loss_fn):
        raise ValueError("loss_fn must be callable as loss_fn(model, *batch)")
    optimizer = check_choice("optimizer", optimizer, OPTIMIZERS)
    lr = check_real("lr", lr, minimum=0.0, strict_minimum=True)
    steps = check_int("steps", steps, minimum=0)
    weight_decay = check_real("weight_decay", weight_decay, minimum=0.0)
    record_every = check_int("record_every", record_every, minimum=1)
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
    opt = _make_optimizer(optimizer, model.parameters(), lr, weight_decay, betas)

    def next_batch():
        if sampler is not None:
            return _to(sampler(batch_size, gen), device, dtype)
        if batch_size is None:
            return tensors
        idx = torch.randperm(n, generator=gen)[:batch_size].to(device)
        return tuple(t[idx] for t in tensors)

    history = History()
    bar = tqdm(total=steps, file=sys.stdout, disable=not _progress_enabled(progress), leave=False)
    try:
        for step in range(steps + 1):
            batch = next_batch()
            loss = loss_fn(model, *batch)
            if loss.ndim != 0:
                raise ValueError("loss_fn must return a scalar tensor")
            if step % record_every == 0 or step == steps:
                history.steps.append(step)
                history.loss.append(float(loss.detach()))
                _evaluate_callbacks(model, callbacks, history)
            if step == steps:
                break
            model.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            bar.update(1)
    finally:
        bar.close()
    return history
