"""Optimisers written out: SGD and Adam (with coupled or decoupled weight decay).

They take the same steps as ``torch.optim.SGD``, ``torch.optim.Adam`` and ``torch.optim.AdamW``
(tested step for step), but are written out because the first step of a ``torch.optim`` optimiser
imports ``torch._dynamo``, which costs seconds in every fresh kernel of a book build.

Both accept either an iterable of tensors or of *parameter groups*, dicts ``{"params": [...],
"lr": ..., "weight_decay": ...}`` whose entries override the defaults for their tensors (as in
``torch.optim``). :meth:`step` takes an ``lr_factor`` that multiplies every group's learning rate
for that step, which is how :func:`attnlab.train.train` applies a learning-rate schedule.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from attnlab.validation import check_real

__all__ = ["SGD", "Adam", "AdamW"]


def _groups(params, defaults: dict) -> list[dict]:
    """Normalise ``params`` (tensors or dicts) into groups carrying every default key."""
    params = list(params)
    if not params:
        raise ValueError("params must list at least one tensor or parameter group")
    if not all(isinstance(p, dict) for p in params):
        if any(isinstance(p, dict) for p in params):
            raise ValueError("params must be all tensors or all parameter-group dicts, not a mix")
        params = [{"params": params}]
    groups = []
    for group in params:
        unknown = set(group) - {"params", *defaults}
        if unknown:
            raise ValueError(
                f"parameter groups take keys params, {', '.join(defaults)}; got {sorted(unknown)}"
            )
        tensors = (
            list(group["params"]) if not isinstance(group["params"], torch.Tensor) else [group["params"]]
        )
        if not all(isinstance(p, torch.Tensor) for p in tensors):
            raise ValueError("params must be tensors")
        g = {**defaults, **{k: v for k, v in group.items() if k != "params"}, "params": tensors}
        g["lr"] = check_real("lr", g["lr"], minimum=0.0)
        g["weight_decay"] = check_real("weight_decay", g["weight_decay"], minimum=0.0)
        groups.append(g)
    return groups


class _Optimizer:
    """Parameter groups and ``zero_grad``, shared by :class:`SGD` and :class:`Adam`."""

    def __init__(self, params: Iterable, lr: float, weight_decay: float):
        self.param_groups = _groups(params, {"lr": lr, "weight_decay": weight_decay})

    def zero_grad(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None


class SGD(_Optimizer):
    """Plain (stochastic) gradient descent, ``p <- p - lr (grad + weight_decay p)``, as ``torch.optim.SGD``.

    ``weight_decay`` adds the gradient of ``weight_decay/2 ‖p‖²`` (no momentum).
    """

    def __init__(self, params: Iterable, lr: float, weight_decay: float = 0.0):
        super().__init__(params, lr, weight_decay)

    @torch.no_grad()
    def step(self, lr_factor: float = 1.0) -> None:
        """One step; every group's learning rate is multiplied by ``lr_factor``."""
        for group in self.param_groups:
            lr, wd = group["lr"] * lr_factor, group["weight_decay"]
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad.add(p, alpha=wd) if wd else p.grad, alpha=-lr)


class Adam(_Optimizer):
    """Adam (Kingma and Ba), the arithmetic of ``torch.optim.Adam``'s single-tensor implementation.

    ``weight_decay`` is *coupled* (an L2 term added to the gradient, as ``torch.optim.Adam``)
    unless ``decoupled=True``, which shrinks the parameters by ``1 - lr · weight_decay`` before the
    update instead (Loshchilov and Hutter; ``torch.optim.AdamW``, also :class:`AdamW`).
    """

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        *,
        decoupled: bool = False,
    ):
        super().__init__(params, lr, weight_decay)
        if len(betas) != 2 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"betas must be two numbers in [0, 1), got {betas!r}")
        self.betas = (float(betas[0]), float(betas[1]))
        self.eps = check_real("eps", eps, minimum=0.0)
        self.decoupled = bool(decoupled)
        self.t = 0
        self.state = {
            id(p): (torch.zeros_like(p), torch.zeros_like(p)) for g in self.param_groups for p in g["params"]
        }

    @torch.no_grad()
    def step(self, lr_factor: float = 1.0) -> None:
        """One step; every group's learning rate is multiplied by ``lr_factor``."""
        self.t += 1
        b1, b2 = self.betas
        bc1, bc2 = 1 - b1**self.t, 1 - b2**self.t
        for group in self.param_groups:
            lr, wd = group["lr"] * lr_factor, group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                if wd and self.decoupled:
                    p.mul_(1 - lr * wd)
                elif wd:
                    grad = grad.add(p, alpha=wd)
                m, v = self.state[id(p)]
                m.lerp_(grad, 1 - b1)
                v.mul_(b2).addcmul_(grad, grad.conj(), value=1 - b2)
                denom = (v.sqrt() / math.sqrt(bc2)).add_(self.eps)
                p.addcdiv_(m, denom, value=-lr / bc1)


class AdamW(Adam):
    """:class:`Adam` with decoupled weight decay, as ``torch.optim.AdamW`` (same default decay 0.01)."""

    def __init__(self, params: Iterable, lr: float = 1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(params, lr, betas, eps, weight_decay, decoupled=True)
