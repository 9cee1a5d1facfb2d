"""Part II (paper B): tied low-rank softmax attention and the positional linear baseline."""

from __future__ import annotations

import torch
from torch import nn

from attnlab.validation import (
    check_finite,
    check_int,
    check_shape,
    make_generator,
    resolve_dtype,
)


class TiedLowRankAttention(nn.Module):
    """Tied low-rank softmax attention of Part II (chapter ``phase-transition/01-model``).

    ``f_Q(x) = softmax_row(x Q Q^T x^T / d) x`` with query = key = ``Q`` of shape ``[d, r]`` and
    value = identity. ``Q`` has entries of order one; the ``1/d`` scaling keeps the scores of
    order one. ``init`` is ``"random"`` (``0.1 N(0, 1)`` entries, as the authors' random start),
    ``"positional"`` (every column ``1_d / sqrt(d)``) or a tensor of shape ``[d, r]`` (e.g. ``Q*``
    for the semantic start).
    """

    def __init__(self, d: int, r: int = 1, *, init="random", seed=0, dtype="float32"):
        super().__init__()
        self.d = check_int("d", d, minimum=1)
        self.r = check_int("r", r, minimum=1)
        dtype = resolve_dtype(dtype)
        if not isinstance(init, str):
            Q = torch.as_tensor(init, dtype=dtype)
            if Q.ndim == 1:
                Q = Q[:, None]
            check_shape("init", Q, (self.d, self.r))
            check_finite("init", Q)
            Q = Q.clone()
        elif init == "random":
            Q = 0.1 * torch.randn(self.d, self.r, generator=make_generator(seed), dtype=dtype)
        elif init == "positional":
            Q = torch.full((self.d, self.r), self.d**-0.5, dtype=dtype)
        else:
            raise ValueError(f"init must be 'random', 'positional' or a [d, r] tensor, got {init!r}")
        self.Q = nn.Parameter(Q)  # [d, r]

    def _check_input(self, x: torch.Tensor) -> None:
        if not isinstance(x, torch.Tensor) or x.ndim < 2 or x.shape[-1] != self.d:
            shape = list(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"x must be a tensor of shape [..., n_tokens, {self.d}], got {shape}")

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        """The attention matrix ``softmax_row(x Q Q^T x^T / d)``, ``[..., L, L]``."""
        self._check_input(x)
        h = x @ self.Q * self.d**-0.5  # [..., L, r]
        return torch.softmax(h @ h.transpose(-1, -2), dim=-1)  # [..., L, L]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``[..., L, d]`` -> ``f_Q(x)`` ``[..., L, d]``."""
        return self.attention(x) @ x


class PositionalLinear(nn.Module):
    """The purely positional linear baseline ``f_B(x) = B x`` with ``B`` of shape ``[L, L]``.

    Chapter ``phase-transition/01-model``: ``B`` mixes the tokens with weights that depend only
    on their positions, never on their content. ``init`` is ``"zeros"``, ``"identity"`` or an
    ``[L, L]`` tensor.
    """

    def __init__(self, L: int = 2, *, init="identity", dtype="float32"):
        super().__init__()
        self.L = check_int("L", L, minimum=1)
        dtype = resolve_dtype(dtype)
        if not isinstance(init, str):
            B = torch.as_tensor(init, dtype=dtype)
            check_shape("init", B, (self.L, self.L))
            check_finite("init", B)
            B = B.clone()
        elif init == "identity":
            B = torch.eye(self.L, dtype=dtype)
        elif init == "zeros":
            B = torch.zeros(self.L, self.L, dtype=dtype)
        else:
            raise ValueError(f"init must be 'identity', 'zeros' or an [L, L] tensor, got {init!r}")
        self.B = nn.Parameter(B)  # [L, L]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``[..., L, d]`` -> ``B x`` ``[..., L, d]``."""
        if not isinstance(x, torch.Tensor) or x.ndim < 2 or x.shape[-2] != self.L:
            shape = list(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"x must be a tensor of shape [..., {self.L}, d], got {shape}")
        return self.B @ x
