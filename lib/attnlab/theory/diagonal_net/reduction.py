"""The reduction: linear self-attention on histogram-like tasks as a diagonal network (chapter 2).

With ``P = Q Diag(v)`` and ``Delta = P - M``: the loss of the diagonal network ``l_df``
(eq. ``eq-ldf``), the population loss of the attention layer ``l_tf`` with the moments
``S_a = E[h_a h h^T]`` (eq. ``eq-ltf``), their gradients (eq. ``eq-flow``), the conserved
``delta_k = v_k^2 - ||q_k||^2`` (eq. ``eq-delta``) and the spectrum of the ``S_a``.
"""

from __future__ import annotations

import numpy as np

from attnlab.theory.diagonal_net.arguments import as_M, as_Qv, as_S
from attnlab.validation import check_finite, check_shape

__all__ = [
    "l_df",
    "l_tf",
    "grad_P_df",
    "grad_P_tf",
    "chain_rule",
    "grad_df",
    "grad_tf",
    "delta",
    "moment_spectrum",
    "isotropic_constant",
]


def l_df(Q, v, M) -> np.ndarray:
    """``l_df(Q, v) = 1/2 ||Q Diag(v) - M||_F^2`` (eq. ``eq-ldf``); ``[..., d, d] -> [...]``."""
    M = as_M(M)
    Q, v = as_Qv(Q, v, M.shape[0])
    Delta = Q * v[..., None, :] - M
    return 0.5 * np.sum(Delta**2, axis=(-2, -1))


def l_tf(Q, v, M, S) -> np.ndarray:
    """The population loss of the attention layer, ``1/2 E sum_i (f_i - y_i)^2`` (eq. ``eq-ltf``).

    ``= 1/2 sum_a Delta_a S_a Delta_a^T`` with ``Delta = Q Diag(v) - M``. ``S`` is the moment
    tensor ``[d, d, d]`` (:func:`~attnlab.tasks.histogram.count_moments`) or an int ``N``.
    """
    M = as_M(M)
    Q, v = as_Qv(Q, v, M.shape[0])
    S = as_S(S, M.shape[0])
    Delta = Q * v[..., None, :] - M
    return 0.5 * np.einsum("...ab,abc,...ac->...", Delta, S, Delta)


def grad_P_df(Q, v, M):
    return Q * v[None, :] - M


def grad_P_tf(Q, v, M, S):
    return np.einsum("abc,ac->ab", S, Q * v[None, :] - M)


def chain_rule(Q, v, G):
    # Gradient of g(Q Diag(v)) from G = dg/dP: dQ = G Diag(v), dv_k = q_k . G_k.
    return G * v[None, :], np.sum(Q * G, axis=0)


def grad_df(Q, v, M):
    """``(dl_df/dQ, dl_df/dv)``: ``dQ = Delta Diag(v)``, ``dv_k = q_k . Delta_k`` (eq. ``eq-flow``)."""
    M = as_M(M)
    Q, v = as_Qv(Q, v, M.shape[0], batched=False)
    return chain_rule(Q, v, grad_P_df(Q, v, M))


def grad_tf(Q, v, M, S):
    """``(dl_tf/dQ, dl_tf/dv)``; the gradient in ``P = Q Diag(v)`` has rows ``Delta_a S_a``."""
    M = as_M(M)
    Q, v = as_Qv(Q, v, M.shape[0], batched=False)
    S = as_S(S, M.shape[0])
    return chain_rule(Q, v, grad_P_tf(Q, v, M, S))


def delta(Q, v) -> np.ndarray:
    """The conserved quantities ``delta_k = v_k^2 - ||q_k||^2`` (eq. ``eq-delta``): ``[..., d]``."""
    Q, v = as_Qv(Q, v)
    return v**2 - np.sum(Q**2, axis=-2)


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
