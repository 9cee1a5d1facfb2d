"""Part III (paper C): multi-layer linear transformers for in-context regression.

One class, :class:`LinearTransformer`, holds the weights of one model or of a batch of models
(leading *models* dimensions ``batch_shape``, e.g. noise settings × seeds) and computes the same
function in three forms, tested equal in float64:

- the **token form** (:meth:`~LinearTransformer.forward`, :meth:`~LinearTransformer.predict`),
  the layer as the chapters write it (chapter 01, eq. ``eq-lt-layer``)::

      Z <- Z + sum_k P_k (Z M Z^T) Q_k Z,    M = diag(1, ..., 1, 0);

- the **Gram form** (:meth:`~LinearTransformer.gram_forward`): every token moves by the same
  linear map ``T = I + K(G)`` with ``K(G) = sum_k P_k G Q_k`` and ``G = sum_{j<=n} e_j e_j^T``,
  so the next layer's Gram matrix is ``T G T^T`` and the query is ``T e_t`` — the forward pass
  needs the ``(d+1) x (d+1)`` Gram matrix and the query, never the ``n`` context tokens; its
  gradient with respect to the weights is written out by hand (:mod:`attnlab.models.gram_backward`);
- the **spectral form** of GD++ (:meth:`~LinearTransformer.spectral_forward`): a GD++ layer
  multiplies every ``x`` by ``I + omega_xx Sigma``, so ``Sigma`` keeps its eigenvectors and every
  layer is elementwise in its eigenbasis (chapter 03).

:meth:`~LinearTransformer.predict_fast` picks the fastest form; the trainer
(:func:`attnlab.icl_training.train_icl`) and the evaluations use it. The parameterisations
(``param``, ``diag_mode``) are the small classes of :mod:`attnlab.models.lt_params`; each one only says
which tensors it trains and what the layer operator ``K`` of layer ``l`` is.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from attnlab.models import gram_kernel
from attnlab.models.gram_backward import GramForward, gram_readouts_autograd, padded_state
from attnlab.models.lt_params import LT_DIAG_MODES, LT_PARAMS, PARAMETERISATIONS, default_init_scale
from attnlab.tasks.icl_regression import build_tokens, gram_inputs
from attnlab.validation import check_choice, check_int, check_real, make_generator, resolve_dtype

GRAM_CHUNK = 2048  # sequences per call of the Gram form's hand-written backward (cache-sized, measured)


# ------------------------------------------------------------------------------------------------
# The model.
# ------------------------------------------------------------------------------------------------


class LinearTransformer(nn.Module):
    """A multi-layer linear transformer for in-context regression (paper C, section 3), or a batch of them.

    Tokens are the columns of ``Z [..., batch, d+1, n+1]`` (see
    :func:`attnlab.tasks.icl_regression.build_tokens`). Layer ``l`` with ``H`` heads does

        Z <- Z + sum_k P_k (Z M Z^T) Q_k Z,    M = diag(1, ..., 1, 0),

    so keys and values see only the ``n`` context tokens while every token, the query included,
    is updated. No softmax, no ``1/n``, no MLP, no LayerNorm; the prediction is ``-y`` of the
    query token after the last layer (:meth:`predict`). Writing ``S = Z M Z^T``, the layer adds
    ``K Z`` with ``K = sum_k P_k S Q_k`` (:meth:`layer_operator`).

    ``param``: ``"full"`` (free ``P_k, Q_k``), ``"diag"`` (``P_k = diag(p_x I, p_y)``,
    ``Q_k = diag(q_x I, q_y)``, so ``K = Omega ∘ S`` with ``omega_xx = sum_k p_x q_x`` etc.,
    :meth:`omegas`) or ``"gdpp"`` (DIAG with ``q_y = 0``: ``omega_xy = omega_yy = 0``).
    ``diag_mode`` (DIAG and GD++): ``"pq"`` trains ``p, q`` per head, as the paper's heads do;
    ``"omega"`` trains the four omegas of each layer freely (:class:`FreeOmega`).

    ``batch_shape`` are leading models dimensions of every weight (``()``: one model). Weights
    are drawn ``N(0, init_scale^2)`` (default :func:`default_init_scale`) in the packed layout of
    the parameterisation, from ``seed``: an int, or a list of ints, one generator per index of the
    last models dimension (so that a seed's initialisation does not depend on the other seeds
    trained with it). Hand-set weights: :mod:`attnlab.models.gd_constructions`.
    """

    def __init__(
        self,
        d: int,
        n_layers: int,
        n_heads: int = 1,
        param: str = "full",
        *,
        diag_mode: str = "pq",
        batch_shape: Sequence[int] = (),
        init_scale: float | None = None,
        seed: int | Sequence[int] = 0,
        dtype="float32",
        device="cpu",
    ):
        super().__init__()
        self.d = check_int("d", d, minimum=1)
        self.n_layers = check_int("n_layers", n_layers, minimum=1)
        self.n_heads = check_int("n_heads", n_heads, minimum=1)
        self.param = check_choice("param", param, LT_PARAMS)
        self.diag_mode = check_choice("diag_mode", diag_mode, LT_DIAG_MODES)
        self.batch_shape = tuple(check_int("batch_shape", s, minimum=1) for s in batch_shape)
        self.parameterisation = PARAMETERISATIONS[(self.param, "pq" if param == "full" else self.diag_mode)]
        if init_scale is None:
            init_scale = default_init_scale(self.param, self.diag_mode, self.n_layers)
        init_scale = check_real("init_scale", init_scale, minimum=0.0)
        dtype = resolve_dtype(dtype)
        packed = self.parameterisation.packed_shape(self.n_layers, self.n_heads, self.d + 1)
        weights = init_scale * _randn(self.batch_shape, packed, seed, dtype, device)
        for name, value in self.parameterisation.unpack(weights).items():
            setattr(self, name, nn.Parameter(value.contiguous()))
        mask = getattr(self.parameterisation, "mask", (1.0, 1.0, 1.0, 1.0))
        self.register_buffer("omega_mask", torch.tensor(mask, dtype=dtype, device=device))

    # -- weights -------------------------------------------------------------------------------

    def omegas(self) -> torch.Tensor:
        """``[*models, n_layers, 4]``: ``(omega_xx, omega_xy, omega_yx, omega_yy)`` per layer (DIAG, GD++)."""
        if self.param == "full":
            raise ValueError("param='full' has no omegas; use P and Q (or layer_operator)")
        return self.parameterisation.omegas(self) * self.omega_mask

    def layer_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(P, Q)``, each ``[*models, n_layers, n_heads, d+1, d+1]``.

        DIAG/GD++ in ``"pq"`` mode give their diagonal matrices; ``"omega"`` mode has no P, Q.
        """
        if self.param == "full":
            return self.P, self.Q
        if self.diag_mode == "omega":
            raise ValueError("diag_mode='omega' has free omegas and no per-head P, Q; use omegas()")
        d = self.d

        def expand(v):  # [.., 2] -> [.., d+1, d+1]
            return torch.diag_embed(torch.cat([v[..., :1].expand(*v.shape[:-1], d), v[..., 1:]], dim=-1))

        return expand(self.p), expand(self.q * self.omega_mask[[0, 1]])  # GD++: q_y = 0

    def packed_weights(self) -> torch.Tensor:
        """All weights in the packed layout ``[*models, n_layers, n_heads, ...]`` (stored in result files)."""
        return self.parameterisation.pack(self)

    @classmethod
    def from_packed(cls, weights, d: int, param: str = "full", *, diag_mode: str = "pq", dtype="float64"):
        """The model (or batch of models) holding packed ``weights``, as :meth:`packed_weights` gives."""
        param = check_choice("param", param, LT_PARAMS)
        p = PARAMETERISATIONS[
            (param, "pq" if param == "full" else check_choice("diag_mode", diag_mode, LT_DIAG_MODES))
        ]
        w = torch.as_tensor(weights).to(resolve_dtype(dtype))
        k = len(p.packed_shape(1, 1, d + 1))  # trailing dims: (L, H, ...) or (L, 4)
        if w.ndim < k:
            raise ValueError(
                f"weights must be [*models, n_layers, ...] for param {param!r}, got {list(w.shape)}"
            )
        lead = tuple(w.shape[: w.ndim - k])
        L, H = w.shape[len(lead)], (w.shape[len(lead) + 1] if k >= 3 else 1)
        if tuple(p.packed_shape(L, H, d + 1)) != tuple(w.shape[len(lead) :]):
            raise ValueError(f"weights must be [*models, {p.packed_shape(L, H, d + 1)}], got {list(w.shape)}")
        model = cls(d, L, H, param, diag_mode=diag_mode, batch_shape=lead, init_scale=0.0, dtype=dtype)
        with torch.no_grad():
            for name, value in p.unpack(w).items():
                getattr(model, name).copy_(value)
        return model

    def layer_operator(self, layer: int, S: torch.Tensor) -> torch.Tensor:
        """``K = sum_k P_k S Q_k`` ``[*models, batch, d+1, d+1]`` for ``S = Z M Z^T [..., batch, d+1, d+1]``.

        For DIAG/GD++ this is ``S`` times the block-constant omega matrix (elementwise).
        """
        layer = check_int("layer", layer, minimum=0, maximum=self.n_layers - 1)
        return self.parameterisation.operator(self, layer, S)

    # -- token form ----------------------------------------------------------------------------

    def _check_Z(self, Z):
        if not isinstance(Z, torch.Tensor) or Z.ndim < 3 or Z.shape[-2] != self.d + 1 or Z.shape[-1] < 2:
            shape = list(Z.shape) if isinstance(Z, torch.Tensor) else type(Z).__name__
            raise ValueError(
                f"Z must be a tensor of shape [..., batch, d+1={self.d + 1}, n+1>=2], got {shape}"
            )
        dtype = self.omega_mask.dtype
        if Z.dtype != dtype:
            raise ValueError(f"Z (from X, y, x_query) has dtype {Z.dtype} but the model is {dtype}: cast one")

    def _context_gram(self, ctx: torch.Tensor, layer: int) -> torch.Tensor:
        """``S = Z M Z^T`` from the context tokens ``ctx [.., B, D, n]`` (keys and values)."""
        return ctx @ ctx.transpose(-1, -2)

    def hidden_states(self, Z: torch.Tensor) -> list[torch.Tensor]:
        """The token matrices ``[Z^0, Z^1, ..., Z^L]``, each ``[*models, batch, d+1, n+1]``."""
        self._check_Z(Z)
        n = Z.shape[-1] - 1
        states = [Z]
        for layer in range(self.n_layers):
            S = self._context_gram(Z[..., :n], layer)  # [.., B, d+1, d+1]: the query is masked out
            Z = Z + self.layer_operator(layer, S) @ Z
            states.append(Z)
        return states

    def forward(self, Z: torch.Tensor) -> torch.Tensor:
        """Apply all layers to the token matrix ``Z [..., batch, d+1, n+1]`` (token form)."""
        return self.hidden_states(Z)[-1]

    def predict(self, X: torch.Tensor, y: torch.Tensor, x_query: torch.Tensor) -> torch.Tensor:
        """``[*models, batch]``: the prediction ``-y_{n+1}`` read from the query token after the last layer"""
        return -self.forward(build_tokens(X, y, x_query))[..., self.d, -1]

    def predictions_by_layer(self, X: torch.Tensor, y: torch.Tensor, x_query: torch.Tensor) -> torch.Tensor:
        """``[*models, n_layers+1, batch]``: the readout ``-y_{n+1}`` after 0, 1, ..., L layers."""
        states = self.hidden_states(build_tokens(X, y, x_query))
        return -torch.stack(torch.broadcast_tensors(*[Z[..., self.d, -1] for Z in states]), dim=-2)

    # -- Gram and spectral forms ---------------------------------------------------------------

    def _gram_args(self, G, e_t):
        """``(lead, B, G, e_t, kind, w)``: the models' shape, the batch, the data flattened over the
        models (``[1, ...]`` if one data set serves them all), the form's kind and flat weights."""
        D = self.d + 1
        if G.shape[-2:] != (D, D) or e_t.shape[-1] != D:
            raise ValueError(
                f"G must be [..., B, {D}, {D}] and e_t [..., B, {D}], got {list(G.shape)}, {list(e_t.shape)}"
            )
        lead = torch.broadcast_shapes(self.batch_shape, G.shape[:-3], e_t.shape[:-2])
        B = torch.broadcast_shapes(G.shape[-3:-2], e_t.shape[-2:-1])[0]
        shared = G.shape[:-3].numel() == 1 and e_t.shape[:-2].numel() == 1  # one data set for every model
        if shared:  # broadcast over the models, no copies
            G, e_t = G.reshape(1, -1, D, D).expand(1, B, D, D), e_t.reshape(1, -1, D).expand(1, B, D)
        else:
            G, e_t = G.expand(*lead, B, D, D).reshape(-1, B, D, D), e_t.expand(*lead, B, D).reshape(-1, B, D)
        if self.param == "full":
            kind, w = "full", (self.P, self.Q)
        else:
            kind, w = "omega", (self.omegas(),)
        nb = len(self.batch_shape)
        w = [t.expand(*lead, *t.shape[nb:]).reshape(-1, *t.shape[nb:]) for t in w]
        return lead, B, G, e_t, kind, w

    def gram_half_mse(self, G: torch.Tensor, e_t: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Per-model ½·MSE ``[*models]`` of :meth:`gram_forward` against ``target [..., B]``.

        In training on the CPU (the weights need a gradient, the data do not, the kernel is built)
        the kernel computes the loss and its gradient in one pass
        (:class:`~attnlab.models.gram_kernel.GramHalfMSE`: the forward pass is not repeated in the
        backward pass); otherwise ``0.5 * ((gram_forward(G, e_t) - target) ** 2).mean(-1)``.
        """
        lead, B, G2, e2, kind, w = self._gram_args(G, e_t)
        if not isinstance(target, torch.Tensor) or target.shape[-1:] != (B,):
            raise ValueError(
                f"target must be a tensor [..., {B}], got {getattr(target, 'shape', type(target))}"
            )
        training = torch.is_grad_enabled() and any(t.requires_grad for t in w)
        if training and not (G.requires_grad or e_t.requires_grad or target.requires_grad):
            if gram_kernel.usable(kind, G2, w) and target.dtype == G2.dtype:
                t = target.expand(*lead, B).reshape(-1, B)
                return gram_kernel.GramHalfMSE.apply(kind, G2, e2, t, *w).reshape(lead)
        return 0.5 * ((self.gram_forward(G, e_t) - target) ** 2).mean(-1)

    def half_mse_from(self, inputs: dict, target: torch.Tensor) -> torch.Tensor:
        """Per-model ½·MSE ``[*models]`` of :meth:`predict_from` against ``target [..., B]``."""
        if self.fast_form == "gram" and "gram" in inputs:
            return self.gram_half_mse(*inputs["gram"], target)
        return 0.5 * ((self.predict_from(inputs) - target) ** 2).mean(-1)

    def gram_forward(
        self, G: torch.Tensor, e_t: torch.Tensor, *, return_layers: bool = False
    ) -> torch.Tensor:
        """Predictions from the context Gram matrix ``G [..., B, d+1, d+1]`` and query ``e_t [..., B, d+1]``.

        Each layer moves every token by ``T = I + K(G)``: ``e_t <- T e_t``, ``G <- T G T^T``.
        Returns ``[*models, B]``, or ``[*models, L+1, B]`` (after each layer) with ``return_layers``.
        When the data need no gradient, the compiled kernel of :mod:`~attnlab.models.gram_kernel`
        runs the form and its hand-written backward pass (where the kernel is built, on the CPU);
        otherwise, when the weights need a gradient and the data do not (training), the torch code
        of :class:`~attnlab.models.gram_backward.GramForward` with the same backward pass;
        otherwise autograd's.
        """
        lead, B, G, e_t, kind, w = self._gram_args(G, e_t)
        needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in w)
        data_grad = G.requires_grad or e_t.requires_grad
        if not data_grad and gram_kernel.usable(kind, G, w):
            # the compiled kernel (the same algorithm, cache-sized blocks of sequences)
            Y = gram_kernel.GramKernel.apply(kind, G, e_t, *w)
        elif needs_grad and not data_grad:
            X = padded_state(G, e_t).expand(len(w[0]), -1, -1, -1)
            # The hand-written backward, a few models at a time: each call's matrices (about
            # GRAM_CHUNK sequences) stay in the core's cache, whereas all models at once would not.
            step = max(1, GRAM_CHUNK // B)
            Y = torch.cat(
                [
                    GramForward.apply(kind, X[i : i + step].contiguous(), *(t[i : i + step] for t in w))
                    for i in range(0, len(X), step)
                ]
            )
        else:
            Y = gram_readouts_autograd(kind, G, e_t, *w)
        Y = Y.reshape(*lead, self.n_layers + 1, B)
        return Y if return_layers else Y[..., -1, :]

    def spectral_forward(self, s, beta, x_t, *, return_layers: bool = False) -> torch.Tensor:
        """GD++ predictions in the eigenbasis of ``Sigma``: ``O(d)`` per sequence and layer (chapter 03).

        ``s`` eigenvalues of ``Sigma``, ``beta`` and ``x_t`` the label vector ``alpha`` and the
        query in its eigenbasis (:func:`spectral_inputs`), each ``[..., B, d]``. With
        ``a = omega_xx``, ``c = omega_yx``: ``s <- s (1 + a s)^2``, ``beta <- (1 + a s)(1 + c s) beta``,
        ``y_t <- y_t + c beta^T x_t``, ``x_t <- (1 + a s) x_t``.
        """
        if self.param != "gdpp":
            raise ValueError(f"the spectral form needs param='gdpp', the model has param={self.param!r}")
        om = self.omegas()  # [*models, L, 4]
        y_t = torch.zeros_like(s[..., 0])
        outs = [-y_t]
        for layer in range(self.n_layers):
            a = om[..., layer, 0][..., None, None]  # [*models, 1, 1]
            c = om[..., layer, 2][..., None]  # [*models, 1]
            y_t = y_t + c * (beta * x_t).sum(-1)
            outs.append(-y_t)
            if layer < self.n_layers - 1:
                shrink = 1 + a * s
                beta = shrink * (1 + c[..., None] * s) * beta
                x_t = shrink * x_t
                s = s * shrink**2
        return torch.stack(torch.broadcast_tensors(*outs), dim=-2) if return_layers else outs[-1]

    @property
    def fast_form(self) -> str:
        """The form :meth:`predict_fast` uses: ``"spectral"`` for GD++, ``"gram"`` otherwise."""
        return self.parameterisation.fast_form

    def predict_from(self, inputs: dict, *, return_layers: bool = False) -> torch.Tensor:
        """The prediction from precomputed :func:`fast_inputs` (shared by models trained side by side)."""
        if self.fast_form not in inputs:
            raise ValueError(f"inputs must hold the {self.fast_form!r} form (fast_inputs(..., forms))")
        forward = self.spectral_forward if self.fast_form == "spectral" else self.gram_forward
        return forward(*inputs[self.fast_form], return_layers=return_layers)

    def predict_fast(self, X, y, x_query, *, return_layers: bool = False) -> torch.Tensor:
        """The prediction of :meth:`predict` in the fastest exact form (:attr:`fast_form`)."""
        return self.predict_from(fast_inputs(X, y, x_query, {self.fast_form}), return_layers=return_layers)

    def extra_repr(self) -> str:
        mode = f", diag_mode={self.diag_mode!r}" if self.param != "full" else ""
        models = f", batch_shape={self.batch_shape}" if self.batch_shape else ""
        shape = f"d={self.d}, n_layers={self.n_layers}, n_heads={self.n_heads}"
        return f"{shape}, param={self.param!r}{mode}{models}"


def fast_inputs(X, y, x_query, forms) -> dict:
    """The inputs of the fast forms named in ``forms`` (``"gram"``, ``"spectral"``, ``"outer"``).

    ``"gram"``: ``(G, e_t)``; ``"spectral"``: :func:`spectral_inputs`; ``"outer"``: the context's
    outer products ``e_j e_j^T [..., n, D, D]`` and ``e_t`` (decayed keys). Computed once, they
    serve every model that uses them (:meth:`LinearTransformer.predict_from`).
    """
    unknown = set(forms) - {"gram", "spectral", "outer"}
    if unknown:
        raise ValueError(f"forms must be among 'gram', 'spectral', 'outer', got {sorted(unknown)}")
    G, e_t = gram_inputs(X, y, x_query, G=gram_kernel.gram_matrices(X, y))
    out = {}
    if "gram" in forms:
        out["gram"] = (G, e_t)
    if "spectral" in forms:
        out["spectral"] = spectral_inputs(G, e_t)
    if "outer" in forms:
        E = torch.cat([X, y[..., None]], dim=-1)  # [.., B, n, D]
        out["outer"] = (E[..., :, None] * E[..., None, :], e_t)  # [.., B, n, D, D], [.., B, D]
    return out


def spectral_inputs(G: torch.Tensor, e_t: torch.Tensor):
    """``(s, beta, x_t)``: the eigenvalues of ``Sigma``, ``alpha`` and ``x_t`` in its eigenbasis."""
    d = G.shape[-1] - 1
    s, V = torch.linalg.eigh(G[..., :d, :d])  # Sigma = V diag(s) V^T
    beta = (V.transpose(-1, -2) @ G[..., :d, d:])[..., 0]  # V^T alpha
    xq = (V.transpose(-1, -2) @ e_t[..., :d, None])[..., 0]  # V^T x_t
    return s, beta, xq


def _randn(batch_shape, packed, seed, dtype, device):
    """``N(0, 1)`` draws ``[*batch_shape, *packed]``; a list of seeds: one generator per last models index."""
    if isinstance(seed, (list, tuple)):
        if not batch_shape or len(seed) != batch_shape[-1]:
            raise ValueError(
                f"seed must be an int or one int per index of the last models dimension, got {seed!r}"
            )
        draws = [_randn(batch_shape[:-1], packed, s, dtype, device) for s in seed]
        return torch.stack(draws, dim=len(batch_shape) - 1)
    gen = make_generator(seed, device=device)
    return torch.randn((*batch_shape, *packed), generator=gen, dtype=dtype, device=device)
