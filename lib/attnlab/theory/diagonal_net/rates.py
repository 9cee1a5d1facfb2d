"""How fast the loss of the diagonal network converges (chapter 4, and chapter 5 for ``l_tf``).

* Exponential bounds ``l(t) <= l(t0) exp(-2 mu (t - t0))`` once the loss is small enough
  (thms. ``thm-exp-df``, ``thm-exp-tf``).
* The Hessian at any point, and the asymptotic rate at a minimum: twice the smallest non-zero
  eigenvalue of the Hessian from a generic start; for ``l_df`` in closed form, column by column,
  from any start (eq. ``eq-rate``), and its constant at a random start of scale ``sigma``.
"""

from __future__ import annotations

import numpy as np

from attnlab.theory.diagonal_net.arguments import as_M, as_Qv, as_S, as_t
from attnlab.theory.diagonal_net.escape import sign_df
from attnlab.theory.diagonal_net.reduction import delta, l_df, l_tf, moment_spectrum
from attnlab.validation import check_finite, check_int, check_positive, check_real

__all__ = [
    "bound_rate_df",
    "bound_rate_tf",
    "exponential_bound_df",
    "exponential_bound_tf",
    "hessian",
    "asymptotic_rate",
    "asymptotic_rate_df",
    "column_rates_df",
    "rate_constant",
    "verify_asymptotic_rate",
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
    is linear, and the loss of a *generic* start, one that excites every direction, decays like
    ``exp(-rate t)``. A start that leaves the slowest direction unexcited decays faster: on
    ``l_df``, a column whose ``q_k`` stays parallel to ``m_k`` (see :func:`asymptotic_rate_df`).
    Raises ``ValueError`` if ``(Q, v)`` is not a minimum to ``atol``.
    """
    M = as_M(M)
    Q, v = as_Qv(Q, v, M.shape[0], batched=False)
    atol = check_positive("atol", atol)
    if np.abs(Q * v - M).max() > atol:
        raise ValueError(f"Q, v must be a minimum (Q Diag(v) = M to atol={atol})")
    eig = np.linalg.eigvalsh(hessian(Q, v, M, S))
    d = M.shape[0]
    return float(2 * eig[d])


def column_rates_df(delta_k, m_norm, parallel) -> np.ndarray:
    """The asymptotic rate of each column's loss ``1/2 ||e_k||^2`` on ``l_df`` (eq. ``eq-rate``).

    At the limit, column ``k``'s Hessian has the eigenvalues ``v_k^2`` (``d - 1`` directions of
    ``q_k`` orthogonal to ``m_k``) and ``v_k^2 + ||q_k||^2 = gamma_k = sqrt(delta_k^2 + 4 ||m_k||^2)``
    (along ``m_k``), with ``v_k(inf)^2 = (delta_k + gamma_k) / 2`` (eq. ``eq-limit``). A column
    whose ``q_k`` has a part orthogonal to ``m_k`` decays at ``2 v_k(inf)^2``; a column whose
    ``q_k`` is parallel to ``m_k`` stays parallel (eq. ``eq-1d``) and decays at ``2 gamma_k``. A
    column with ``m_k = 0`` decays at ``2 |delta_k|``. Arrays ``[d]``; ``parallel`` is boolean.
    """
    delta_k = np.atleast_1d(np.asarray(delta_k, dtype=float))
    m_norm = np.broadcast_to(np.asarray(m_norm, dtype=float), delta_k.shape)
    parallel = np.broadcast_to(np.asarray(parallel, dtype=bool), delta_k.shape)
    check_finite("delta_k", delta_k)
    check_finite("m_norm", m_norm)
    if np.any(m_norm < 0):
        raise ValueError("m_norm must be non-negative")
    g = np.sqrt(delta_k**2 + 4 * m_norm**2)
    return np.where(m_norm == 0, 2 * np.abs(delta_k), np.where(parallel, 2 * g, delta_k + g))


def asymptotic_rate_df(Q0, v0, M, *, rtol: float = 1e-12) -> float:
    """The asymptotic rate of ``l_df`` along gradient flow from ``(Q0, v0)`` (eq. ``eq-rate``).

    The loss is a sum of column losses, so it decays at the smallest of their rates
    (:func:`column_rates_df`): ``2 v_k(inf)^2`` for a column whose ``q_k(0)`` has a part
    orthogonal to ``m_k`` larger than ``rtol ||q_k(0)||``, ``2 sqrt(delta_k^2 + 4 ||m_k||^2)`` for a
    column parallel to ``m_k``. Columns already at their minimum do not count (``inf`` if all are).
    From a random start no column is parallel, and the rate is ``min_k 2 v_k(inf)^2``. Raises
    ``ValueError`` for a start on the stable manifold of a saddle, where the loss does not go to 0.
    """
    M = as_M(M)
    Q0, v0 = as_Qv(Q0, v0, M.shape[0], batched=False)
    rtol = check_real("rtol", rtol, minimum=0.0)
    norms = np.linalg.norm(M, axis=0)
    m_hat = M / np.where(norms > 0, norms, 1.0)
    q_perp = Q0 - m_hat * np.sum(Q0 * m_hat, axis=0)
    parallel = (norms > 0) & (np.linalg.norm(q_perp, axis=0) <= rtol * np.linalg.norm(Q0, axis=0))
    stuck = (norms > 0) & (sign_df(Q0, v0, M) == 0)
    if np.any(stuck):
        k = np.flatnonzero(stuck)[0]
        raise ValueError(f"Q0, v0: column {k} starts on the stable manifold of a saddle")
    moving = np.linalg.norm(Q0 * v0 - M, axis=0) > 0
    rates = column_rates_df(delta(Q0, v0), norms, parallel)[moving]
    return float(rates.min()) if rates.size else float("inf")


def rate_constant(d: int, sigma: float, *, n_draws: int, seed=0) -> np.ndarray:
    """The asymptotic rate of ``l_df`` from random starts, in units of ``2 / ((d - 1) sigma^2)``.

    The start has i.i.d. ``sigma N(0, 1)`` entries and every target column has ``||m_k|| = 1`` (the
    histogram, a permutation). Then ``||q_k(0)||^2 / sigma^2`` is chi-squared with ``d`` degrees of
    freedom and ``v_k(0)^2 / sigma^2`` with one, independent across columns, so ``delta_k`` is drawn
    from these (exactly in distribution, in ``O(d)`` per draw instead of ``O(d^2)``); no column is
    parallel to ``m_k`` (probability one), and the rate is ``min_k 2 v_k(inf)^2``. Returns the
    ``n_draws`` ratios ``rate (d - 1) sigma^2 / 2`` (``[n_draws]``), a random variable of the draw.
    """
    d = check_int("d", d, minimum=2)
    sigma = check_positive("sigma", sigma)
    n_draws = check_int("n_draws", n_draws, minimum=1)
    rng = np.random.default_rng(seed)
    q2 = rng.chisquare(d, size=(n_draws, d))
    v2 = rng.chisquare(1, size=(n_draws, d))
    delta_k = sigma**2 * (v2 - q2)
    rates = column_rates_df(delta_k.ravel(), 1.0, False).reshape(n_draws, d).min(axis=1)
    return rates * (d - 1) * sigma**2 / 2


def verify_asymptotic_rate(answer, Q0, v0, M, *, rtol: float = 1e-6) -> str:
    """Exercise checker (chapter 4): is ``answer`` the asymptotic rate of ``l_df`` along gradient
    flow from ``(Q0, v0)`` (:func:`asymptotic_rate_df`)?"""
    answer = check_real("answer", answer)
    true = asymptotic_rate_df(Q0, v0, M)
    if abs(answer - true) <= rtol * true:
        return f"Correct: the loss decays like exp(-{true:.4g} t)."
    M = as_M(M)
    Q0, v0 = as_Qv(Q0, v0, M.shape[0], batched=False)
    generic = column_rates_df(delta(Q0, v0), np.linalg.norm(M, axis=0), False).min()
    if abs(answer - generic) <= rtol * generic:
        raise AssertionError(
            "that is min_k 2 v_k(inf)^2, the rate of a start that excites every direction: "
            "is every q_k(0) off the line of m_k?"
        )
    raise AssertionError(f"not the asymptotic rate ({answer:.4g}): find each column's rate, then the slowest")
