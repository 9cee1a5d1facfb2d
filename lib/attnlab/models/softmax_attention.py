"""Part II (paper B): low-rank softmax attention, its variants, the positional linear baseline.

Chapter ``phase-transition/01-model`` introduces :class:`TiedLowRankAttention`; chapter
``phase-transition/05-questions`` trains the variants :class:`UntiedLowRankAttention` (a separate
key) and :class:`TiedLowRankAttentionWithValue` (a learned value matrix), and the one-layer
:class:`HistogramTransformer` of the bridge to Part I.

**Many runs at once.** The attention models take ``runs``, a tuple of leading dimensions: with
``runs=(I, S)`` the query ``Q`` has shape ``[I, S, d, r]`` and holds ``I x S`` independent models
(for instance ``I`` starts times ``S`` seeds). The per-run risk is a sum of independent terms, so
the gradient of the summed risk is the stack of the per-run gradients: any optimiser acting
elementwise trains each run exactly as if it were alone (:func:`attnlab.train.train` takes such
per-run losses).

**Two forms of the same model** (for ``L = 2`` tokens, the setting of the paper):

* the *token form* :meth:`~TiedLowRankAttention.forward`, ``softmax_row(x Q Q^T x^T / d) x``, the
  equation of the chapters (chapter 01, eq-pt-student);
* the *fast form* :meth:`~TiedLowRankAttention.risk` on a training set reduced once by
  :meth:`~TiedLowRankAttention.reduce`. For ``L = 2`` a row softmax is a sigmoid,
  ``S = [[a, 1 - a], [1 - b, b]]``, and ``||S x - y||^2 / d = Tr(S G S^T) - 2 Tr(S P) + c`` with
  the per-sample ``2 x 2`` matrices ``G = x x^T / d``, ``P = x y^T / d`` and ``c = ||y||^2 / d``
  (:meth:`~TiedLowRankAttention.gram`): a quadratic in ``(a, b)``
  (:meth:`~TiedLowRankAttention.quadratic_coefficients`). Each step then touches the
  ``d``-dimensional data only through ``h = x Q / sqrt(d)`` and its adjoint. For tied rank-one
  ``Q`` the gradient is written out by hand (:class:`_TiedRankOneRisk`, a
  ``torch.autograd.Function``, about twice as fast as autograd), so a training loop just calls
  ``.backward()``. ``tests/test_softmax_attention.py`` checks both forms and both gradients
  against autograd of the token form.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from attnlab.validation import (
    check_finite,
    check_int,
    check_shape,
    make_generator,
    resolve_dtype,
)

__all__ = [
    "HistogramTransformer",
    "PositionalLinear",
    "TiedLowRankAttention",
    "TiedLowRankAttentionWithValue",
    "TwoTokenData",
    "UntiedLowRankAttention",
]


class TwoTokenData(NamedTuple):
    """A data set of the two-token task reduced once for the fast form (:meth:`TiedLowRankAttention.reduce`).

    Every field leads with the data's runs dimension ``S`` (a separate training set per seed).
    """

    x: torch.Tensor  # [S, n, 2, d]
    y: torch.Tensor  # [S, n, 2, d]
    Xt: torch.Tensor  # [S, d, 2 n]: the tokens as columns, sample major
    k2: torch.Tensor  # [S, n]: coefficients of the quadratic risk in (a, b), times the weights
    ka: torch.Tensor
    kb: torch.Tensor
    k0: torch.Tensor
    weights: torch.Tensor  # [S, n]: weight of each sample (0 for padding)


class _TiedRankOneRisk(torch.autograd.Function):
    """Per-sample risk of tied rank-one attention with its gradient written out (fast form).

    With ``h_l = x_l^T Q / sqrt(d)``, ``a = sigmoid(h_1 (h_1 - h_2))``, ``b = sigmoid(h_2 (h_2 - h_1))``
    and the per-sample risk ``(k2 (a^2 + b^2) + ka a + kb b + k0) / 2``: ``g_a = (k2 a + ka/2) a (1-a)``,
    ``g_b = (k2 b + kb/2) b (1-b)``, ``dR/dh_1 = g_a (2h_1 - h_2) - g_b h_2``,
    ``dR/dh_2 = g_b (2h_2 - h_1) - g_a h_1``, and ``dR/dQ = sum_mu sum_l x_l dR/dh_l / sqrt(d)``.
    Inputs: ``Qp`` ``[S, P, d]`` (``P`` runs per data set), ``Xt`` ``[S, d, 2n]``, the coefficients
    ``[S, n]``; output ``[S, P, n]``.
    """

    @staticmethod
    def forward(ctx, Qp, Xt, k2, ka, kb, k0):
        S_, P, d = Qp.shape
        scale = d**-0.5
        k2, ka, kb, k0 = (t[:, None] for t in (k2, ka, kb, k0))  # [S, 1, n]
        h = (Qp @ Xt).mul_(scale).view(S_, P, -1, 2)  # [S, P, n, 2]
        h1, h2 = h[..., 0], h[..., 1]
        dh = h1 - h2
        a = torch.sigmoid(h1 * dh)
        b = torch.sigmoid(-h2 * dh)
        ga = (k2 * a + 0.5 * ka) * a * (1 - a)
        gb = (k2 * b + 0.5 * kb) * b * (1 - b)
        g = torch.stack([ga * (h1 + dh) - gb * h2, gb * (h2 - dh) - ga * h1], -1)  # [S, P, n, 2]
        ctx.save_for_backward(g, Xt)
        return 0.5 * (k2 * (a * a + b * b) + ka * a + kb * b + k0)

    @staticmethod
    def backward(ctx, grad):
        g, Xt = ctx.saved_tensors
        S_, P = g.shape[:2]
        g = (g * grad[..., None]).reshape(S_, P, -1)
        return (g @ Xt.transpose(1, 2)).mul_(Xt.shape[1] ** -0.5), None, None, None, None, None


class TiedLowRankAttention(nn.Module):
    """Tied low-rank softmax attention of Part II (chapter ``phase-transition/01-model``).

    ``f_Q(x) = softmax_row(x Q Q^T x^T / d) x`` with query = key = ``Q`` of shape ``[d, r]`` and
    value = identity. ``Q`` has entries of order one; the ``1/d`` scaling keeps the scores of
    order one. ``init`` is ``"random"`` (``0.1 N(0, 1)`` entries, as the authors' random start),
    ``"positional"`` (every column ``1_d / sqrt(d)``) or a tensor of shape ``[*runs, d, r]`` (e.g.
    ``Q*`` for the semantic start; ``[d]`` is accepted for ``r = 1`` and no runs). ``runs`` are
    leading dimensions of independent models (see the module docstring).
    """

    _hand_gradient = True  # _TiedRankOneRisk holds for K = Q and value = identity

    def __init__(self, d: int, r: int = 1, *, init="random", seed=0, dtype="float32", runs=()):
        super().__init__()
        self.d = check_int("d", d, minimum=1)
        self.r = check_int("r", r, minimum=1)
        if isinstance(runs, int) or not all(isinstance(s, int) and s >= 1 for s in runs):
            raise ValueError(f"runs must be a tuple of positive integers, got {runs!r}")
        self.runs = tuple(runs)
        dtype = resolve_dtype(dtype)
        shape = (*self.runs, self.d, self.r)
        if not isinstance(init, str):
            Q = torch.as_tensor(init, dtype=dtype)
            if Q.ndim == 1 and not self.runs:
                Q = Q[:, None]
            check_shape("init", Q, shape)
            check_finite("init", Q)
            Q = Q.clone()
        elif init == "random":
            Q = 0.1 * torch.randn(shape, generator=make_generator(seed), dtype=dtype)
        elif init == "positional":
            Q = torch.full(shape, self.d**-0.5, dtype=dtype)
        else:
            raise ValueError(f"init must be 'random', 'positional' or a [*runs, d, r] tensor, got {init!r}")
        self.Q = nn.Parameter(Q)  # [*runs, d, r]

    # -- token form ------------------------------------------------------------------------------

    def _check_input(self, x: torch.Tensor) -> None:
        least = 2 + (len(self.runs) > 0)
        if not isinstance(x, torch.Tensor) or x.ndim < least or x.shape[-1] != self.d:
            shape = list(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            lead = "[*runs, n, " if self.runs else "[..., "
            raise ValueError(f"x must be a tensor of shape {lead}n_tokens, {self.d}], got {shape}")

    def _project(self, x: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
        """``x W / sqrt(d)``: ``x`` ``[..., L, d]`` (with runs: ``[*runs, n, L, d]``) -> ``[..., L, r]``."""
        return x @ (W.unsqueeze(-3) if self.runs else W) * self.d**-0.5

    def _key(self) -> torch.Tensor:
        return self.Q

    def _value(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        """The attention matrix ``softmax_row(x Q K^T x^T / d)`` (``K = Q`` when tied), ``[..., L, L]``."""
        self._check_input(x)
        return torch.softmax(self._project(x, self.Q) @ self._project(x, self._key()).transpose(-1, -2), -1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``[..., L, d]`` (with runs: ``[*runs, n, L, d]``) -> ``f(x)``, same shape."""
        return self.attention(x) @ self._value(x)

    # -- fast form (L = 2) ----------------------------------------------------------------------

    @staticmethod
    def gram(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per-sample ``G = x x^T / d``, ``P = x y^T / d`` (``[..., n, 2, 2]``) and ``c = ||y||^2 / d``."""
        d = x.shape[-1]
        G = x @ x.transpose(-1, -2) / d
        P = x @ y.transpose(-1, -2) / d
        c = (y * y).sum((-1, -2)) / d
        return G, P, c

    @staticmethod
    def reduced_risk(S: torch.Tensor, G: torch.Tensor, P: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """Per-sample ``||S x - y||^2 / (2d)`` from the Gram reduction: ``[..., n]``."""
        SG = S @ G
        return 0.5 * ((SG * S).sum((-1, -2)) - 2.0 * (S * P.transpose(-1, -2)).sum((-1, -2)) + c)

    @staticmethod
    def quadratic_coefficients(G, P, c):
        """With ``S = [[a, 1-a], [1-b, b]]`` the per-sample risk ``Tr(SGS^T)/2 - Tr(SP) + c/2`` is
        ``(k2 (a^2 + b^2) + ka a + kb b + k0) / 2``; returns ``(k2, ka, kb, k0)``, each ``[..., n]``."""
        G11, G12, G22 = G[..., 0, 0], G[..., 0, 1], G[..., 1, 1]
        P11, P12, P21, P22 = P[..., 0, 0], P[..., 0, 1], P[..., 1, 0], P[..., 1, 1]
        k2 = G11 - 2 * G12 + G22
        ka = 2 * (G12 - G22 - P11 + P21)
        kb = 2 * (G12 - G11 + P12 - P22)
        k0 = G11 + G22 - 2 * (P12 + P21) + c
        return k2, ka, kb, k0

    @classmethod
    def reduce(cls, x: torch.Tensor, y: torch.Tensor, weights: torch.Tensor | None = None) -> TwoTokenData:
        """Reduce a data set ``x, y`` ``[S, n, 2, d]`` (``S`` data sets) once for :meth:`risk`.

        ``weights`` ``[S, n]`` multiply each sample's risk (0 pads a shorter training set exactly).
        """
        if not isinstance(x, torch.Tensor) or x.ndim != 4 or x.shape[-2] != 2:
            raise ValueError(f"x must be a tensor of shape [S, n, 2, d], got {getattr(x, 'shape', x)}")
        check_shape("y", y, tuple(x.shape))
        if weights is None:
            weights = torch.ones(x.shape[:2], dtype=x.dtype, device=x.device)
        check_shape("weights", weights, tuple(x.shape[:2]))
        k = tuple(t * weights for t in cls.quadratic_coefficients(*cls.gram(x, y)))
        S_, n, L, d = x.shape
        Xt = x.reshape(S_, n * L, d).transpose(1, 2).contiguous()
        return TwoTokenData(x, y, Xt, *k, weights)

    def _fast(self, W: torch.Tensor, S_: int) -> torch.Tensor:
        """``W`` ``[*runs, d, r]`` -> ``[S, P r, d]``: the ``P`` runs that share each data set."""
        return W.reshape(-1, S_, self.d, self.r).permute(1, 0, 3, 2).reshape(S_, -1, self.d)

    def _runs_of(self, t: torch.Tensor, S_: int) -> torch.Tensor:
        """``[S, P, *rest]`` -> ``[*runs, *rest]`` (the inverse of the layout of :meth:`_fast`)."""
        return t.transpose(0, 1).reshape(*self.runs, *t.shape[2:]) if self.runs else t[0, 0]

    def _per_run(self, t: torch.Tensor) -> torch.Tensor:
        """A field of the data, ``[S, ...]``, as it broadcasts against ``[*runs, ...]``."""
        return t if self.runs else t[0]

    def _check_data(self, data) -> int:
        if not isinstance(data, TwoTokenData):
            raise ValueError("data must be a TwoTokenData from TiedLowRankAttention.reduce")
        S_ = data.Xt.shape[0]
        if data.Xt.shape[1] != self.d or (self.runs[-1:] or (1,))[0] != S_:
            raise ValueError(f"data must hold [S, n, 2, {self.d}] with S = the last runs dimension, got {S_}")
        return S_

    def gates(self, data: TwoTokenData) -> tuple[torch.Tensor, torch.Tensor]:
        """The attention ``S = [[a, 1 - a], [1 - b, b]]`` on ``data``: ``a``, ``b`` ``[*runs, n]``.

        ``a = sigmoid(s_11 - s_12)`` and ``b = sigmoid(s_22 - s_21)`` with the scores ``s = h_Q h_K^T``.
        """
        S_ = self._check_data(data)

        def scores(W):  # [*runs, n, 2, r]
            h = (self._fast(W, S_) @ data.Xt) * self.d**-0.5  # [S, P r, 2 n]
            h = h.view(S_, -1, self.r, h.shape[-1] // 2, 2).permute(0, 1, 3, 4, 2)  # [S, P, n, 2, r]
            return self._runs_of(h, S_)

        hq = scores(self.Q)
        hk = hq if self._key() is self.Q else scores(self._key())
        dk = hk[..., 0, :] - hk[..., 1, :]
        return torch.sigmoid((hq[..., 0, :] * dk).sum(-1)), torch.sigmoid(-(hq[..., 1, :] * dk).sum(-1))

    def sample_risks(self, data: TwoTokenData, *, fast: bool = True) -> torch.Tensor:
        """Per-sample ``||f(x) - y||^2 / (2d)`` (times the sample weights), ``[*runs, n]``.

        ``fast=True`` uses the hand-written gradient (:class:`_TiedRankOneRisk`) when ``r = 1``.
        """
        if fast and self.r == 1 and self._hand_gradient:
            S_ = self._check_data(data)
            risk = _TiedRankOneRisk.apply(self._fast(self.Q, S_), data.Xt, *data[3:7])  # [S, P, n]
            return self._runs_of(risk, S_)
        a, b = self.gates(data)
        k2, ka, kb, k0 = (self._per_run(t) for t in data[3:7])
        return 0.5 * (k2 * (a * a + b * b) + ka * a + kb * b + k0)

    def risk(self, data: TwoTokenData, *, fast: bool = True) -> torch.Tensor:
        """The summed risk ``sum_mu ||f(x^mu) - y^mu||^2 / (2d)`` of every run, ``[*runs]`` (eq-pt-risk
        without the penalty; the trainer's weight decay adds ``lam/2 ||Q||^2``)."""
        return self.sample_risks(data, fast=fast).sum(-1)

    def penalty(self) -> torch.Tensor:
        """``||Q||^2`` (plus the squared norms of the other parameters) of every run, ``[*runs]``."""
        n = len(self.runs)
        return sum(p.detach().square().flatten(n).sum(-1) for p in self.parameters())


class UntiedLowRankAttention(TiedLowRankAttention):
    """Low-rank softmax attention with a separate key: ``softmax_row(x Q K^T x^T / d) x`` (chapter 05).

    ``K`` starts equal to ``Q`` (``init`` and ``seed`` as for :class:`TiedLowRankAttention`), so the
    untied model starts where the tied one does.
    """

    _hand_gradient = False

    def __init__(self, d: int, r: int = 1, *, init="random", seed=0, dtype="float32", runs=()):
        super().__init__(d, r, init=init, seed=seed, dtype=dtype, runs=runs)
        self.K = nn.Parameter(self.Q.detach().clone())  # [*runs, d, r]

    def _key(self) -> torch.Tensor:
        return self.K


class TiedLowRankAttentionWithValue(TiedLowRankAttention):
    """Tied low-rank softmax attention with a learned value: ``softmax_row(x Q Q^T x^T / d) x W``.

    The reviewers' question of chapter 05: ``W`` (``[*runs, d, d]``) starts at the identity, where
    the model is :class:`TiedLowRankAttention`.
    """

    _hand_gradient = False

    def __init__(self, d: int, r: int = 1, *, init="random", seed=0, dtype="float32", runs=()):
        super().__init__(d, r, init=init, seed=seed, dtype=dtype, runs=runs)
        W = torch.eye(self.d, dtype=self.Q.dtype, device=self.Q.device).expand(*self.runs, self.d, self.d)
        self.W = nn.Parameter(W.clone())  # [*runs, d, d]

    def _value(self, x: torch.Tensor) -> torch.Tensor:
        if not self.runs:
            return x @ self.W
        return torch.einsum("...nld,...de->...nle", x, self.W)  # no copy of W per sample

    def sample_risks(self, data: TwoTokenData, *, fast: bool = True) -> torch.Tensor:
        """Per-sample ``||S x W - y||^2 / (2d)`` (times the sample weights), ``[*runs, n]``."""
        a, b = self.gates(data)
        S = torch.stack([torch.stack([a, 1 - a], -1), torch.stack([1 - b, b], -1)], -2)  # [*runs, n, 2, 2]
        res = S @ self._value(self._per_run(data.x)) - self._per_run(data.y)
        return (res * res).sum((-1, -2)) / (2 * self.d) * self._per_run(data.weights)


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


class HistogramTransformer(nn.Module):
    """The authors' one-layer model for the histogram task (``src/transformer.py``), scaled down.

    Part II's bridge to Part I (chapter ``phase-transition/05-questions``, experiment
    ``pt_histogram``). Token and learned positional embeddings live in two halves of the model
    dimension; the attention's queries and keys read only one half (``attention_input`` is
    ``"semantic"`` or ``"positional"``), its values the whole; then LayerNorm and a two-layer ReLU
    read-out to ``seq_len + 1`` classes (the count of each token).
    """

    def __init__(self, seq_len, alphabet, dim, hidden, attention_input, generator):
        super().__init__()
        if attention_input not in ("semantic", "positional"):
            raise ValueError(f"attention_input must be 'semantic' or 'positional', got {attention_input!r}")
        half = dim // 2
        self.tok = nn.Parameter(torch.randn(alphabet, half, generator=generator) / half**0.5)
        self.pos = nn.Parameter(torch.randn(seq_len, half, generator=generator) / half**0.5)
        self.Q = nn.Parameter(torch.randn(half, half, generator=generator) / half**0.5)
        self.K = nn.Parameter(torch.randn(half, half, generator=generator) / half**0.5)
        self.V = nn.Parameter(torch.randn(dim, dim, generator=generator) / dim**0.5)
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, seq_len + 1)
        self.attention_input = attention_input
        with torch.no_grad():
            for layer in (self.fc1, self.fc2):
                weight = torch.randn(layer.weight.shape, generator=generator)
                layer.weight.copy_(weight / layer.in_features**0.5)
                layer.bias.zero_()

    def attention(self, x):
        """Attention ``[n, L, L]`` and the embeddings ``[n, L, dim]`` of token sequences ``x`` ``[n, L]``."""
        e_tok = self.tok[x]  # [n, L, half]
        e_pos = self.pos.expand_as(e_tok)
        a = e_tok if self.attention_input == "semantic" else e_pos
        scores = (a @ self.Q) @ (a @ self.K).transpose(-1, -2) / a.shape[-1] ** 0.5
        return torch.softmax(scores, dim=-1), torch.cat([e_tok, e_pos], -1)

    def forward(self, x):
        """Logits ``[n, L, seq_len + 1]`` of the count of each position's token."""
        A, e = self.attention(x)
        return self.fc2(torch.relu(self.fc1(self.norm(A @ e @ self.V))))
