"""Closed forms of gradient flow on ``l_df``, column by column (chapter 3).

* A column with ``q_k`` parallel to ``m_k``: with ``a = q . m_hat``, ``r = a + v``, ``s = a - v``,
  ``z = r^2`` solves the Riccati equation ``z' = -z^2/2 + 2 ||m|| z + delta^2/2``
  (eqs. ``eq-riccati``, ``eq-riccati-sol``, thm. ``thm-rs``).
* Any column (thm. ``thm-column``): ``theta = (v, q)`` solves ``theta' = A theta -
  ||theta||^2 theta / 2`` with a constant symmetric ``A``, so
  ``theta(t) = e^{At} theta_0 / sqrt(1 + int_0^t ||e^{As} theta_0||^2 ds)``.
"""

from __future__ import annotations

import numpy as np

from attnlab.theory.diagonal_net.arguments import as_M, as_Qv, as_t
from attnlab.validation import check_finite, check_positive, check_real

__all__ = [
    "gamma",
    "riccati_z",
    "rs_solution",
    "closed_form_flow",
    "half_escape_times",
    "verify_escape_times",
    "column_matrix",
    "column_flow",
]


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
    t = as_t(t)
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
        t = as_t(t)
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
    M = as_M(M)
    Q0, v0 = as_Qv(Q0, v0, M.shape[0], batched=False)
    t = as_t(t)
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


def half_escape_times(Q0, v0, M) -> np.ndarray:
    """When ``v_k a_k`` first reaches half its target ``||m_k||``, for columns ``q_k || m_k``: ``[d]``.

    By the r-s solution (thm. ``thm-rs``) ``v a = (z - delta^2 / z) / 4``, which equals ``||m|| / 2``
    at ``z* = ||m|| + sqrt(||m||^2 + delta^2)``; inverting eq. ``eq-riccati-sol`` there gives
    ``T = log(K / u*) / gamma`` with ``u* = (z* - z+) / (z* - z-)``. From an aligned, balanced
    start (``delta = 0``, ``z0 = 4 sigma^2``) this is eq. ``eq-stage``. Columns that start past
    half their target get ``0``; columns on the saddle's stable manifold (``r = 0``) get ``inf``.
    """
    M = as_M(M)
    Q0, v0 = as_Qv(Q0, v0, M.shape[0], batched=False)
    a0, m_hat, norms = _alignment(Q0, M)
    if np.linalg.norm(Q0 - a0 * m_hat) > 1e-12 * max(1.0, np.linalg.norm(Q0)):
        raise ValueError("Q0 must have columns parallel to those of M (q_k = a_k m_k/||m_k||)")
    dk = v0**2 - a0**2
    g = gamma(dk, norms)
    zp, zm = 2 * norms + g, 2 * norms - g
    z0, z_half = (a0 + v0) ** 2, norms + np.sqrt(norms**2 + dk**2)
    T = np.zeros(M.shape[0])
    for k in range(M.shape[0]):
        if v0[k] * a0[k] >= norms[k] / 2:
            continue
        if z0[k] == 0:
            T[k] = np.inf
            continue
        K = (z0[k] - zp[k]) / (z0[k] - zm[k])
        u_half = (z_half[k] - zp[k]) / (z_half[k] - zm[k])
        T[k] = np.log(K / u_half) / g[k]
    return T


def verify_escape_times(T_answer, Q0, v0, M, *, rtol: float = 1e-3) -> str:
    """Exercise checker (chapter 4): are ``T_answer`` ``[d]`` the times at which each column of an
    aligned start reaches half its target (:func:`half_escape_times`), to ``rtol``?"""
    T = half_escape_times(Q0, v0, M)
    T_answer = np.asarray(T_answer, dtype=float)
    if T_answer.shape != T.shape:
        raise ValueError(f"T_answer must have shape {list(T.shape)}, one time per column")
    wrong = np.flatnonzero(~np.isclose(T_answer, T, rtol=rtol, atol=0))
    if wrong.size:
        k = int(wrong[0])
        norms = np.linalg.norm(np.asarray(M, dtype=float), axis=0)
        hint = (
            "the rate of column k is gamma_k = 2 ||m_k||, not 2"
            if np.isclose(T_answer[k], T[k] * norms[k], rtol=0.05)
            else "solve z(T) = z+/2 with eq-riccati-sol, z0 = (a0 + v0)^2"
        )
        raise AssertionError(f"column {k}: T = {T_answer[k]:.4g}, expected {T[k]:.4g}; {hint}")
    order = np.argsort(T, kind="stable")
    return f"Correct: the columns reach half their target in the order {order.tolist()}."


def column_matrix(m, delta_k) -> np.ndarray:
    """``A = [[delta/2, m^T], [m, -delta/2 I]]``: the linear part of a column's flow (thm. ``thm-column``)."""
    m = np.asarray(m, dtype=float)
    if m.ndim != 1 or m.size == 0:
        raise ValueError(f"m must be a non-empty vector, got shape {list(m.shape)}")
    check_finite("m", m)
    delta_k = check_real("delta_k", delta_k)
    A = np.zeros((m.size + 1, m.size + 1))
    A[0, 0] = delta_k / 2
    A[0, 1:] = m
    A[1:, 0] = m
    A[1:, 1:] = -delta_k / 2 * np.eye(m.size)
    return A


def column_flow(q0, v0, m, t):
    """Gradient flow of ``1/2 ||v q - m||^2`` in closed form, any ``q0`` (thm. ``thm-column``).

    With ``theta = (v, q)`` and ``A`` = :func:`column_matrix`, ``theta(t) = e^{At} theta_0 /
    sqrt(1 + theta_0^T (e^{2At} - I)(2A)^{-1} theta_0)``, evaluated in the eigenbasis of ``A``
    with every exponential scaled by ``e^{-lambda_max t}`` (no overflow at large ``t``).
    Returns ``(q_t [len(t), d], v_t [len(t)])``.
    """
    q0 = np.asarray(q0, dtype=float)
    m = np.asarray(m, dtype=float)
    if q0.shape != m.shape or m.ndim != 1:
        raise ValueError(f"q0 must have the shape of m {list(m.shape)}, got {list(q0.shape)}")
    check_finite("q0", q0)
    v0 = check_real("v0", v0)
    t = as_t(t)
    lam, U = np.linalg.eigh(column_matrix(m, v0**2 - q0 @ q0))
    c = U.T @ np.concatenate([[v0], q0])  # theta_0 in the eigenbasis
    top = lam[-1]  # = gamma / 2 > 0 when m != 0
    T, L = t[:, None], lam[None, :]
    num = c * np.exp((L - top) * T)  # e^{At} theta_0 / e^{top t}
    x = 2 * L * T
    small = np.abs(x) < 1e-8
    safe = np.where(small, 1.0, L)
    # (e^{2 lam t} - 1) / (2 lam), times e^{-2 top t}, without overflow
    integral = np.where(
        small, T * np.exp(-2 * top * T), (np.exp((2 * L - 2 * top) * T) - np.exp(-2 * top * T)) / (2 * safe)
    )
    den = np.sqrt(np.exp(-2 * top * t) + integral @ c**2)
    theta = (num @ U.T) / den[:, None]  # [len(t), d + 1]
    return theta[:, 1:], theta[:, 0]
