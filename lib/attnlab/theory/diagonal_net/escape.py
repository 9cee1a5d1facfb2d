"""Escape of the diagonal network from a small initialisation (chapters 3 and 5).

From the flow linearised at the origin: column ``k`` grows along ``c_k = -dl/dp_k (P = 0)`` at
rate ``||c_k||`` and ``v_k`` takes the sign of ``r_k(0) = c_hat_k . q_k(0) + v_k(0)``
(prop. ``prop-sign-rule``). For ``l_df`` the sign is also known exactly from any start
(:func:`sign_df`). How closely the full flow follows ``c_hat_k`` at the escape:
:func:`escape_alignment`.
"""

from __future__ import annotations

import numpy as np

from attnlab.theory.diagonal_net.arguments import as_M, as_Qv, as_S
from attnlab.theory.diagonal_net.flow import plateau_point
from attnlab.validation import check_real

__all__ = [
    "escape_matrix",
    "escape_rates",
    "escape_coordinates",
    "sign_rule",
    "sign_df",
    "escape_alignment",
]


def escape_matrix(M, S=None) -> np.ndarray:
    """``C`` with columns ``c_k = -dl/dp_k`` at ``P = Q Diag(v) = 0``: ``[d, d]``.

    For ``l_df`` (``S=None``) ``C = M``; for ``l_tf`` ``c_k[a] = sum_b S_a[k, b] M[a, b]``. Near
    the origin ``l = l(0) - sum_k v_k c_k . q_k + O(|theta|^4)``.
    """
    M = as_M(M)
    if S is None:
        return M.copy()
    S = as_S(S, M.shape[0])
    return np.einsum("akb,ab->ak", S, M)


def escape_rates(M, S=None) -> np.ndarray:
    """``||c_k||``: the rate at which ``r_k = c_hat_k . q_k + v_k`` grows near the origin: ``[d]``."""
    return np.linalg.norm(escape_matrix(M, S), axis=0)


def escape_coordinates(Q0, v0, M, S=None) -> np.ndarray:
    """``r_k(0) = c_hat_k . q_k(0) + v_k(0)``: the coordinate that grows like ``e^{||c_k|| t}``
    near the origin (eq. ``eq-sign-rule``): ``[d]``. Columns with ``c_k = 0`` get ``v_k(0)``."""
    M = as_M(M)
    Q0, v0 = as_Qv(Q0, v0, M.shape[0], batched=False)
    C = escape_matrix(M, S)
    norms = np.linalg.norm(C, axis=0)
    return np.sum(Q0 * C, axis=0) / np.where(norms > 0, norms, 1.0) + v0


def sign_rule(Q0, v0, M, S=None) -> np.ndarray:
    """The predicted signs of ``v_k(inf)`` from a small start: ``sign(c_hat_k . q_k(0) + v_k(0))``.

    Exact for the flow linearised at the origin (``r_k`` grows, ``c_hat_k . q_k - v_k`` decays);
    for the full flow a prediction that the chapter tests. Columns with ``c_k = 0`` get ``0``.
    """
    r = escape_coordinates(Q0, v0, M, S)
    norms = escape_rates(M, S)
    return np.where(norms > 0, np.sign(r), 0.0)


def sign_df(Q0, v0, M) -> np.ndarray:
    """The exact signs of ``v_k(inf)`` under gradient flow on ``l_df``, from any start: ``[d]``.

    By the closed form of a column (thm. ``thm-column``) the direction of ``theta = (v, q)`` turns
    to the top eigenvector ``(2 ||m||, (gamma - delta) m_hat)`` of ``A`` (eigenvalue ``gamma/2``), so
    ``sign v_k(inf) = sign(||m_k|| v_k(0) + (gamma_k - delta_k)/2 m_hat_k . q_k(0))`` with
    ``gamma_k = sqrt(4 ||m_k||^2 + delta_k^2)``. From a small start (``delta_k -> 0``) this is
    :func:`sign_rule`. A column with ``m_k = 0`` keeps the sign of ``v_k(0)``; a column whose
    projection is exactly 0 (the stable manifold of a saddle) gets ``0``.
    """
    M = as_M(M)
    Q0, v0 = as_Qv(Q0, v0, M.shape[0], batched=False)
    norms = np.linalg.norm(M, axis=0)
    dk = v0**2 - np.sum(Q0**2, axis=0)
    gamma = np.sqrt(4 * norms**2 + dk**2)
    a0 = np.sum(Q0 * M, axis=0) / np.where(norms > 0, norms, 1.0)  # m_hat_k . q_k(0)
    return np.where(norms > 0, np.sign(norms * v0 + 0.5 * (gamma - dk) * a0), np.sign(v0))


def escape_alignment(Q0, v0, M, S=None, *, fraction: float = 0.99) -> np.ndarray:
    """``|cos(q_k, c_hat_k)|`` of every column when the loss has fallen to ``fraction`` of its start.

    Gradient flow on ``l_df`` (``S=None``) or ``l_tf`` from ``(Q0, v0)``, stopped at the time
    :func:`~attnlab.theory.diagonal_net.flow.plateau_time` gives; near the origin each ``q_k`` grows
    along ``c_hat_k`` (prop. ``prop-sign-rule``). Returns ``[d]`` (``NaN`` for a zero column).
    """
    M = as_M(M)
    Q0, v0 = as_Qv(Q0, v0, M.shape[0], batched=False)
    fraction = check_real("fraction", fraction, minimum=0.0, maximum=1.0, strict_minimum=True)
    C = escape_matrix(M, S)
    C_hat = C / np.where(np.linalg.norm(C, axis=0) > 0, np.linalg.norm(C, axis=0), 1.0)
    _, q, _ = plateau_point(Q0, v0, M, fraction=fraction, S=S)
    norms = np.linalg.norm(q, axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.abs(np.sum(q * C_hat, axis=0)) / norms
