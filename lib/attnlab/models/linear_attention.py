"""Part I (paper A): one linear self-attention layer on one-hot tokens, and its softmax twin."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from attnlab.tasks import histogram as th
from attnlab.validation import (
    check_finite,
    check_int,
    check_real,
    check_shape,
    make_generator,
    resolve_dtype,
)

__all__ = ["LinearSelfAttention", "SoftmaxSelfAttention", "verify_task_solution"]


class LinearSelfAttention(nn.Module):
    """One linear self-attention layer, one head, on one-hot tokens (Part I, chapter 1).

    Parameters are the merged key-query matrix ``W = W_Q W_K^T`` (``[d, d]``) and the value
    vector ``v`` (``[d]``: one scalar value per letter, the value matrix followed by the readout).
    For one-hot tokens ``X`` (``[batch, N, d]``) the layer computes, with no softmax, no positional
    embedding, no MLP and no normalisation (eq. ``eq-model``)::

        A = X W X^T          # attention scores  [batch, N, N]
        f = A (X v)          # outputs           [batch, N]

    ``W0`` / ``v0`` set the initial values; otherwise the entries are i.i.d.
    ``init_scale * N(0, 1)`` drawn from ``seed``.
    """

    def __init__(self, d: int, *, init_scale: float = 0.1, seed=0, W0=None, v0=None, dtype="float64"):
        # Imported here so that the shared import block of this file stays untouched (merges).

        super().__init__()
        d = check_int("d", d, minimum=1)
        init_scale = check_real("init_scale", init_scale, minimum=0.0)
        dtype = resolve_dtype(dtype)
        gen = make_generator(seed)
        W = init_scale * torch.randn(d, d, generator=gen, dtype=torch.float64)
        v = init_scale * torch.randn(d, generator=gen, dtype=torch.float64)
        if W0 is not None:
            W = torch.as_tensor(W0, dtype=torch.float64).clone()
            check_shape("W0", W, (d, d))
            check_finite("W0", W)
        if v0 is not None:
            v = torch.as_tensor(v0, dtype=torch.float64).clone()
            check_shape("v0", v, (d,))
            check_finite("v0", v)
        self.d = d
        self.W = nn.Parameter(W.to(dtype))  # [d, d]
        self.v = nn.Parameter(v.to(dtype))  # [d]

    @property
    def Q(self) -> torch.Tensor:
        """The first layer of the equivalent diagonal network: ``Q = W`` (chapter 2)."""
        return self.W

    def scores(self, X: torch.Tensor) -> torch.Tensor:
        """Attention scores ``A = X W X^T``: ``[batch, N, d] -> [batch, N, N]``."""
        X = self._check_X(X)
        return X @ self.W @ X.transpose(-1, -2)

    def forward(self, X: torch.Tensor, return_scores: bool = False):
        """``f = (X W X^T)(X v)``: ``X`` ``[batch, N, d]`` (or ``[N, d]``) -> ``f`` ``[batch, N]``.

        With ``return_scores=True`` it returns ``(f, A)`` with ``A = X W X^T`` ``[batch, N, N]``.
        """
        X = self._check_X(X)
        A = X @ self.W @ X.transpose(-1, -2)  # [batch, N, N]
        f = (A @ (X @ self.v).unsqueeze(-1)).squeeze(-1)  # [batch, N]
        return (f, A) if return_scores else f

    def _check_X(self, X):
        if not isinstance(X, torch.Tensor):
            raise ValueError(f"X must be a torch tensor of shape [batch, N, {self.d}]")
        if X.ndim not in (2, 3) or X.shape[-1] != self.d:
            raise ValueError(f"X must have shape [batch, N, {self.d}] or [N, {self.d}], got {list(X.shape)}")
        return X.to(self.W.dtype)


class SoftmaxSelfAttention(LinearSelfAttention):
    """The same layer with a row-wise softmax on the scores (Part I, chapter 4, for contrast).

    ``A = softmax_rows(X W X^T)``, ``f = A (X v)``: each output is a convex combination of the
    values, which is where the diagonal-network theory of Part I stops.
    """

    def forward(self, X: torch.Tensor, return_scores: bool = False):
        X = self._check_X(X)
        A = torch.softmax(X @ self.W @ X.transpose(-1, -2), dim=-1)  # [batch, N, N]
        f = (A @ (X @ self.v).unsqueeze(-1)).squeeze(-1)  # [batch, N]
        return (f, A) if return_scores else f


def verify_task_solution(W, v, M, *, lengths=(1, 5, 17, 40), n_seq: int = 64, seed=0, atol=1e-9) -> str:
    """Exercise checker (chapter 1): does the layer with weights ``(W, v)`` solve the task ``M``?

    Runs :class:`LinearSelfAttention` with ``W0=W``, ``v0=v`` (any float dtype) on ``n_seq`` random
    sequences of each length in ``lengths`` and compares its output with ``y = X M h``
    (eq. ``eq-task``). Raises ``AssertionError`` with a hint and returns a confirmation message.
    """
    M = torch.as_tensor(np.asarray(M, dtype=float))
    if M.ndim != 2 or M.shape[0] != M.shape[1]:
        raise ValueError(f"M must be a square [d, d] task matrix, got shape {list(M.shape)}")
    d = M.shape[0]
    layer = LinearSelfAttention(d, W0=torch.as_tensor(W).double(), v0=torch.as_tensor(v).double())
    for N in lengths:
        X = th.sample_sequences(n_seq, check_int("lengths", N, minimum=1), d, seed=seed)
        with torch.no_grad():
            err = (layer(X) - th.targets(X, M)).abs().max().item()
        if err > atol:
            P = layer.W.detach() * layer.v.detach()[None, :]
            gap = (P - M).abs().max().item()
            raise AssertionError(
                f"off by {err:.3g} on sequences of length {N}: W Diag(v) differs from M by {gap:.3g} "
                "(the layer computes X W Diag(v) h, eq-identity)"
            )
    return f"Correct: the layer computes y = X M h on sequences of lengths {', '.join(map(str, lengths))}."
