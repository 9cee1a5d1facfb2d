"""Part III variant beyond the paper: DIAG layers with data-dependent gates on the keys (chapter 06).

Gated linear attention (GLA, Mamba-like selective state spaces) lets every token decide how much
it adds to the layer's key-value sum. Here the gate of context token ``j`` in layer ``l`` is a
function of that token as it enters the layer, so a later layer can read the residual that an
earlier layer wrote into ``y_j`` and down-weight a token that does not fit (experiment
``icl_beyond``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn

from attnlab.models.linear_transformer import LinearTransformer
from attnlab.tasks.icl_regression import build_tokens
from attnlab.validation import check_choice, check_shape

#: The features of a token that its gate reads, in the order of the gate's coefficients.
GATE_FEATURES = ("1", "y_j^2", "|x_j|^2 / d")
#: ``"raw"``: the features as above; ``"normalised"``: ``y_j^2`` and ``|x_j|^2`` divided by their
#: mean over the prompt's context tokens, so that a gate reads how large a token is for its prompt.
GATE_SCALES = ("raw", "normalised")


class GatedLinearTransformer(LinearTransformer):
    """DIAG layers whose context tokens are gated by data-dependent gates (chapter 06).

    Layer ``l`` uses ``S = sum_j g_{l,j} z_j z_j^T`` (``z_j = (x_j, y_j)``, the context token as it
    enters the layer) in place of DIAG's ``Z M Z^T``, with

        g_{l,j} = 2 sigmoid(a_l + b_l y_j^2 + c_l |x_j|^2 / d)  in (0, 2),

    ``gate [*models, n_layers, 3] = (a_l, b_l, c_l)``, zero at initialisation: a gate of exactly 1,
    so that zero gate coefficients are DIAG exactly (a constant gate is absorbed by the omegas, so
    the range ``(0, 2)`` is no restriction against ``(0, 1)``). ``learn_gate [*models]`` (bool,
    default all True) says which models learn their gates; the others keep them fixed (no
    gradient): DIAG trained side by side with the same data, initialisation and optimiser. With
    ``features="normalised"`` the gate reads ``y_j^2 / mean_k y_k^2`` and
    ``|x_j|^2 / mean_k |x_k|^2`` (means over the context tokens of the prompt), which do not grow
    with the prompt's scale. The token form is the only form: the gates depend on every token,
    so the forward pass has no Gram form.
    """

    def __init__(
        self,
        d,
        n_layers,
        n_heads=1,
        *,
        learn_gate: Sequence[bool] | bool = True,
        features: str = "raw",
        batch_shape=(),
        **kwargs,
    ):
        super().__init__(d, n_layers, n_heads, "diag", batch_shape=batch_shape, **kwargs)
        self.features = check_choice("features", features, GATE_SCALES)
        dtype, device = self.omega_mask.dtype, self.omega_mask.device
        self.gate = nn.Parameter(torch.zeros(*self.batch_shape, n_layers, len(GATE_FEATURES), dtype=dtype))
        learn = torch.as_tensor(learn_gate, dtype=torch.bool, device=device)
        if learn.ndim == 0:
            learn = learn.expand(self.batch_shape)
        check_shape("learn_gate", learn, self.batch_shape)
        self.register_buffer("learn_gate", learn.clone())

    def gates(self, ctx: torch.Tensor, layer: int) -> torch.Tensor:
        """``[*models, B, n]``: the gate of every context token ``ctx [.., B, d+1, n]`` in ``layer``."""
        coef = torch.where(
            self.learn_gate[..., None], self.gate[..., layer, :], self.gate[..., layer, :].detach()
        )
        a, b, c = (coef[..., k, None, None] for k in range(3))  # [*models, 1, 1]
        y2 = ctx[..., self.d, :] ** 2  # [.., B, n]
        x2 = (ctx[..., : self.d, :] ** 2).sum(-2) / self.d
        if self.features == "normalised":
            tiny = torch.finfo(ctx.dtype).tiny
            y2 = y2 / y2.mean(-1, keepdim=True).clamp_min(tiny)
            x2 = x2 / x2.mean(-1, keepdim=True).clamp_min(tiny)
        return 2 * torch.sigmoid(a + b * y2 + c * x2)

    def gate_quantiles(self, X, y, x_query, q=(0.05, 0.5, 0.95)) -> torch.Tensor:
        """``[n_layers, len(q)]``: quantiles ``q`` of every layer's gates over the context tokens.

        The gates of the tokens of the prompts ``X [B, n, d]``, ``y [B, n]``, ``x_query [B, d]``
        as they enter each layer, all prompts and tokens pooled. One model (no models dimensions).
        """
        if self.batch_shape:
            raise ValueError(f"the model must be one model, got batch_shape {self.batch_shape}")
        q = torch.as_tensor(q, dtype=torch.float64)
        if q.ndim != 1 or len(q) == 0 or not ((q >= 0) & (q <= 1)).all():
            raise ValueError(f"q must be a non-empty list of quantiles in [0, 1], got {q.tolist()}")
        X = torch.as_tensor(X)
        check_shape("X", X, (None, None, self.d))
        n = X.shape[-2]
        with torch.no_grad():
            states = self.hidden_states(build_tokens(X, y, x_query))
            gates = [self.gates(states[l][..., :n], l).flatten() for l in range(self.n_layers)]
        return torch.stack([torch.quantile(g.double(), q) for g in gates])

    def with_constant_gates(self, g) -> GatedLinearTransformer:
        """A frozen copy whose gates are the constants ``g [n_layers]`` (one per layer), in (0, 2].

        Only ``a_l`` is kept (``2 sigmoid(a_l) = g_l``), ``b_l = c_l = 0``; a gate of 2 (a
        saturated gate, as float rounding gives) is taken as ``2 - 1e-9``. One model.
        """
        if self.batch_shape:
            raise ValueError(f"the model must be one model, got batch_shape {self.batch_shape}")
        g = torch.as_tensor(g, dtype=torch.float64)
        check_shape("g", g, (self.n_layers,))
        if not ((g > 0) & (g <= 2)).all():
            raise ValueError(f"g must hold gates in (0, 2], got {g.tolist()}")
        g = g.clamp(max=2 - 1e-9)
        out = copy.deepcopy(self).requires_grad_(False)
        with torch.no_grad():
            out.gate.zero_()
            out.gate[:, 0] = torch.log(g / (2 - g)).to(out.gate.dtype)
        return out

    def _context_gram(self, ctx, layer):
        return (ctx * self.gates(ctx, layer)[..., None, :]) @ ctx.transpose(-1, -2)

    def gram_forward(self, G, e_t, *, return_layers=False):
        raise ValueError("gated keys have no Gram form; use predict or predict_fast (token form)")

    @property
    def fast_form(self) -> str:
        return "token"

    def predict_fast(self, X, y, x_query, *, return_layers: bool = False) -> torch.Tensor:
        """The prediction in the token form (the only form of gated keys), as :meth:`predict`."""
        if return_layers:
            return self.predictions_by_layer(X, y, x_query)
        return self.predict(X, y, x_query)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", gated keys ({self.features} features)"
