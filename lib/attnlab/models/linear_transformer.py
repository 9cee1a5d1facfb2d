"""Part III (paper C): multi-layer linear transformers for in-context regression."""

from __future__ import annotations

import torch
from torch import nn

from attnlab.tasks.icl_regression import build_tokens
from attnlab.validation import (
    check_choice,
    check_int,
    check_real,
    make_generator,
    resolve_dtype,
)

LT_PARAMS = ("full", "diag", "gdpp")
LT_DIAG_MODES = ("pq", "omega")
_OMEGA_NAMES = ("omega_xx", "omega_xy", "omega_yx", "omega_yy")


class LinearTransformer(nn.Module):
    """A multi-layer linear transformer for in-context regression (paper C, section 3).

    Tokens are the columns of ``Z [batch, d+1, n+1]`` (see
    :func:`attnlab.tasks.icl_regression.build_tokens`). Layer ``l`` with ``H`` heads does

        Z <- Z + sum_k P_k (Z M Z^T) Q_k Z,    M = diag(1, ..., 1, 0),

    so keys and values see only the ``n`` context tokens (the query is masked out of them) while
    every token, the query included, is updated. No softmax, no ``1/n``, no MLP, no LayerNorm;
    the prediction is ``-y`` of the query token after the last layer (:meth:`predict`).
    Writing ``S = Z M Z^T = [[Sigma, alpha], [alpha^T, lambda]]``, the layer adds ``K Z`` with
    ``K = sum_k P_k S Q_k`` (:meth:`layer_operator`), computed for all heads in one ``einsum``.

    ``param``:

    - ``"full"``: ``P_k, Q_k`` free ``(d+1) x (d+1)`` matrices (parameters ``P``, ``Q``
      ``[n_layers, n_heads, d+1, d+1]``).
    - ``"diag"``: ``P_k = diag(p_x I, p_y)``, ``Q_k = diag(q_x I, q_y)``, so
      ``K = [[omega_xx Sigma, omega_xy alpha], [omega_yx alpha^T, omega_yy lambda]]`` with
      ``omega_xx = sum_k p_x q_x`` etc. (:meth:`omegas`).
    - ``"gdpp"``: DIAG with ``q_y = 0`` (``omega_xy = omega_yy = 0``): a preconditioning step on
      ``x`` and a gradient step on ``y``.

    ``diag_mode`` (``"diag"`` and ``"gdpp"`` only): ``"pq"`` trains ``p = (p_x, p_y)`` and
    ``q = (q_x, q_y)`` per head (parameters ``p``, ``q`` ``[n_layers, n_heads, 2]``), as the
    paper's heads do; ``"omega"`` trains the four ``omega``'s of each layer freely (parameter
    ``omega [n_layers, 4]``, the head sums; ``n_heads`` then plays no role). With one head the
    ``"pq"`` form forces ``omega_xx omega_yy = omega_xy omega_yx``; ``"omega"`` does not. The book
    trains DIAG through ``"pq"`` (chapters 04, 05) unless it says otherwise.

    Parameters are drawn ``N(0, init_scale^2)`` from ``seed``; the default is
    :func:`default_init_scale`. Hand-set weights: :func:`one_step_gd`, :func:`gd_construction`,
    :func:`gdpp_construction`.
    """

    def __init__(
        self,
        d: int,
        n_layers: int,
        n_heads: int = 1,
        param: str = "full",
        *,
        diag_mode: str = "pq",
        init_scale: float | None = None,
        seed: int = 0,
        dtype="float32",
    ):
        super().__init__()
        self.d = check_int("d", d, minimum=1)
        self.n_layers = check_int("n_layers", n_layers, minimum=1)
        self.n_heads = check_int("n_heads", n_heads, minimum=1)
        self.param = check_choice("param", param, LT_PARAMS)
        self.diag_mode = check_choice("diag_mode", diag_mode, LT_DIAG_MODES)
        if init_scale is None:
            init_scale = default_init_scale(self.param, self.diag_mode, self.n_layers)
        init_scale = check_real("init_scale", init_scale, minimum=0.0)
        dtype = resolve_dtype(dtype)
        gen = make_generator(seed)
        L, H, D = self.n_layers, self.n_heads, self.d + 1

        def draw(*shape):
            return nn.Parameter(
                init_scale * torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)
            )

        if self.param == "full":
            self.P = draw(L, H, D, D)  # [n_layers, n_heads, d+1, d+1]
            self.Q = draw(L, H, D, D)  # [n_layers, n_heads, d+1, d+1]
        elif self.diag_mode == "pq":
            self.p = draw(L, H, 2)  # [n_layers, n_heads, (p_x, p_y)]
            self.q = draw(L, H, 2)  # [n_layers, n_heads, (q_x, q_y)]
        else:
            self.omega = draw(L, 4)  # [n_layers, (xx, xy, yx, yy)]
        # GD++ zeroes q_y, hence omega_xy and omega_yy.
        mask = [1.0, 0.0, 1.0, 0.0] if self.param == "gdpp" else [1.0, 1.0, 1.0, 1.0]
        self.register_buffer("omega_mask", torch.tensor(mask, dtype=dtype))
        if self.param != "full" and self.diag_mode == "pq":
            with torch.no_grad():
                self.q[..., 1] *= self.omega_mask[1]

    # -- weights -------------------------------------------------------------------------------

    def omegas(self) -> torch.Tensor:
        """``[n_layers, 4]``: ``(omega_xx, omega_xy, omega_yx, omega_yy)`` of every layer (DIAG, GD++)."""
        if self.param == "full":
            raise ValueError("param='full' has no omegas; use P and Q (or layer_operator)")
        if self.diag_mode == "omega":
            return self.omega * self.omega_mask
        p, q = self.p, self.q  # [L, H, 2]
        om = torch.stack(
            [
                (p[..., 0] * q[..., 0]).sum(-1),
                (p[..., 0] * q[..., 1]).sum(-1),
                (p[..., 1] * q[..., 0]).sum(-1),
                (p[..., 1] * q[..., 1]).sum(-1),
            ],
            dim=-1,
        )  # [L, 4]
        return om * self.omega_mask

    def layer_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(P, Q)``, each ``[n_layers, n_heads, d+1, d+1]``.

        DIAG/GD++ in ``"pq"`` mode give their diagonal matrices; ``"omega"`` mode has no P, Q.
        """
        if self.param == "full":
            return self.P, self.Q
        if self.diag_mode == "omega":
            raise ValueError("diag_mode='omega' has free omegas and no per-head P, Q; use omegas()")
        d = self.d

        def expand(v):  # [L, H, 2] -> [L, H, d+1, d+1]
            diag = torch.cat([v[..., :1].expand(*v.shape[:-1], d), v[..., 1:]], dim=-1)
            return torch.diag_embed(diag)

        q = self.q * self.omega_mask[[0, 1]]  # GD++: q_y = 0
        return expand(self.p), expand(q)

    def _omega_block(self, layer: int) -> torch.Tensor:
        """``[d+1, d+1]`` block-constant matrix ``[[omega_xx, omega_xy], [omega_yx, omega_yy]]``."""
        om = self.omegas()[layer]
        d = self.d
        top = torch.cat([om[0].expand(d), om[1:2]])  # [d+1]
        bottom = torch.cat([om[2].expand(d), om[3:4]])  # [d+1]
        return torch.cat([top.expand(d, d + 1), bottom[None, :]], dim=0)

    def layer_operator(self, layer: int, S: torch.Tensor) -> torch.Tensor:
        """``K = sum_k P_k S Q_k`` ``[batch, d+1, d+1]`` for ``S = Z M Z^T`` ``[batch, d+1, d+1]``.

        For DIAG/GD++ this is ``S`` times the block-constant omega matrix (elementwise).
        """
        layer = check_int("layer", layer, minimum=0, maximum=self.n_layers - 1)
        if self.param == "full":
            return torch.einsum("hij,bjk,hkl->bil", self.P[layer], S, self.Q[layer])
        return S * self._omega_block(layer)

    # -- forward -------------------------------------------------------------------------------

    def _check_Z(self, Z):
        if not isinstance(Z, torch.Tensor) or Z.ndim != 3 or Z.shape[1] != self.d + 1 or Z.shape[2] < 2:
            shape = list(Z.shape) if isinstance(Z, torch.Tensor) else type(Z).__name__
            raise ValueError(f"Z must be a tensor of shape [batch, d+1={self.d + 1}, n+1>=2], got {shape}")
        dtype = self.omega_mask.dtype
        if Z.dtype != dtype:
            raise ValueError(f"Z (from X, y, x_query) has dtype {Z.dtype} but the model is {dtype}: cast one")

    def hidden_states(self, Z: torch.Tensor) -> list[torch.Tensor]:
        """The token matrices ``[Z^0, Z^1, ..., Z^L]``, each ``[batch, d+1, n+1]``."""
        self._check_Z(Z)
        n = Z.shape[2] - 1
        states = [Z]
        for layer in range(self.n_layers):
            ctx = Z[:, :, :n]  # keys/values: context tokens only (query masked out)
            S = ctx @ ctx.transpose(1, 2)  # [B, d+1, d+1] = Z M Z^T
            Z = Z + self.layer_operator(layer, S) @ Z
            states.append(Z)
        return states

    def forward(self, Z: torch.Tensor) -> torch.Tensor:
        """Apply all layers to the token matrix ``Z [batch, d+1, n+1]``; returns the same shape."""
        return self.hidden_states(Z)[-1]

    def predict(self, X: torch.Tensor, y: torch.Tensor, x_query: torch.Tensor) -> torch.Tensor:
        """``[batch]``: the prediction ``-y_{n+1}`` read from the query token after the last layer."""
        Z = build_tokens(X, y, x_query)
        return -self.forward(Z)[:, self.d, -1]

    def predictions_by_layer(self, X: torch.Tensor, y: torch.Tensor, x_query: torch.Tensor) -> torch.Tensor:
        """``[n_layers+1, batch]``: the readout ``-y_{n+1}`` after 0, 1, ..., L layers."""
        states = self.hidden_states(build_tokens(X, y, x_query))
        return -torch.stack([Z[:, self.d, -1] for Z in states])

    def extra_repr(self) -> str:
        mode = f", diag_mode={self.diag_mode!r}" if self.param != "full" else ""
        return f"d={self.d}, n_layers={self.n_layers}, n_heads={self.n_heads}, param={self.param!r}{mode}"


def default_init_scale(param: str, diag_mode: str, n_layers: int) -> float:
    """Default ``init_scale`` of :class:`LinearTransformer`: ``0.002 / n_layers`` (von Oswald et al.).

    The ``"omega"`` mode trains the omegas directly, so its entries start at the square of that
    scale, as products ``p q`` of two such entries would.
    """
    base = 0.002 / n_layers
    return base**2 if (param != "full" and diag_mode == "omega") else base


def _set_omegas(model: LinearTransformer, omegas) -> LinearTransformer:
    """Write ``omegas [n_layers, 4]`` into a DIAG/GD++ model (``"pq"``: head 0 realises them)."""
    om = torch.as_tensor(omegas, dtype=torch.float64)
    with torch.no_grad():
        if model.diag_mode == "omega":
            model.omega.copy_(om)
            return model
        # The constructions use only omega_xx and omega_yx: head 0 with p = (omega_xx, omega_yx)
        # and q = (1, 0) realises them.
        model.p.zero_()
        model.q.zero_()
        for layer, (xx, xy, yx, yy) in enumerate(om.tolist()):
            if xy == 0.0 and yy == 0.0:
                model.p[layer, 0] = torch.tensor([xx, yx])
                model.q[layer, 0] = torch.tensor([1.0, 0.0])
            else:
                raise ValueError(f"omegas of layer {layer} cannot be set through one head in diag_mode='pq'")
    return model


def gd_construction(
    d: int, n_layers: int, eta: float, *, param: str = "full", dtype="float64"
) -> LinearTransformer:
    """``n_layers`` steps of gradient descent with step ``eta`` from ``w = 0`` (von Oswald et al. 2023).

    Each layer only writes ``y_i <- y_i - eta <alpha, x_i>`` (``omega_yx = -eta``): with
    ``P = [[0, 0], [0, -eta]]`` and ``Q = [[I, 0], [0, 0]]`` in FULL form. Since ``y_i`` holds
    the residual ``y_i - <w, x_i>``, the implicit weights follow
    ``w <- w + eta sum_i (y_i - <w, x_i>) x_i``, GD on ``1/2 sum_i (y_i - <w, x_i>)^2``
    (chapter 01; ``n_layers = 1`` is :func:`one_step_gd`).
    """
    eta = check_real("eta", eta)
    model = LinearTransformer(
        d, n_layers, 1, param, diag_mode="omega" if param != "full" else "pq", init_scale=0.0, dtype=dtype
    )
    if param == "full":
        with torch.no_grad():
            model.P[:, 0, d, d] = -eta
            model.Q[:, 0, :d, :d] = torch.eye(d, dtype=model.Q.dtype)
        return model
    om = torch.zeros(n_layers, 4, dtype=torch.float64)
    om[:, 2] = -eta
    return _set_omegas(model, om)


def one_step_gd(d: int, eta: float, *, param: str = "full", dtype="float64") -> LinearTransformer:
    """One linear attention layer that makes one GD step: prediction ``eta <alpha, x_t>`` (chapter 01)."""
    return gd_construction(d, 1, eta, param=param, dtype=dtype)


def gdpp_schedule(n_layers: int, mu: float, nu: float) -> dict:
    """Step sizes of the GD++ construction (paper C, Thm 5.1) for ``Sigma`` with spectrum in ``[mu, nu]``.

    Layers ``0..L-2`` precondition, ``x <- (I - gamma_l Sigma_l) x`` with ``gamma_l nu_l = 1/3``,
    which maps an eigenvalue ``lam`` of ``Sigma_l`` to ``lam (1 - gamma_l lam)^2`` and the bounds
    to ``mu_{l+1} = mu_l (1 - gamma_l mu_l)^2``, ``nu_{l+1} = 4 nu_l / 9``. The last layer makes
    one GD step ``eta = 2 / (mu_{L-1} + nu_{L-1})``. Returns ``gamma [L-1]``, ``eta``,
    ``mu``, ``nu`` (``[L]``, the bounds entering each layer) and ``eps`` (the guaranteed
    relative error ``(nu - mu) / (nu + mu)`` of the last step).
    """
    n_layers = check_int("n_layers", n_layers, minimum=1)
    mu = check_real("mu", mu, minimum=0.0, strict_minimum=True)
    nu = check_real("nu", nu, minimum=mu)
    mus, nus, gammas = [mu], [nu], []
    for _ in range(n_layers - 1):
        gamma = 1.0 / (3.0 * nus[-1])
        gammas.append(gamma)
        mus.append(mus[-1] * (1.0 - gamma * mus[-1]) ** 2)
        nus.append(4.0 * nus[-1] / 9.0)
    eta = 2.0 / (mus[-1] + nus[-1])
    eps = abs(nus[-1] - mus[-1]) / (nus[-1] + mus[-1])  # abs: rounding may cross the bounds
    return {"gamma": gammas, "eta": eta, "mu": mus, "nu": nus, "eps": eps}


def gdpp_construction(
    d: int, n_layers: int, mu: float, nu: float, *, diag_mode: str = "omega", dtype="float64"
) -> LinearTransformer:
    """The GD++ weights of paper C, Thm 5.1, for data with ``Sigma``'s spectrum in ``[mu, nu]``.

    ``n_layers - 1`` preconditioning layers (``omega_xx = -gamma_l``) and a final GD step
    (``omega_yx = -eta``), with the schedule of :func:`gdpp_schedule`. The relative error
    ``|y_hat - <w*, x_t>| / (|x_t| |w*|)`` is at most ``gdpp_schedule(...)["eps"]``, which
    falls like ``exp(-c 2^L)`` once the bounds are close: ``O(log kappa + log log 1/eps)``
    layers (chapter 03).
    """
    sched = gdpp_schedule(n_layers, mu, nu)
    model = LinearTransformer(d, n_layers, 1, "gdpp", diag_mode=diag_mode, init_scale=0.0, dtype=dtype)
    om = torch.zeros(n_layers, 4, dtype=torch.float64)
    om[:-1, 0] = -torch.tensor(sched["gamma"], dtype=torch.float64)
    om[-1, 2] = -sched["eta"]
    return _set_omegas(model, om)
