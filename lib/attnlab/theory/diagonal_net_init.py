"""How the initialisation shapes gradient flow of the diagonal network (Part I, chapters 2 and 3).

Companion of :mod:`attnlab.theory.diagonal_net` (the losses, flows and bounds live there):

* escape from a small initialisation, from the flow linearised at the origin: column ``k``
  grows along ``c_k = -dl/dp_k (P = 0)`` at rate ``||c_k||`` and ``v_k`` takes the sign of
  ``c_hat_k . q_k(0) + v_k(0)`` (prop. ``prop-sign-rule``);
* the Hessian at any point and the asymptotic rate of the loss at a minimum (twice the
  smallest non-zero eigenvalue of the Hessian), with its closed form for ``l_df``;
* the closed form of a whole column of ``l_df`` with an orthogonal part (thm. ``thm-column``):
  ``theta = (v, q)`` solves ``theta' = A theta - ||theta||^2 theta / 2`` with a constant
  symmetric ``A``, so ``theta(t) = e^{At} theta_0 / sqrt(1 + int_0^t ||e^{As} theta_0||^2 ds)``.
"""

from __future__ import annotations

import numpy as np

from attnlab.theory.diagonal_net import _as_M, _as_Qv, _as_S, _as_t
from attnlab.validation import check_finite, check_positive, check_real

__all__ = [
    "escape_matrix",
    "sign_rule",
    "escape_rates",
    "hessian",
    "asymptotic_rate",
    "asymptotic_rate_df",
    "column_matrix",
    "column_flow",
]


def escape_matrix(M, S=None) -> np.ndarray:
    """``C`` with columns ``c_k = -dl/dp_k`` at ``P = Q Diag(v) = 0``: ``[d, d]``.

    For ``l_df`` (``S=None``) ``C = M``; for ``l_tf`` ``c_k[a] = sum_b S_a[k, b] M[a, b]``. Near
    the origin ``l = l(0) - sum_k v_k c_k . q_k + O(|theta|^4)``.
    """
    M = _as_M(M)
    if S is None:
        return M.copy()
    S = _as_S(S, M.shape[0])
    return np.einsum("akb,ab->ak", S, M)


def escape_rates(M, S=None) -> np.ndarray:
    """``||c_k||``: the rate at which ``r_k = c_hat_k . q_k + v_k`` grows near the origin: ``[d]``."""
    return np.linalg.norm(escape_matrix(M, S), axis=0)


def sign_rule(Q0, v0, M, S=None) -> np.ndarray:
    """The predicted signs of ``v_k(inf)`` from a small start: ``sign(c_hat_k . q_k(0) + v_k(0))``.

    Exact for the flow linearised at the origin (``r_k`` grows, ``c_hat_k . q_k - v_k`` decays);
    for the full flow a prediction that the chapter tests. Columns with ``c_k = 0`` get ``0``.
    """
    M = _as_M(M)
    Q0, v0 = _as_Qv(Q0, v0, M.shape[0], batched=False)
    C = escape_matrix(M, S)
    norms = np.linalg.norm(C, axis=0)
    r = np.sum(Q0 * C, axis=0) / np.where(norms > 0, norms, 1.0) + v0
    return np.where(norms > 0, np.sign(r), 0.0)


def hessian(Q, v, M, S=None) -> np.ndarray:
    """The Hessian of ``l_df`` (``S=None``) or ``l_tf`` in ``theta = (Q.ravel(), v)``: ``[d^2+d, d^2+d]``.

    With ``P = Q Diag(v)``, ``J = dP/dtheta`` and ``G = dl/dP``: ``H = J^T (d^2 l/dP^2) J`` plus
    ``G_ab`` in the ``(Q_ab, v_b)`` entries (``P_ab = Q_ab v_b`` is bilinear).
    """
    M = _as_M(M)
    Q, v = _as_Qv(Q, v, M.shape[0], batched=False)
    d = M.shape[0]
    n = d * d
    J = np.zeros((n, n + d))  # row a*d+b: dP_ab
    idx = np.arange(n)
    J[idx, idx] = np.tile(v, d)  # dP_ab / dQ_ab = v_b
    J[idx, n + np.tile(np.arange(d), d)] = Q.ravel()  # dP_ab / dv_b = Q_ab
    Delta = Q * v - M
    if S is None:
        HP = np.eye(n)
        G = Delta
    else:
        S = _as_S(S, d)
        HP = np.zeros((n, n))
        for a in range(d):
            HP[a * d : (a + 1) * d, a * d : (a + 1) * d] = S[a]
        G = np.einsum("abc,ac->ab", S, Delta)
    H = J.T @ HP @ J
    H[idx, n + np.tile(np.arange(d), d)] += G.ravel()
    H[n + np.tile(np.arange(d), d), idx] += G.ravel()
    return H


def asymptotic_rate(Q, v, M, S=None, *, atol: float = 1e-8) -> float:
    """Twice the smallest non-zero eigenvalue of the Hessian at a minimum ``Q Diag(v) = M``.

    The minimisers form a manifold of dimension ``d`` (``q_k -> q_k / alpha``, ``v_k -> alpha v_k``),
    whose tangent gives ``d`` zero eigenvalues; they are dropped. Near the minimum gradient flow
    is linear and a generic loss decays like ``exp(-rate t)``. Raises ``ValueError`` if
    ``(Q, v)`` is not a minimum to ``atol``.
    """
    M = _as_M(M)
    Q, v = _as_Qv(Q, v, M.shape[0], batched=False)
    atol = check_positive("atol", atol)
    if np.abs(Q * v - M).max() > atol:
        raise ValueError(f"Q, v must be a minimum (Q Diag(v) = M to atol={atol})")
    eig = np.linalg.eigvalsh(hessian(Q, v, M, S))
    d = M.shape[0]
    return float(2 * eig[d])


def asymptotic_rate_df(delta_k, m_norm) -> float:
    """The asymptotic rate of ``l_df`` in closed form: ``2 min_k v_k(inf)^2``.

    At the limit, column ``k``'s Hessian has eigenvalues ``v_k^2`` (``d - 1`` directions of
    ``q_k`` orthogonal to ``m_k``) and ``v_k^2 + ||q_k||^2 = sqrt(delta_k^2 + 4 ||m_k||^2)``, with
    ``v_k(inf)^2 = (delta_k + sqrt(delta_k^2 + 4 ||m_k||^2)) / 2`` (eq. ``eq-limit``). A generic
    start (some ``q_k`` not parallel to ``m_k``) excites the orthogonal directions.
    """
    delta_k = np.atleast_1d(np.asarray(delta_k, dtype=float))
    m_norm = np.broadcast_to(np.asarray(m_norm, dtype=float), delta_k.shape)
    check_finite("delta_k", delta_k)
    if np.any(m_norm <= 0):
        raise ValueError("m_norm must be positive")
    return float(np.min(delta_k + np.sqrt(delta_k**2 + 4 * m_norm**2)))


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
    t = _as_t(t)
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
