"""Part III (paper C): the parameterisations of :class:`~attnlab.models.LinearTransformer`.

Each small class says which tensors a parameterisation trains (its packed layout) and what the
layer operator ``K`` of layer ``l`` is (chapter 01, eq. ``eq-lt-layer``): FULL trains every
``P_k``, ``Q_k``; DIAG and GD++ train diagonal blocks, as products ``p q`` of heads (``"pq"``)
or as the ω's themselves (``"omega"``). :data:`PARAMETERISATIONS` maps ``(param, diag_mode)``
to one of them.
"""

from __future__ import annotations

import torch

LT_PARAMS = ("full", "diag", "gdpp")
LT_DIAG_MODES = ("pq", "omega")


class Full:
    """FULL: free ``P_k, Q_k`` ``(d+1) x (d+1)`` per head; ``K = sum_k P_k S Q_k``.

    Tensors ``P``, ``Q`` ``[*models, n_layers, n_heads, d+1, d+1]``; packed per head as
    ``(2, d+1, d+1)`` (``P`` then ``Q``).
    """

    param, diag_mode, names, fast_form = "full", None, ("P", "Q"), "gram"

    def packed_shape(self, L, H, D):
        return (L, H, 2, D, D)

    def unpack(self, w):
        return {"P": w[..., 0, :, :], "Q": w[..., 1, :, :]}

    def pack(self, model):
        return torch.stack([model.P, model.Q], dim=-3)

    def operator(self, model, layer, S):
        P, Q = model.P[..., layer, :, :, :], model.Q[..., layer, :, :, :]  # [*models, H, D, D]
        # sum_k P_k S Q_k with the data batch between the models and the heads dimensions.
        return (P[..., None, :, :, :] @ S[..., None, :, :] @ Q[..., None, :, :, :]).sum(-3)


class _Diagonal:
    """DIAG-type: ``K = Omega ∘ S`` with the block-constant ``Omega = [[w_xx, w_xy], [w_yx, w_yy]]``.

    (chapter 02, eq. ``eq-diag-layer``). GD++ (``param="gdpp"``) masks ``omega_xy = omega_yy = 0``.
    """

    def __init__(self, param):
        self.param = param
        self.mask = (1.0, 0.0, 1.0, 0.0) if param == "gdpp" else (1.0, 1.0, 1.0, 1.0)
        self.fast_form = "spectral" if param == "gdpp" else "gram"  # GD++ keeps Sigma's eigenvectors

    def operator(self, model, layer, S):
        om = model.omegas()[..., layer, :]  # [*models, 4]
        D = S.shape[-1]
        top = torch.cat(
            [
                om[..., 0:1, None].expand(*om.shape[:-1], D - 1, D - 1),
                om[..., 1:2, None].expand(*om.shape[:-1], D - 1, 1),
            ],
            dim=-1,
        )
        bottom = torch.cat(
            [
                om[..., 2:3, None].expand(*om.shape[:-1], 1, D - 1),
                om[..., 3:4, None].expand(*om.shape[:-1], 1, 1),
            ],
            dim=-1,
        )
        return torch.cat([top, bottom], dim=-2)[..., None, :, :] * S  # [*models, B, D, D]


class HeadsPQ(_Diagonal):
    """DIAG through the heads: ``P_k = diag(p_x I, p_y)``, ``Q_k = diag(q_x I, q_y)``, the paper's DIAG.

    Tensors ``p``, ``q`` ``[*models, n_layers, n_heads, 2]``; ``omega_xx = sum_k p_x q_x`` etc.
    Packed per head as ``(p_x, p_y, q_x, q_y)`` (DIAG) or ``(p_x, p_y, q_x)`` (GD++, ``q_y = 0``).
    """

    diag_mode, names = "pq", ("p", "q")

    def packed_shape(self, L, H, D):
        return (L, H, 3 if self.param == "gdpp" else 4)

    def unpack(self, w):
        qy = w[..., 3] if self.param == "diag" else torch.zeros_like(w[..., 2])
        return {"p": w[..., :2], "q": torch.stack([w[..., 2], qy], dim=-1)}

    def pack(self, model):
        return torch.cat([model.p, model.q[..., : 1 if self.param == "gdpp" else 2]], dim=-1)

    def omegas(self, model):
        p, q = model.p, model.q  # [*models, L, H, 2]
        om = torch.stack(
            [p[..., 0] * q[..., 0], p[..., 0] * q[..., 1], p[..., 1] * q[..., 0], p[..., 1] * q[..., 1]], -1
        )
        return om.sum(-2)  # [*models, L, 4]


class FreeOmega(_Diagonal):
    """DIAG through free ``omega``'s: the four head sums of every layer, trained directly.

    Tensor ``omega`` ``[*models, n_layers, 4]`` (``n_heads`` plays no role). With one head the
    ``"pq"`` form forces ``omega_xx omega_yy = omega_xy omega_yx``; this form does not. The book
    uses it for hand-set weights (chapters 03, 05) and trains DIAG through :class:`HeadsPQ`.
    """

    diag_mode, names = "omega", ("omega",)

    def packed_shape(self, L, H, D):
        return (L, 4)

    def unpack(self, w):
        return {"omega": w}

    def pack(self, model):
        return model.omega

    def omegas(self, model):
        return model.omega


PARAMETERISATIONS = {
    ("full", "pq"): Full(),
    ("diag", "pq"): HeadsPQ("diag"),
    ("gdpp", "pq"): HeadsPQ("gdpp"),
    ("diag", "omega"): FreeOmega("diag"),
    ("gdpp", "omega"): FreeOmega("gdpp"),
}


def default_init_scale(param: str, diag_mode: str, n_layers: int) -> float:
    """Default ``init_scale``: ``0.002 / n_layers`` (von Oswald et al.).

    The ``"omega"`` mode trains the omegas directly, so its entries start at the square of that
    scale, as products ``p q`` of two such entries would.
    """
    base = 0.002 / n_layers
    return base**2 if (param != "full" and diag_mode == "omega") else base
