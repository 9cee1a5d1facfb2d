"""Hand-set weights of Part III: one step of GD, ``L`` steps of GD, and GD++ (paper C, Thm 5.1).

Each construction returns a :class:`attnlab.models.LinearTransformer` whose weights implement it
(chapters 01 and 03); :func:`verify_gd_weights` and :func:`verify_gdpp_bounds` check a reader's
answers to the exercises on them.
"""

from __future__ import annotations

import torch

from attnlab.models.linear_transformer import LinearTransformer
from attnlab.validation import check_int, check_real, check_shape


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


def verify_gd_weights(w, X, y, *, eta: float, n_layers: int, rtol: float = 1e-8) -> str:
    """Exercise checker (chapter 01): are ``w [B, d]`` the weights after ``n_layers`` GD steps?

    The weights of :func:`gd_construction` are read off its forward pass, one query per basis
    vector (its prediction is ``<w^L, x_t>``), so the check does not use the GD formula. Raises
    ``AssertionError`` unless ``w`` matches them to ``rtol`` (relative to their largest entry).
    """
    for name, t in (("X", X), ("y", y)):
        if not isinstance(t, torch.Tensor) or not torch.is_floating_point(t):
            raise ValueError(f"{name} must be a floating-point torch tensor")
    B, _, d = check_shape("X", X, (None, None, None)).shape
    check_shape("y", y, (B, X.shape[1]))
    w = check_shape("w", torch.as_tensor(w, dtype=X.dtype), (B, d))
    eta = check_real("eta", eta)
    n_layers = check_int("n_layers", n_layers, minimum=1)
    model = gd_construction(d, n_layers, eta, dtype=X.dtype)
    with torch.no_grad():
        basis = torch.eye(d, dtype=X.dtype)
        w_model = torch.stack([model.predict(X, y, basis[j].expand(B, d)) for j in range(d)], dim=1)
    scale = w_model.abs().max().item()
    gap = (w - w_model).abs().max().item()
    if gap > rtol * scale:
        raise AssertionError(
            f"w is off by {gap:.3g} (weights of size {scale:.3g}): each step must use the residuals "
            "y_i - <w, x_i> of the previous step's weights"
        )
    return f"Correct: these are the implicit weights after {n_layers} GD layers."


def verify_gdpp_bounds(mu_next, nu_next, *, mu: float, nu: float, rtol: float = 1e-9) -> str:
    """Exercise checker (chapter 03): the spectrum bounds after one GD++ layer with ``gamma = 1/(3 nu)``.

    Raises ``AssertionError`` unless ``(mu_next, nu_next)`` are ``f(mu), f(nu)`` with
    ``f(lam) = lam (1 - gamma lam)^2`` (:func:`gdpp_schedule`).
    """
    mu_next = check_real("mu_next", mu_next)
    nu_next = check_real("nu_next", nu_next)
    sched = gdpp_schedule(2, mu, nu)
    if abs(nu_next - sched["nu"][1]) > rtol * sched["nu"][1]:
        raise AssertionError(f"nu_next = {nu_next:.6g} is not f(nu): evaluate lam (1 - gamma lam)^2 at nu")
    if abs(mu_next - sched["mu"][1]) > rtol * sched["mu"][1]:
        raise AssertionError(f"mu_next = {mu_next:.6g} is not f(mu): f is increasing below 1/(3 gamma)")
    return f"Correct: the ratio grows from {mu / nu:.4g} to {mu_next / nu_next:.4g}."
