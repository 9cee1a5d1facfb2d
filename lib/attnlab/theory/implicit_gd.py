"""Every linear transformer layer keeps a linear model (paper C, section 4).

For the :class:`attnlab.models.LinearTransformer` with tokens ``e_i = (x_i, y_i)`` and query
``(x_t, 0)``, Thm 4.1 says there are ``M^l [d, d]``, ``u^l [d]``, ``a^l`` and ``w^l [d]`` with

    x_i^l = M^l x_i + y_i u^l,   y_i^l = a^l y_i - <w^l, x_i>,
    x_t^l = M^l x_t,             y_t^l = -<w^l, x_t>,

so the model's prediction after ``l`` layers is ``<w^l, x_t>``. Lemma 4.3 gives the recursion:
with ``K = sum_k P_k [[Sigma^l, alpha^l], [alpha^l^T, lambda^l]] Q_k = [[A, b], [c^T, dd]]``,

    M <- (I + A) M - b w^T,   u <- (I + A) u + a b,
    a <- (1 + dd) a + <c, u>, w <- (1 + dd) w - M^T c,

from ``M = I, u = 0, a = 1, w = 0``. The per-layer statistics of the current tokens are
themselves functions of ``(M, u, a, w)`` and of the data's ``Sigma, alpha, lambda`` (see
:func:`layer_statistics`), so :func:`implicit_state` never runs the forward pass: comparing it
with :meth:`LinearTransformer.hidden_states` is a real check (chapter 02).

Lemma 4.4 (:func:`momentum_form`) rewrites the DIAG recursion as gradient descent with momentum.
The ``verify_*`` functions check a reader's answers to the exercises of chapters 01 to 03.
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from attnlab.validation import check_finite, check_int, check_real, check_shape

__all__ = [
    "verify_diag_step",
    "verify_gdpp_layers",
    "verify_two_step_step",
    "verify_one_layer_optimum",
    "data_statistics",
    "gd_error_bound",
    "gd_layers_needed",
    "gdpp_layers_needed",
    "implicit_state",
    "implicit_tokens",
    "implicit_weights",
    "layer_statistics",
    "momentum_form",
    "one_layer_optimum",
]


def _check_model(model):
    from attnlab.models import LinearTransformer

    if not isinstance(model, LinearTransformer):
        raise ValueError(f"model must be an attnlab.models.LinearTransformer, got {type(model).__name__}")
    return model


def _as_dtype(model, X):
    """The model itself, or a copy in the dtype and device of ``X`` (float64 checks of float32 models)."""
    p = next(iter(model.parameters()))
    if p.dtype == X.dtype and p.device == X.device:
        return model
    return copy.deepcopy(model).to(dtype=X.dtype, device=X.device)


def _check_xy(X, y, d=None):
    for name, t in (("X", X), ("y", y)):
        if not isinstance(t, torch.Tensor) or not torch.is_floating_point(t):
            raise ValueError(f"{name} must be a floating-point torch tensor")
    check_shape("X", X, (None, None, d))
    check_shape("y", y, (X.shape[0], X.shape[1]))
    check_finite("X", X)
    check_finite("y", y)
    if X.dtype != y.dtype:
        raise ValueError(f"X and y must share one dtype, got {X.dtype} and {y.dtype}")


def data_statistics(X: torch.Tensor, y: torch.Tensor):
    """``(Sigma [B, d, d], alpha [B, d], lam [B])``.

    ``Sigma = sum_i x_i x_i^T``, ``alpha = sum_i y_i x_i``, ``lam = sum_i y_i^2`` (sums over context).
    """
    _check_xy(X, y)
    Sigma = X.transpose(1, 2) @ X
    alpha = torch.einsum("bn,bnd->bd", y, X)
    lam = (y * y).sum(1)
    return Sigma, alpha, lam


def layer_statistics(Sigma, alpha, lam, M, u, a, w):
    """``(Sigma^l, alpha^l, lambda^l)`` of the tokens ``x_i^l = M x_i + y_i u``, ``y_i^l = a y_i - <w, x_i>``.

    Expanding the sums: ``Sigma^l = M Sigma M^T + M alpha u^T + u alpha^T M^T + lam u u^T``,
    ``alpha^l = a M alpha + a lam u - M Sigma w - u <alpha, w>``,
    ``lambda^l = a^2 lam - 2 a <w, alpha> + w^T Sigma w``. Shapes as in :func:`implicit_state`.
    """
    Ma = torch.einsum("bij,bj->bi", M, alpha)  # [B, d]
    Sw = torch.einsum("bij,bj->bi", Sigma, w)  # [B, d]
    aw = (alpha * w).sum(-1)  # [B]
    Sig_l = (
        M @ Sigma @ M.transpose(1, 2)
        + Ma[:, :, None] * u[:, None, :]
        + u[:, :, None] * Ma[:, None, :]
        + lam[:, None, None] * u[:, :, None] * u[:, None, :]
    )
    alpha_l = a[:, None] * Ma + (a * lam)[:, None] * u - torch.einsum("bij,bj->bi", M, Sw) - u * aw[:, None]
    lam_l = a * a * lam - 2 * a * aw + (w * Sw).sum(-1)
    return Sig_l, alpha_l, lam_l


def _stack_S(Sig, alpha, lam):
    top = torch.cat([Sig, alpha[:, :, None]], dim=2)
    bottom = torch.cat([alpha, lam[:, None]], dim=1)[:, None, :]
    return torch.cat([top, bottom], dim=1)  # [B, d+1, d+1]


def implicit_state(model, X: torch.Tensor, y: torch.Tensor) -> dict:
    """The Lemma 4.3 recursion from the layer weights and the data (chapter 02).

    Returns ``{"M": [L+1, B, d, d], "u": [L+1, B, d], "a": [L+1, B], "w": [L+1, B, d]}``; index
    ``l`` is the state after ``l`` layers. Computed in the dtype of ``X`` (use float64 for checks).
    """
    _check_xy(X, y, _check_model(model).d)
    model = _as_dtype(model, X)
    Sigma, alpha, lam = data_statistics(X, y)
    B, d = alpha.shape
    M = torch.eye(d, dtype=X.dtype, device=X.device).expand(B, d, d).clone()
    u = torch.zeros(B, d, dtype=X.dtype, device=X.device)
    a = torch.ones(B, dtype=X.dtype, device=X.device)
    w = torch.zeros(B, d, dtype=X.dtype, device=X.device)
    out = {"M": [M], "u": [u], "a": [a], "w": [w]}
    for layer in range(model.n_layers):
        S_l = _stack_S(*layer_statistics(Sigma, alpha, lam, M, u, a, w))
        K = model.layer_operator(layer, S_l)  # [B, d+1, d+1]
        A, b, c, dd = K[:, :d, :d], K[:, :d, d], K[:, d, :d], K[:, d, d]
        IA = torch.eye(d, dtype=X.dtype, device=X.device) + A
        M, u, a, w = (
            IA @ M - b[:, :, None] * w[:, None, :],
            torch.einsum("bij,bj->bi", IA, u) + a[:, None] * b,
            (1 + dd) * a + (c * u).sum(-1),
            (1 + dd)[:, None] * w - torch.einsum("bji,bj->bi", M, c),
        )
        for key, value in zip(("M", "u", "a", "w"), (M, u, a, w), strict=True):
            out[key].append(value)
    return {key: torch.stack(values) for key, values in out.items()}


def implicit_weights(model, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``[n_layers+1, B, d]``: the implicit weights ``w^l`` of Lemma 4.3; prediction ``<w^l, x_t>``."""
    return implicit_state(model, X, y)["w"]


def implicit_tokens(state: dict, X: torch.Tensor, y: torch.Tensor, x_query: torch.Tensor) -> torch.Tensor:
    """The token matrices Thm 4.1 predicts, ``[L+1, B, d+1, n+1]``, from :func:`implicit_state`.

    ``x_i^l = M^l x_i + y_i u^l``, ``y_i^l = a^l y_i - <w^l, x_i>``, ``x_t^l = M^l x_t``,
    ``y_t^l = -<w^l, x_t>``; compare with ``torch.stack(model.hidden_states(Z))``.
    """
    _check_xy(X, y)
    check_shape("x_query", x_query, (X.shape[0], X.shape[2]))
    M, u, a, w = state["M"], state["u"], state["a"], state["w"]
    Xall = torch.cat([X, x_query[:, None, :]], dim=1)  # [B, n+1, d]
    yall = torch.cat([y, torch.zeros_like(y[:, :1])], dim=1)  # [B, n+1]; the query's y is 0
    x_l = torch.einsum("lbij,bnj->lbin", M, Xall) + u[:, :, :, None] * yall[None, :, None, :]
    y_l = a[:, :, None] * yall[None] - torch.einsum("lbj,bnj->lbn", w, Xall)
    return torch.cat([x_l, y_l[:, :, None, :]], dim=2)


def momentum_form(model, X: torch.Tensor, y: torch.Tensor) -> dict:
    """Lemma 4.4: the DIAG recursion as gradient descent with momentum (chapter 02).

    With the OLS solution ``w* = Sigma^{-1} alpha`` and residual energy ``rho = sum_i r_i^2``,

        u <- (I - Lambda) u + Gamma Sigma (a w* - w),
        w <- (1 + s) w - Pi Sigma (a w* - w) - Phi u,

    ``Lambda = -omega_xy a^2 rho I - omega_xx Sigma^l``, ``s = omega_yy lambda^l``,
    ``Phi = a rho omega_yx M^T``, ``Gamma = a omega_xy (M + u w*^T)``,
    ``Pi = omega_yx M^T (M + u w*^T)``. ``u`` acts as the momentum and ``Sigma (a w* - w)`` is
    (up to a factor) the gradient of ``sum_i (a y_i - <w, x_i>)^2``.

    Returns the states of :func:`implicit_state` (``"M", "u", "a", "w"``, ``[L+1, ...]``), the data
    terms ``"w_star" [B, d]``, ``"rho" [B]``, the per-layer terms ``"Lambda", "Phi", "Gamma",
    "Pi"`` ``[L, B, d, d]``, ``"s" [L, B]``, ``"grad" [L, B, d]`` (``Sigma (a w* - w)``) and the
    updates the momentum form gives, ``"u_next", "w_next"`` ``[L, B, d]``, to compare with
    ``u[1:]`` and ``w[1:]``. Needs ``param`` ``"diag"`` or ``"gdpp"`` and an invertible ``Sigma``
    (``n >= d``).
    """
    model = _check_model(model)
    if model.param == "full":
        raise ValueError("model must have param 'diag' or 'gdpp' for the momentum form (Lemma 4.4)")
    _check_xy(X, y, model.d)
    B, n, d = X.shape
    if n < d:
        raise ValueError(f"X must have n >= d context tokens so that Sigma is invertible, got n={n}, d={d}")
    state = implicit_state(model, X, y)
    Sigma, alpha, lam = data_statistics(X, y)
    w_star = torch.linalg.solve(Sigma, alpha)  # [B, d]
    resid = y - torch.einsum("bnd,bd->bn", X, w_star)
    rho = (resid * resid).sum(1)  # [B]
    om = model.omegas().detach().to(X.dtype)  # [L, 4]
    eye = torch.eye(d, dtype=X.dtype, device=X.device)
    terms = {k: [] for k in ("Lambda", "s", "Phi", "Gamma", "Pi", "grad", "u_next", "w_next")}
    for layer in range(model.n_layers):
        M, u, a, w = (state[k][layer] for k in ("M", "u", "a", "w"))
        xx, xy, yx, yy = om[layer]
        Sig_l, _, lam_l = layer_statistics(Sigma, alpha, lam, M, u, a, w)
        MT = M.transpose(1, 2)
        Mu = M + u[:, :, None] * w_star[:, None, :]  # M + u w*^T
        Lam = -xy * (a * a * rho)[:, None, None] * eye - xx * Sig_l
        s = yy * lam_l
        Phi = yx * (a * rho)[:, None, None] * MT
        Gamma = xy * a[:, None, None] * Mu
        Pi = yx * MT @ Mu
        grad = torch.einsum("bij,bj->bi", Sigma, a[:, None] * w_star - w)
        u_next = u - torch.einsum("bij,bj->bi", Lam, u) + torch.einsum("bij,bj->bi", Gamma, grad)
        w_next = (
            (1 + s)[:, None] * w - torch.einsum("bij,bj->bi", Pi, grad) - torch.einsum("bij,bj->bi", Phi, u)
        )
        for key, value in zip(terms, (Lam, s, Phi, Gamma, Pi, grad, u_next, w_next), strict=True):
            terms[key].append(value)
    out = dict(state)
    out.update({key: torch.stack(values) for key, values in terms.items()})
    out["w_star"] = w_star
    out["rho"] = rho
    return out


def verify_diag_step(step, *, d: int = 3, n: int = 8, n_layers: int = 3, seed: int = 0) -> str:
    """Exercise checker (chapter 02): does ``step`` make one layer of the DIAG recursion?

    ``step(omegas, Sigma, alpha, lam, M, u, a, w)`` takes one layer's ``(omega_xx, omega_xy,
    omega_yx, omega_yy)`` (four floats), the data's statistics (``Sigma [B, d, d]``, ``alpha [B, d]``,
    ``lam [B]``, as :func:`data_statistics` returns them) and the state after ``l`` layers
    (``M [B, d, d]``, ``u [B, d]``, ``a [B]``, ``w [B, d]``), and returns the state after ``l + 1``.
    It is run on a random two-head DIAG model with ``n_layers`` layers, each layer from the exact
    state of :func:`implicit_state`; raises ``AssertionError`` naming the first quantity and layer
    that differ (relative error above ``1e-9``).
    """
    from attnlab.models import LinearTransformer
    from attnlab.tasks.icl_regression import sample_regression

    if not callable(step):
        raise ValueError(f"step must be a function of (omegas, Sigma, alpha, lam, M, u, a, w), got {step!r}")
    seed = check_int("seed", seed, minimum=0)
    model = LinearTransformer(d, n_layers, 2, "diag", init_scale=0.3, seed=seed, dtype="float64")
    data = sample_regression(16, d, n, noise="uniform:1", generator=seed, dtype="float64")
    state = implicit_state(model, data.X, data.y)
    stats = data_statistics(data.X, data.y)
    omegas = model.omegas().detach().tolist()
    names = ("M", "u", "a", "w")
    for layer in range(n_layers):
        now = tuple(state[k][layer].clone() for k in names)
        out = step(tuple(omegas[layer]), *stats, *now)
        if not isinstance(out, tuple | list) or len(out) != 4:
            raise AssertionError("step must return the four quantities (M, u, a, w) after the layer")
        for name, mine in zip(names, out, strict=True):
            exact = state[name][layer + 1]
            mine = torch.as_tensor(mine, dtype=exact.dtype)
            if mine.shape != exact.shape:
                raise AssertionError(
                    f"{name} after layer {layer + 1} has shape {list(mine.shape)}, not {list(exact.shape)}"
                )
            if ((mine - exact).abs().max() / exact.abs().max().clamp_min(1e-300)).item() > 1e-9:
                raise AssertionError(
                    f"{name} after layer {layer + 1} differs from the recursion: recheck A, b, c, delta "
                    "of the DIAG layer and the statistics of the current tokens"
                )
    return f"Correct: your step matches the recursion on {n_layers} layers of a random DIAG model."


def one_layer_optimum(d: int, n: int, mean_sigma2: float = 0.0) -> dict:
    """The best one-layer linear transformer on ``w, x ~ N(0, I)`` regression (chapter 01).

    Its prediction is one scaled GD step ``eta <alpha, x_t>`` with ``eta = 1/(n + d + 1 + E sigma^2)``
    and expected ``1/2 (prediction - <w, x_t>)^2`` equal to ``1/2 (d - n d / (n + d + 1 + E sigma^2))``;
    noiseless with d=10, n=20: ``(10 - 200/31)/2``. Returns ``{"eta": ..., "half_mse": ...}``.
    """
    d = check_int("d", d, minimum=1)
    n = check_int("n", n, minimum=1)
    mean_sigma2 = check_real("mean_sigma2", mean_sigma2, minimum=0.0)
    denom = n + d + 1 + mean_sigma2
    return {"eta": 1.0 / denom, "half_mse": 0.5 * (d - n * d / denom)}


def verify_one_layer_optimum(
    eta, half_mse, *, d: int, n: int, mean_sigma2: float = 0.0, rtol: float = 1e-6
) -> str:
    """Exercise checker (chapter 01): raise ``AssertionError`` unless ``(eta, half_mse)`` is the optimum."""
    eta = check_real("eta", eta)
    half_mse = check_real("half_mse", half_mse)
    best = one_layer_optimum(d, n, mean_sigma2)
    if abs(eta - best["eta"]) > rtol * best["eta"]:
        raise AssertionError(
            f"eta = {eta:.6g} is not the optimal step: recheck E[Sigma^2] (and E[alpha alpha^T])"
        )
    if abs(half_mse - best["half_mse"]) > rtol * best["half_mse"]:
        raise AssertionError(
            f"half_mse = {half_mse:.6g} is not the loss at the optimal step (don't forget the 1/2)"
        )
    return "Correct: both the optimal step and its loss match."


def verify_two_step_step(
    step, *, sigma: float, b: float = -1e-3, c: float = -0.05, d: int = 10, n: int = 20, rtol: float = 0.03
) -> str:
    """Exercise checker (chapter 05): the mean step size ``-c (1 + b lambda)`` of the two-step update.

    The hand-set pair of DIAG layers (``omega_xy = b``, then ``omega_yx = c``) takes one gradient
    step of size ``-c (1 + b lambda)``, ``lambda = sum_i y_i^2``; on Gaussian prompts with noise
    ``sigma``, ``E lambda = n (d + sigma^2)``. Raises ``AssertionError`` unless ``step`` is that
    mean to ``rtol`` (a Monte-Carlo estimate on a few thousand prompts is well within it).
    """
    step = check_real("step", step)
    sigma = check_real("sigma", sigma, minimum=0.0)
    b, c = check_real("b", b), check_real("c", c)
    d, n = check_int("d", d, minimum=1), check_int("n", n, minimum=1)
    rtol = check_real("rtol", rtol, minimum=0.0)
    mean_lam = n * (d + sigma**2)
    exact = -c * (1 + b * mean_lam)
    if abs(step - exact) > rtol * abs(exact):
        if abs(step + exact) <= rtol * abs(exact):
            raise AssertionError(f"step = {step:.4g} has the wrong sign: the readout is -y_t")
        raise AssertionError(
            f"step = {step:.4g} is not the mean step: lambda sums the squared labels, whose mean is "
            "|w|^2 + sigma^2 per token"
        )
    return f"Correct: the mean step at sigma = {sigma:g} is {exact:.4g} (lambda = {mean_lam:g} on average)."


def gd_error_bound(n_layers: int, kappa: float) -> float:
    """``((kappa - 1) / (kappa + 1))^L``: relative error of ``L`` GD layers, best fixed step (chapter 03).

    With ``Sigma``'s spectrum in ``[nu/kappa, nu]`` and ``eta = 2 / (mu + nu)``, every eigendirection of
    ``w* - w^L`` shrinks by ``|1 - eta lam|^L <= ((kappa - 1)/(kappa + 1))^L``.
    """
    n_layers = check_int("n_layers", n_layers, minimum=0)
    kappa = check_real("kappa", kappa, minimum=1.0)
    return ((kappa - 1.0) / (kappa + 1.0)) ** n_layers


def gd_layers_needed(kappa: float, eps: float) -> int:
    """The fewest GD layers whose :func:`gd_error_bound` is ``<= eps`` (about ``kappa/2 log(1/eps)``)."""
    kappa = check_real("kappa", kappa, minimum=1.0)
    eps = check_real("eps", eps, minimum=0.0, strict_minimum=True)
    if kappa == 1.0 or eps >= 1.0:
        return 1
    return max(1, int(np.ceil(np.log(eps) / np.log((kappa - 1.0) / (kappa + 1.0)) - 1e-12)))


def gdpp_layers_needed(kappa: float, eps: float, *, max_layers: int = 1000) -> int:
    """The fewest layers of the GD++ construction (Thm 5.1) whose guaranteed error is ``<= eps`` (chapter 03).

    Uses :func:`attnlab.models.gdpp_schedule` with spectrum bounds ``[1/kappa, 1]``; the count grows like
    ``log(kappa) / log(9/4) + log2 log(1/eps)``.
    """
    from attnlab.models import gdpp_schedule

    kappa = check_real("kappa", kappa, minimum=1.0)
    eps = check_real("eps", eps, minimum=0.0, strict_minimum=True)
    max_layers = check_int("max_layers", max_layers, minimum=1)
    for n_layers in range(1, max_layers + 1):
        if gdpp_schedule(n_layers, 1.0 / kappa, 1.0)["eps"] <= eps:
            return n_layers
    raise ValueError(f"eps={eps:g} is not reached within max_layers={max_layers} (below rounding error?)")


def verify_gdpp_layers(answer, *, kappa: float, eps: float) -> str:
    """Exercise checker (chapter 03): is ``answer`` the number of GD++ layers needed for ``(kappa, eps)``?"""
    answer = check_int("answer", answer, minimum=1)
    need = gdpp_layers_needed(kappa, eps)
    if answer > need:
        raise AssertionError(f"{answer} layers suffice, but fewer do too: iterate the eigenvalue-ratio map")
    if answer < need:
        raise AssertionError(f"{answer} layers are not enough: the guaranteed error is above eps={eps:g}")
    return f"Correct: {need} GD++ layers (plain GD needs {gd_layers_needed(kappa, eps)})."
