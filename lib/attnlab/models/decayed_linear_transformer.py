"""Part III variant: linear attention whose keys decay with their distance from the query (chapter 05).

The reviewers' "other variants" question, answered with a RetNet-like decay on the keys of DIAG
layers (experiment ``icl_decay``).
"""

from __future__ import annotations

import torch
from torch import nn

from attnlab.models.linear_transformer import LinearTransformer


class DecayedLinearTransformer(LinearTransformer):
    """DIAG layers whose keys decay with their distance from the query, RetNet-like (chapter 05).

    Layer ``l`` weights context token ``j`` by ``gamma_l^(n-j)``, ``gamma_l = sigmoid(decay_logit_l)``:
    ``S = Z M_l Z^T`` with ``M_l = diag(gamma_l^(n-1), ..., gamma_l, 1, 0)``. ``decay_logit
    [*models, n_layers]`` starts at ``logit(gamma_init)`` per model (``None``: no decay, the logit
    30 that rounds ``gamma`` to 1 in float32); ``learn_decay [*models]`` says which models learn
    it (the others keep it fixed: it gets no gradient).
    """

    def __init__(self, d, n_layers, n_heads=1, *, gamma_init, learn_decay, batch_shape=(), **kwargs):
        super().__init__(d, n_layers, n_heads, "diag", batch_shape=batch_shape, **kwargs)
        dtype = self.omega_mask.dtype
        logits = [
            30.0 if g is None else float(torch.logit(torch.tensor(g, dtype=torch.float64)))
            for g in gamma_init
        ]
        logit = torch.tensor(logits, dtype=dtype)[..., None].expand(*self.batch_shape, n_layers)
        self.decay_logit = nn.Parameter(logit.clone())
        self.register_buffer(
            "learn_decay", torch.as_tensor(learn_decay, dtype=torch.bool).reshape(self.batch_shape)
        )

    def gammas(self) -> torch.Tensor:
        """``[*models, n_layers]``: the decay of every layer (no gradient where the decay is fixed)."""
        logit = torch.where(self.learn_decay[..., None], self.decay_logit, self.decay_logit.detach())
        return torch.sigmoid(logit)

    def _context_gram(self, ctx, layer):
        n = ctx.shape[-1]
        dist = torch.arange(n - 1, -1, -1, dtype=ctx.dtype, device=ctx.device)  # n - j for j = 1..n
        wts = self.gammas()[..., layer, None] ** dist  # [*models, n]
        return (ctx * wts[..., None, None, :]) @ ctx.transpose(-1, -2)

    def gram_forward(self, G, e_t, *, return_layers=False):
        raise ValueError("decayed keys have no Gram form; use predict_fast (outer-product form)")

    @property
    def fast_form(self) -> str:
        return "outer"

    def predict_from(self, inputs: dict, *, return_layers: bool = False) -> torch.Tensor:
        """Predictions ``[*models, B]`` from the context's outer products: every token still moves by
        one map ``T_l = I + Omega_l ∘ G_l``, with the weighted Gram matrix
        ``G_l = C_l (sum_j gamma_l^(n-j) e_j e_j^T) C_l^T`` of the tokens after ``C_l = T_{l-1}...T_0``."""
        if return_layers:
            raise ValueError("return_layers is not available for decayed keys")
        if "outer" not in inputs:
            raise ValueError("inputs must hold the 'outer' form (fast_inputs(..., {'outer'}))")
        outer, e = inputs["outer"]
        n, D = outer.shape[-3], outer.shape[-1]
        eye = torch.eye(D, dtype=outer.dtype, device=outer.device)
        dist = torch.arange(n - 1, -1, -1, dtype=outer.dtype, device=outer.device)
        gam, C = self.gammas(), eye
        for layer in range(self.n_layers):
            wts = gam[..., layer, None] ** dist  # [*models, n]
            G = C @ torch.einsum("...n,bnij->...bij", wts, outer) @ C.transpose(-1, -2)
            T = eye + self.layer_operator(layer, G)  # [*models, B, D, D]
            e = (T * e[..., None, :]).sum(-1)
            C = T @ C
        return -e[..., -1]
