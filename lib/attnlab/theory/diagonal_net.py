"""Gradient flow of linear self-attention on histogram-like tasks as a diagonal linear network.

Part I of the book (chapters 2 and 3). This is the book's own reconstruction of the reduction in
the ICLR 2024 submission "Towards Analyzing Self-attention via Linear Neural Network" (OpenReview
4fVuBf5HE9), whose text and code are not public; every statement here is checked numerically in
the chapters and in ``tests/test_diagonal_net.py``.

Notation (columns ``q_k`` of ``Q``, ``m_k`` of ``M``; ``Q`` is the merged key-query matrix ``W``):

* ``l_df(Q, v) = 1/2 ||Q Diag(v) - M||_F^2``                         (eq. ``eq-ldf``)
* ``l_tf(Q, v) = 1/2 sum_a Delta_a S_a Delta_a^T``, ``Delta = Q Diag(v) - M`` with
  ``S_a = E[h_a h h^T]`` from :func:`attnlab.tasks.histogram.count_moments` (eq. ``eq-ltf``)
* conserved ``delta_k = v_k^2 - ||q_k||^2``                          (eq. ``eq-delta``)
* with ``a = q . m_hat``, ``r = a + v``, ``s = a - v``: ``z = r^2`` solves the Riccati equation
  ``z' = -z^2/2 + 2 ||m|| z + delta^2/2``                            (eq. ``eq-riccati``)
* exponential bounds ``l(t) <= l(t0) exp(-2 mu (t - t0))``           (thm. ``thm-exp-df``/``-tf``)
* the limit point ``v_k(inf)^2 = (delta_k + sqrt(delta_k^2 + 4 ||m_k||^2)) / 2``,
  ``q_k(inf) = m_k / v_k(inf)``                                      (eq. ``eq-limit``)

Everything is float64 numpy. Functions accept a leading time axis where that is natural
(``Q`` ``[T, d, d]``, ``v`` ``[T, d]``).
"""

from __future__ import annotations

import numbers

import numpy as np
from scipy.integrate import solve_ivp

from attnlab.tasks.histogram import count_moments
from attnlab.validation import check_finite, check_int, check_positive, check_real, check_shape

__all__ = [
    "l_df",
    "l_tf",
    "grad_df",
    "grad_tf",
    "gradient_flow",
    "gradient_flow_tf",
    "gradient_descent",
    "delta",
    "gamma",
    "riccati_z",
    "rs_solution",
    "closed_form_flow",
    "bound_rate_df",
    "bound_rate_tf",
    "exponential_bound_df",
    "exponential_bound_tf",
    "limit_point",
    "plateau_time",
    "moment_spectrum",
    "isotropic_constant",
    "check_limit_point",
]

RTOL = 1e-11
ATOL = 1e-13


# ----------------------------------------------------------------------------------------------
# Argument handling
# ----------------------------------------------------------------------------------------------


def _as_M(M) -> np.ndarray:
    M = np.asarray(M, dtype=float)
    if M.ndim != 2 or M.shape[0] != M.shape[1] or M.shape[0] == 0:
        raise ValueError(f"M must be a square [d, d] matrix, got shape {list(M.shape)}")
    check_finite("M", M)
    return M


def _as_Qv(Q, v, d: int | None = None, *, batched: bool = True):
    Q = np.asarray(Q, dtype=float)
    v = np.asarray(v, dtype=float)
    if Q.ndim < 2 or Q.shape[-1] != Q.shape[-2] or (not batched and Q.ndim != 2):
        raise ValueError(f"Q must have shape [d, d]{' or [T, d, d]' if batched else ''}, got {list(Q.shape)}")
    if d is not None and Q.shape[-1] != d:
        raise ValueError(f"Q must have shape [{d}, {d}] to match M, got {list(Q.shape)}")
    if v.shape != Q.shape[:-1]:
        raise ValueError(f"v must have shape {list(Q.shape[:-1])} to match Q, got {list(v.shape)}")
    check_finite("Q", Q)
    check_finite("v", v)
    return Q, v


def _as_S(S, d: int) -> np.ndarray:
    """``S`` is the moment tensor ``[d, d, d]`` or an int ``N`` (uniform tokens)."""
    if isinstance(S, numbers.Integral) and not isinstance(S, bool):
        return count_moments(check_int("S", S, minimum=1), d)
    S = np.asarray(S, dtype=float)
    check_shape("S", S, (d, d, d))
    check_finite("S", S)
    return S


def _as_t(t) -> np.ndarray:
    t = np.atleast_1d(np.asarray(t, dtype=float))
    if t.ndim != 1 or t.size == 0:
        raise ValueError("t must be a non-empty 1-D array of times")
    check_finite("t", t)
    if t[0] < 0 or np.any(np.diff(t) < 0):
        raise ValueError("t must be non-negative and non-decreasing")
    return t


# ----------------------------------------------------------------------------------------------
# Losses and gradients
# ----------------------------------------------------------------------------------------------


def l_df(Q, v, M) -> np.ndarray:
    """``l_df(Q, v) = 1/2 ||Q Diag(v) - M||_F^2`` (eq. ``eq-ldf``); ``[..., d, d] -> [...]``."""
    M = _as_M(M)
    Q, v = _as_Qv(Q, v, M.shape[0])
    Delta = Q * v[..., None, :] - M
    return 0.5 * np.sum(Delta**2, axis=(-2, -1))


def l_tf(Q, v, M, S) -> np.ndarray:
    """The population loss of the attention layer, ``1/2 E sum_i (f_i - y_i)^2`` (eq. ``eq-ltf``).

    ``= 1/2 sum_a Delta_a S_a Delta_a^T`` with ``Delta = Q Diag(v) - M``. ``S`` is the moment
    tensor ``[d, d, d]`` (:func:`~attnlab.tasks.histogram.count_moments`) or an int ``N``.
    """
    M = _as_M(M)
    Q, v = _as_Qv(Q, v, M.shape[0])
    S = _as_S(S, M.shape[0])
    Delta = Q * v[..., None, :] - M
    return 0.5 * np.einsum("...ab,abc,...ac->...", Delta, S, Delta)


def _grad_P_df(Q, v, M):
    return Q * v[None, :] - M


def _grad_P_tf(Q, v, M, S):
    return np.einsum("abc,ac->ab", S, Q * v[None, :] - M)


def _chain(Q, v, G):
    # Gradient of g(Q Diag(v)) from G = dg/dP: dQ = G Diag(v), dv_k = q_k . G_k.
    return G * v[None, :], np.sum(Q * G, axis=0)


def grad_df(Q, v, M):
    """``(dl_df/dQ, dl_df/dv)``: ``dQ = Delta Diag(v)``, ``dv_k = q_k . Delta_k`` (eq. ``eq-flow``)."""
    M = _as_M(M)
    Q, v = _as_Qv(Q, v, M.shape[0], batched=False)
    return _chain(Q, v, _grad_P_df(Q, v, M))


def grad_tf(Q, v, M, S):
    """``(dl_tf/dQ, dl_tf/dv)``; the gradient in ``P = Q Diag(v)`` has rows ``Delta_a S_a``."""
    M = _as_M(M)
    Q, v = _as_Qv(Q, v, M.shape[0], batched=False)
    S = _as_S(S, M.shape[0])
    return _chain(Q, v, _grad_P_tf(Q, v, M, S))


# ----------------------------------------------------------------------------------------------
# Gradient flow and gradient descent
# ----------------------------------------------------------------------------------------------


def _integrate(grad_P, Q0, v0, t, rtol, atol, events=None):
    d = Q0.shape[0]

    def rhs(_, y):
        Q = y[: d * d].reshape(d, d)
        v = y[d * d :]
        dQ, dv = _chain(Q, v, grad_P(Q, v))
        return -np.concatenate([dQ.ravel(), dv])

    y0 = np.concatenate([Q0.ravel(), v0])
    sol = solve_ivp(
        rhs, (0.0, float(t[-1])), y0, method="DOP853", t_eval=t, rtol=rtol, atol=atol, events=events
    )
    if sol.status == -1:
        raise RuntimeError(f"gradient flow integration failed: {sol.message}")
    return sol


def _flow(grad_P, Q0, v0, t, rtol, atol):
    sol = _integrate(grad_P, Q0, v0, t, rtol, atol)
    d = Q0.shape[0]
    Y = sol.y.T  # [len(t), d*d + d]
    return Y[:, : d * d].reshape(len(t), d, d), Y[:, d * d :]


def _check_tol(rtol, atol):
    return check_positive("rtol", rtol), check_positive("atol", atol)


def gradient_flow(Q0, v0, M, t, *, rtol: float = RTOL, atol: float = ATOL):
    """Integrate gradient flow on ``l_df`` (eq. ``eq-flow``) with an adaptive solver.

    ``dQ/dt = -dl_df/dQ``, ``dv/dt = -dl_df/dv`` from ``(Q0 [d, d], v0 [d])``, with scipy's
    ``solve_ivp`` (DOP853, tight ``rtol``/``atol``). Returns ``(Q_t [len(t), d, d],
    v_t [len(t), d])`` at the non-decreasing times ``t`` (starting at ``t >= 0``; time 0 is the
    initial point).
    """
    M = _as_M(M)
    Q0, v0 = _as_Qv(Q0, v0, M.shape[0], batched=False)
    t = _as_t(t)
    rtol, atol = _check_tol(rtol, atol)
    return _flow(lambda Q, v: _grad_P_df(Q, v, M), Q0, v0, t, rtol, atol)


def gradient_flow_tf(Q0, v0, M, t, S, *, rtol: float = RTOL, atol: float = ATOL):
    """Integrate gradient flow on the population loss ``l_tf`` (eq. ``eq-ltf``).

    ``S`` is the moment tensor ``[d, d, d]`` or an int ``N`` (uniform tokens, sequence length
    ``N``). Returns ``(Q_t [len(t), d, d], v_t [len(t), d])`` like :func:`gradient_flow`.
    """
    M = _as_M(M)
    Q0, v0 = _as_Qv(Q0, v0, M.shape[0], batched=False)
    S = _as_S(S, M.shape[0])
    t = _as_t(t)
    rtol, atol = _check_tol(rtol, atol)
    return _flow(lambda Q, v: _grad_P_tf(Q, v, M, S), Q0, v0, t, rtol, atol)


def gradient_descent(Q0, v0, M, *, lr: float, steps: int, S=None, scale: float = 1.0, record_every: int = 1):
    """Full-batch gradient descent on ``scale * l_df`` (``S=None``) or on ``l_tf`` (``S`` given).

    Returns ``(steps [K], Q [K, d, d], v [K, d])`` recorded every ``record_every`` steps (and at
    the last step). With a small ``lr`` it follows the gradient flow at time ``lr * step``.
    """
    M = _as_M(M)
    Q, v = _as_Qv(Q0, v0, M.shape[0], batched=False)
    lr = check_positive("lr", lr)
    scale = check_positive("scale", scale)
    steps = check_int("steps", steps, minimum=0)
    record_every = check_int("record_every", record_every, minimum=1)
    if S is None:
        grad_P = lambda Q, v: scale * _grad_P_df(Q, v, M)  # noqa: E731
    else:
        S = _as_S(S, M.shape[0])
        grad_P = lambda Q, v: _grad_P_tf(Q, v, M, S)  # noqa: E731
    Q, v = Q.copy(), v.copy()
    ks, Qs, vs = [], [], []
    for k in range(steps + 1):
        if k % record_every == 0 or k == steps:
            ks.append(k)
            Qs.append(Q.copy())
            vs.append(v.copy())
        if k == steps:
            break
        dQ, dv = _chain(Q, v, grad_P(Q, v))
        Q -= lr * dQ
        v -= lr * dv
    if not (np.all(np.isfinite(Q)) and np.all(np.isfinite(v))):
        raise RuntimeError("gradient descent diverged: lower lr")
    return np.asarray(ks), np.asarray(Qs), np.asarray(vs)


# ----------------------------------------------------------------------------------------------
# Conservation law, the r-s construction and the Riccati closed form
# ----------------------------------------------------------------------------------------------


def delta(Q, v) -> np.ndarray:
    """The conserved quantities ``delta_k = v_k^2 - ||q_k||^2`` (eq. ``eq-delta``): ``[..., d]``."""
    Q, v = _as_Qv(Q, v)
    return v**2 - np.sum(Q**2, axis=-2)


def gamma(delta_k, m_norm):
    """The rate ``gamma = sqrt(4 ||m||^2 + delta^2)`` of the Riccati equation (eq. ``eq-riccati``)."""
    delta_k = np.asarray(delta_k, dtype=float)
    m_norm = np.asarray(m_norm, dtype=float)
    check_finite("delta_k", delta_k)
    check_finite("m_norm", m_norm)
    if np.any(m_norm < 0):
        raise ValueError("m_norm must be non-negative")
    return np.sqrt(4 * m_norm**2 + delta_k**2)


def riccati_z(z0, delta_k, m_norm, t) -> np.ndarray:
    """Closed form of ``z' = -z^2/2 + 2 m z + delta^2/2``, ``z(0) = z0`` (eq. ``eq-riccati-sol``).

    ``z(t) = (z+ - K e^{-gamma t} z-) / (1 - K e^{-gamma t})``, ``z+- = 2m +- gamma``,
    ``K = (z0 - z+) / (z0 - z-)``. Scalars ``z0 >= 0``, ``delta_k``, ``m_norm > 0``; ``t`` an array.
    """
    z0 = check_real("z0", z0, minimum=0.0)
    delta_k = check_real("delta_k", delta_k)
    m_norm = check_positive("m_norm", m_norm)
    t = _as_t(t)
    g = float(gamma(delta_k, m_norm))
    zp, zm = 2 * m_norm + g, 2 * m_norm - g
    if z0 == zm:  # only when z0 = 0 = delta: the fixed point at zero
        return np.full_like(t, z0)
    K = (z0 - zp) / (z0 - zm)
    E = K * np.exp(-g * t)
    return (zp - E * zm) / (1 - E)


def rs_solution(a0, v0, m_norm, t):
    """The one-dimensional problem ``min 1/2 (v a - m)^2`` solved in closed form (thm. ``thm-rs``).

    For a column with ``q = a m_hat`` (no orthogonal part) gradient flow keeps ``q`` parallel to
    ``m``; ``r = a + v`` and ``s = a - v`` satisfy ``r s = -delta`` and ``z = r^2`` follows
    :func:`riccati_z`. Returns ``(a_t, v_t)`` at times ``t``.
    """
    a0 = check_real("a0", a0)
    v0 = check_real("v0", v0)
    m_norm = check_positive("m_norm", m_norm)
    r0 = a0 + v0
    delta_k = v0**2 - a0**2
    z = riccati_z(r0**2, delta_k, m_norm, t)
    if r0 == 0.0:
        # r stays 0 (the stable manifold of the saddle at the origin): a = s/2 = -v and
        # s' = -s (s^2/4 + m), a Bernoulli equation: w = s^-2 solves w' = 1/2 + 2 m w.
        if a0 == 0.0:
            return np.zeros_like(z), np.zeros_like(z)
        t = _as_t(t)
        s0 = 2 * a0
        w = (s0**-2 + 1 / (4 * m_norm)) * np.exp(2 * m_norm * t) - 1 / (4 * m_norm)
        s = np.sign(s0) / np.sqrt(w)
        return s / 2, -s / 2
    r = np.sign(r0) * np.sqrt(z)  # r keeps its sign: r' = -r (v a - m)
    s = -delta_k / r
    return (r + s) / 2, (r - s) / 2


def _alignment(Q, M):
    norms = np.linalg.norm(M, axis=0)
    if np.any(norms == 0):
        raise ValueError("M must have non-zero columns for the r-s closed form")
    m_hat = M / norms
    a = np.sum(Q * m_hat, axis=0)
    return a, m_hat, norms


def closed_form_flow(Q0, v0, M, t):
    """Gradient flow on ``l_df`` from the r-s closed form, for ``Q0`` with columns ``q_k || m_k``.

    Returns ``(Q_t [len(t), d, d], v_t [len(t), d])``. Raises ``ValueError`` if a column of
    ``Q0`` has a component orthogonal to ``m_k`` (then the closed form does not apply).
    """
    M = _as_M(M)
    Q0, v0 = _as_Qv(Q0, v0, M.shape[0], batched=False)
    t = _as_t(t)
    a0, m_hat, norms = _alignment(Q0, M)
    perp = Q0 - a0 * m_hat
    if np.linalg.norm(perp) > 1e-12 * max(1.0, np.linalg.norm(Q0)):
        raise ValueError("Q0 must have columns parallel to those of M (q_k = a_k m_k/||m_k||)")
    d = M.shape[0]
    Q_t = np.empty((len(t), d, d))
    v_t = np.empty((len(t), d))
    for k in range(d):
        a_k, v_k = rs_solution(a0[k], v0[k], norms[k], t)
        Q_t[:, :, k] = a_k[:, None] * m_hat[:, k]
        v_t[:, k] = v_k
    return Q_t, v_t


# ----------------------------------------------------------------------------------------------
# Exponential bounds
# ----------------------------------------------------------------------------------------------


def _mu(delta_k, rho):
    return np.min((delta_k + np.sqrt(delta_k**2 + 4 * rho**2)) / 2)


def bound_rate_df(Q, v, M) -> float:
    """The rate ``mu`` of thm. ``thm-exp-df`` at the point ``(Q, v)`` (the time ``t0``).

    Needs every column error ``||e_k|| = ||v_k q_k - m_k||`` below ``||m_k||`` (implied by
    ``l_df < 1/2 min_k ||m_k||^2``); then ``rho_k = ||m_k|| - ||e_k||`` and
    ``mu = min_k (delta_k + sqrt(delta_k^2 + 4 rho_k^2)) / 2``.
    """
    M = _as_M(M)
    Q, v = _as_Qv(Q, v, M.shape[0], batched=False)
    e = np.linalg.norm(Q * v - M, axis=0)
    rho = np.linalg.norm(M, axis=0) - e
    if np.any(rho <= 0):
        raise ValueError("Q, v must have ||v_k q_k - m_k|| < ||m_k|| for every column k (bound needs it)")
    return float(_mu(delta(Q, v), rho))


def moment_spectrum(S) -> np.ndarray:
    """Eigenvalues of every ``S_a`` (ascending): ``[d, d, d] -> [d, d]`` (row ``a``)."""
    S = np.asarray(S, dtype=float)
    if S.ndim != 3 or len(set(S.shape)) != 1:
        raise ValueError(f"S must have shape [d, d, d], got {list(S.shape)}")
    check_finite("S", S)
    return np.linalg.eigvalsh(S)


def isotropic_constant(S) -> float:
    """The ``c`` of the best isotropic approximation ``S_a ~ c I`` in Frobenius norm:
    ``c = sum_a tr(S_a) / d^2`` (chapter 2, the assumption behind ``l_tf ~ c l_df``)."""
    S = np.asarray(S, dtype=float)
    d = S.shape[0]
    check_shape("S", S, (d, d, d))
    return float(np.einsum("abb->", S) / d**2)


def bound_rate_tf(Q, v, M, S) -> float:
    """The rate ``lambda mu`` of thm. ``thm-exp-tf`` at the point ``(Q, v)``.

    ``lambda = min_a lambda_min(S_a)``. Needs ``l_tf < lambda/2 min_k ||m_k||^2``; then
    ``rho_k = ||m_k|| - sqrt(2 l_tf / lambda)`` and ``mu`` as in :func:`bound_rate_df`.
    """
    M = _as_M(M)
    Q, v = _as_Qv(Q, v, M.shape[0], batched=False)
    S = _as_S(S, M.shape[0])
    lam = float(moment_spectrum(S)[:, 0].min())
    if lam <= 0:
        raise ValueError("S must have positive definite S_a (N >= 2) for the l_tf bound")
    rho = np.linalg.norm(M, axis=0) - np.sqrt(2 * float(l_tf(Q, v, M, S)) / lam)
    if np.any(rho <= 0):
        raise ValueError("Q, v must have l_tf < lambda/2 min_k ||m_k||^2 (the bound needs it)")
    return lam * float(_mu(delta(Q, v), rho))


def exponential_bound_df(Q, v, M, t) -> np.ndarray:
    """``l_df(t0) exp(-2 mu t)`` at times ``t`` after the point ``(Q, v)`` (thm. ``thm-exp-df``)."""
    mu = bound_rate_df(Q, v, M)
    return float(l_df(Q, v, M)) * np.exp(-2 * mu * _as_t(t))


def exponential_bound_tf(Q, v, M, S, t) -> np.ndarray:
    """``l_tf(t0) exp(-2 lambda mu t)`` at times ``t`` after ``(Q, v)`` (thm. ``thm-exp-tf``)."""
    rate = bound_rate_tf(Q, v, M, S)
    return float(l_tf(Q, v, M, S)) * np.exp(-2 * rate * _as_t(t))


# ----------------------------------------------------------------------------------------------
# Limit point, plateau and the exercise checker
# ----------------------------------------------------------------------------------------------


def _signs_from_flow(Q0, v0, M, S, t_max):
    """Signs of ``v_k(inf)``: integrate until the loss is small enough that no ``v_k`` can cross
    zero any more (the regime of thms. ``thm-exp-df``/``thm-exp-tf``: ``|v_k| ||q_k|| >= rho_k > 0``).
    """
    d = M.shape[0]
    norms = np.linalg.norm(M, axis=0)
    nz = norms > 0
    if S is None:
        grad_P = lambda Q, v: _grad_P_df(Q, v, M)  # noqa: E731

        def event(_, y):  # every column error below half its target norm
            Q, v = y[: d * d].reshape(d, d), y[d * d :]
            return np.max(np.linalg.norm(Q[:, nz] * v[nz] - M[:, nz], axis=0) / norms[nz]) - 0.5
    else:
        lam = float(moment_spectrum(S)[:, 0].min())
        grad_P = lambda Q, v: _grad_P_tf(Q, v, M, S)  # noqa: E731

        def event(_, y):  # sqrt(2 l_tf / lambda) below half the smallest target norm
            Q, v = y[: d * d].reshape(d, d), y[d * d :]
            return np.sqrt(2 * float(l_tf(Q, v, M, S)) / lam) / norms[nz].min() - 0.5

    event.terminal = True
    event.direction = -1
    if event(0.0, np.concatenate([Q0.ravel(), v0])) < 0:
        return np.sign(v0)
    sol = _integrate(grad_P, Q0, v0, np.array([0.0, t_max]), RTOL, ATOL, events=event)
    if sol.t_events[0].size == 0:
        raise RuntimeError(f"gradient flow did not reach the convergent regime by t_max={t_max} (a saddle?)")
    return np.sign(sol.y_events[0][0][d * d :])


def limit_point(Q0, v0, M, *, S=None, t_max: float = 1e4):
    """The point gradient flow converges to from ``(Q0, v0)`` (eq. ``eq-limit``).

    Column by column, with ``delta_k`` from the initial point: if ``m_k != 0``,
    ``v_k(inf)^2 = (delta_k + sqrt(delta_k^2 + 4 ||m_k||^2)) / 2`` and ``q_k(inf) = m_k / v_k(inf)``.
    If ``m_k = 0``, ``q_k`` keeps its direction and ``v_k`` its sign:
    ``v_k -> sign(v_k) sqrt(max(delta_k, 0))``, ``||q_k|| -> sqrt(max(-delta_k, 0))``.

    The *magnitudes* follow from the conservation law alone, for ``l_df`` and for ``l_tf`` (same
    minimisers, same ``delta_k``). The *sign* of ``v_k(inf)`` is the sign of ``r_k = q_k . m_hat_k
    + v_k`` when every ``q_k`` is parallel to ``m_k`` (``r`` cannot change sign there). Otherwise it
    depends on the path: the flow (on ``l_df``, or on ``l_tf`` if ``S`` is given) is integrated
    until no ``v_k`` can change sign any more. Returns ``(Q_inf [d, d], v_inf [d])``.
    """
    M = _as_M(M)
    Q0, v0 = _as_Qv(Q0, v0, M.shape[0], batched=False)
    t_max = check_positive("t_max", t_max)
    d = M.shape[0]
    if S is not None:
        S = _as_S(S, d)
    dk = delta(Q0, v0)
    norms = np.linalg.norm(M, axis=0)
    nz = norms > 0
    r0 = np.zeros(d)
    r0[nz] = np.sum(Q0[:, nz] * M[:, nz], axis=0) / norms[nz] + v0[nz]
    for k in np.flatnonzero(nz):
        if r0[k] == 0 and dk[k] == 0 and np.linalg.norm(Q0[:, k]) == 0:
            raise ValueError(f"Q0, v0: column {k} starts at the saddle q_k = 0, v_k = 0")
    perp = Q0[:, nz] - (np.sum(Q0[:, nz] * M[:, nz], axis=0) / norms[nz] ** 2) * M[:, nz]
    aligned = np.linalg.norm(perp) <= 1e-12 * max(1.0, np.linalg.norm(Q0))
    if aligned and np.all(r0[nz] != 0):
        signs = np.where(r0 >= 0, 1.0, -1.0)
    else:
        signs = _signs_from_flow(Q0, v0, M, S, t_max)
    Q_inf = np.zeros((d, d))
    v_inf = np.zeros(d)
    for k in range(d):
        if nz[k]:
            v_inf[k] = signs[k] * np.sqrt((dk[k] + np.sqrt(dk[k] ** 2 + 4 * norms[k] ** 2)) / 2)
            Q_inf[:, k] = M[:, k] / v_inf[k]
        else:
            v_inf[k] = np.sign(v0[k]) * np.sqrt(max(dk[k], 0.0))
            qn = np.linalg.norm(Q0[:, k])
            if qn > 0:
                Q_inf[:, k] = Q0[:, k] / qn * np.sqrt(max(-dk[k], 0.0))
    return Q_inf, v_inf


def plateau_time(Q0, v0, M, *, fraction: float = 0.5, S=None, t_max: float = 1e4) -> float:
    """The first time gradient flow brings the loss to ``fraction`` of its initial value.

    Found by event location in the ODE solver (root finding on ``l(t) - fraction * l(0)``), on
    ``l_df`` (``S=None``) or on ``l_tf`` (``S`` given). Raises ``RuntimeError`` if not reached by
    ``t_max`` (e.g. from a saddle).
    """
    M = _as_M(M)
    Q0, v0 = _as_Qv(Q0, v0, M.shape[0], batched=False)
    fraction = check_real("fraction", fraction, minimum=0.0, maximum=1.0, strict_minimum=True)
    t_max = check_positive("t_max", t_max)
    d = M.shape[0]
    if S is None:
        grad_P = lambda Q, v: _grad_P_df(Q, v, M)  # noqa: E731
        loss = lambda Q, v: float(l_df(Q, v, M))  # noqa: E731
    else:
        S = _as_S(S, d)
        grad_P = lambda Q, v: _grad_P_tf(Q, v, M, S)  # noqa: E731
        loss = lambda Q, v: float(l_tf(Q, v, M, S))  # noqa: E731
    level = fraction * loss(Q0, v0)

    def event(_, y):
        return loss(y[: d * d].reshape(d, d), y[d * d :]) - level

    event.terminal = True
    event.direction = -1
    sol = _integrate(grad_P, Q0, v0, np.array([0.0, t_max]), RTOL, ATOL, events=event)
    if sol.t_events[0].size == 0:
        raise RuntimeError(f"the loss did not reach {fraction} of its initial value by t_max={t_max}")
    return float(sol.t_events[0][0])


def check_limit_point(Q_answer, v_answer, Q0, v0, M, *, atol: float = 1e-6) -> str:
    """Exercise checker (chapter 3): is ``(Q_answer, v_answer)`` where gradient flow from
    ``(Q0, v0)`` ends?

    Raises ``AssertionError`` with a hint when it is not, and returns a confirmation message.
    """
    M = _as_M(M)
    d = M.shape[0]
    Q_answer, v_answer = _as_Qv(Q_answer, v_answer, d, batched=False)
    Q0, v0 = _as_Qv(Q0, v0, d, batched=False)
    atol = check_positive("atol", atol)
    residual = np.abs(Q_answer * v_answer - M).max()
    if residual > atol:
        raise AssertionError(f"Q Diag(v) differs from M by {residual:.3g}: this is not a global minimum")
    drift = np.abs(delta(Q_answer, v_answer) - delta(Q0, v0)).max()
    if drift > atol:
        raise AssertionError(
            f"delta_k = v_k^2 - ||q_k||^2 differs from its initial value by {drift:.3g}: "
            "gradient flow conserves it, so it cannot end here"
        )
    Q_inf, v_inf = limit_point(Q0, v0, M)
    err = max(np.abs(Q_answer - Q_inf).max(), np.abs(v_answer - v_inf).max())
    if err > atol:
        raise AssertionError(
            f"right delta and Q Diag(v) = M, but the signs of v are wrong (off by {err:.3g})"
        )
    return f"Correct: Q Diag(v) = M and delta_k conserved (to {max(residual, drift):.1e})."
