"""How fast the loss of the diagonal network converges (chapter 3).

* Exponential bounds ``l(t) <= l(t0) exp(-2 mu (t - t0))`` once the loss is small enough
  (thms. ``thm-exp-df``, ``thm-exp-tf``).
* The Hessian at any point, and the asymptotic rate at a minimum: twice the smallest non-zero
  eigenvalue of the Hessian, in closed form ``2 min_k v_k(inf)^2`` for ``l_df``.
"""

from __future__ import annotations

import numpy as np

from attnlab.theory.diagonal_net.arguments import as_M, as_Qv, as_S, as_t
from attnlab.theory.diagonal_net.reduction import delta, l_df, l_tf, moment_spectrum
from attnlab.validation import check_finite, check_positive

__all__ = [
    "bound_rate_df",
    "bound_rate_tf",
    "exponential_bound_df",
    "exponential_bound_tf",
    "hessian",
    "asymptotic_rate",
    "asymptotic_rate_df",
]


def _mu(delta_k, rho):
    return np.min((delta_k + np.sqrt(delta_k**2 + 4 * rho**2)) / 2)


def bound_rate_df(Q, v, M) -> float:
    """The rate ``mu`` of thm. ``thm-exp-df`` at the point ``(Q, v)`` (the time ``t0``).

    Needs every column error ``||e_k|| = ||v_k q_k - m_k||`` below ``||m_k||`` (implied by
    ``l_df < 1/2 min_k ||m_k||^2``); then ``rho_k = ||m_k|| - ||e_k||`` and
    ``mu = min_k (delta_k + sqrt(delta_k^2 + 4 rho_k^2)) / 2``.
    """
    M = as_M(M)
    Q, v = as_Qv(Q, v, M.shape[0], batched=False)
    e = np.linalg.norm(Q * v - M, axis=0)
    rho = np.linalg.norm(M, axis=0) - e
    if np.any(rho <= 0):
        raise ValueError("Q, v must have ||v_k q_k - m_k|| < ||m_k|| for every column k (bound needs it)")
    return float(_mu(delta(Q, v), rho))


def bound_rate_tf(Q, v, M, S) -> float:
    """The rate ``lambda mu`` of thm. ``thm-exp-tf`` at the point ``(Q, v)``.

    ``lambda = min_a lambda_min(S_a)``. Needs ``l_tf < lambda/2 min_k ||m_k||^2``; then
    ``rho_k = ||m_k|| - sqrt(2 l_tf / lambda)`` and ``mu`` as in :func:`bound_rate_df`.
    """
    M = as_M(M)
    Q, v = as_Qv(Q, v, M.shape[0], batched=False)
    S = as_S(S, M.shape[0])
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
    return float(l_df(Q, v, M)) * np.exp(-2 * mu * as_t(t))


def exponential_bound_tf(Q, v, M, S, t) -> np.ndarray:
    """``l_tf(t0) exp(-2 lambda mu t)`` at times ``t`` after ``(Q, v)`` (thm. ``thm-exp-tf``)."""
    rate = bound_rate_tf(Q, v, M, S)
    return float(l_tf(Q, v, M, S)) * np.exp(-2 * rate * as_t(t))


def hessian(Q, v, M, S=None) -> np.ndarray:
    """The Hessian of ``l_df`` (``S=None``) or ``l_tf`` in ``theta = (Q.ravel(), v)``: ``[d^2+d, d^2+d]``.

    With ``P = Q Diag(v)``, ``J = dP/dtheta`` and ``G = dl/dP``: ``H = J^T (d^2 l/dP^2) J`` plus
    ``G_ab`` in the ``(Q_ab, v_b)`` entries (``P_ab = Q_ab v_b`` is bilinear).
    """
    M = as_M(M)
    Q, v = as_Qv(Q, v, M.shape[0], batched=False)
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
        S = as_S(S, d)
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
    M = as_M(M)
    Q, v = as_Qv(Q, v, M.shape[0], batched=False)
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
