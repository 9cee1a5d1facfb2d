"""Where gradient flow of the diagonal network ends (chapter 3).

The limit point ``v_k(inf)^2 = (delta_k + sqrt(delta_k^2 + 4 ||m_k||^2)) / 2``,
``q_k(inf) = m_k / v_k(inf)`` (eq. ``eq-limit``), with the signs of ``v_k(inf)`` in closed form
(``l_df``) or from the path (``l_tf``), and the checker of the chapter's exercise on it.
"""

from __future__ import annotations

import numpy as np

from attnlab.theory.diagonal_net.arguments import as_M, as_Qv, as_S
from attnlab.theory.diagonal_net.escape import sign_df, sign_rule
from attnlab.theory.diagonal_net.flow import ATOL, RTOL, integrate
from attnlab.theory.diagonal_net.reduction import delta, grad_P_tf, l_tf, moment_spectrum
from attnlab.validation import check_positive

__all__ = ["limit_point", "verify_limit_point", "verify_signs"]


def _signs_from_flow_tf(Q0, v0, M, S, t_max):
    """Signs of ``v_k(inf)`` on ``l_tf``: integrate until the loss is small enough that no ``v_k``
    can cross zero any more (the regime of thm. ``thm-exp-tf``: ``|v_k| ||q_k|| >= rho_k > 0``).
    """
    d = M.shape[0]
    norms = np.linalg.norm(M, axis=0)
    nz = norms > 0
    lam = float(moment_spectrum(S)[:, 0].min())

    def event(_, y):  # sqrt(2 l_tf / lambda) below half the smallest target norm
        Q, v = y[: d * d].reshape(d, d), y[d * d :]
        return np.sqrt(2 * float(l_tf(Q, v, M, S)) / lam) / norms[nz].min() - 0.5

    event.terminal = True
    event.direction = -1
    if event(0.0, np.concatenate([Q0.ravel(), v0])) < 0:
        return np.sign(v0)
    grad_P = lambda Q, v: grad_P_tf(Q, v, M, S)  # noqa: E731
    sol = integrate(grad_P, Q0, v0, np.array([0.0, t_max]), RTOL, ATOL, events=event)
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
    minimisers, same ``delta_k``). On ``l_df`` the *sign* of ``v_k(inf)`` is known in closed form
    (:func:`~attnlab.theory.diagonal_net.escape.sign_df`). On ``l_tf`` (``S`` given) it depends on
    the path: the flow is integrated until no ``v_k`` can change sign any more. Raises
    ``ValueError`` for a start on the stable manifold of a saddle (``l_df``: a zero projection on
    the top eigenvector of thm. ``thm-column``). Returns ``(Q_inf [d, d], v_inf [d])``.
    """
    M = as_M(M)
    Q0, v0 = as_Qv(Q0, v0, M.shape[0], batched=False)
    t_max = check_positive("t_max", t_max)
    d = M.shape[0]
    if S is not None:
        S = as_S(S, d)
    dk = delta(Q0, v0)
    norms = np.linalg.norm(M, axis=0)
    nz = norms > 0
    signs = sign_df(Q0, v0, M)
    if S is None:  # a zero projection: the flow runs into the saddle v_k = 0, q_k perp m_k
        stuck = np.flatnonzero(nz & (signs == 0))
    else:  # q_k = 0, v_k = 0 stays put under any loss of Q Diag(v)
        stuck = np.flatnonzero(nz & (v0 == 0) & (np.linalg.norm(Q0, axis=0) == 0))
    if stuck.size:
        raise ValueError(f"Q0, v0: column {stuck[0]} starts on the stable manifold of a saddle")
    if S is not None:
        signs = _signs_from_flow_tf(Q0, v0, M, S, t_max)
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


def verify_limit_point(Q_answer, v_answer, Q0, v0, M, *, atol: float = 1e-6) -> str:
    """Exercise checker (chapter 3): is ``(Q_answer, v_answer)`` where gradient flow from
    ``(Q0, v0)`` ends?

    Raises ``AssertionError`` with a hint when it is not, and returns a confirmation message.
    """
    M = as_M(M)
    d = M.shape[0]
    Q_answer, v_answer = as_Qv(Q_answer, v_answer, d, batched=False)
    Q0, v0 = as_Qv(Q0, v0, d, batched=False)
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


def verify_signs(answer, Q0, v0, M, S) -> str:
    """Exercise checker (chapter 5): are ``answer`` ``[d]`` the signs of ``v_k(inf)`` along gradient
    flow on ``l_tf`` (moments ``S``) from ``(Q0, v0)``? The truth comes from the flow
    (:func:`limit_point`), not from the sign rule."""
    M = as_M(M)
    d = M.shape[0]
    Q0, v0 = as_Qv(Q0, v0, d, batched=False)
    S = as_S(S, d)
    answer = np.sign(np.asarray(answer, dtype=float))
    if answer.shape != (d,):
        raise ValueError(f"answer must have shape [{d}], one sign per column")
    true = np.sign(limit_point(Q0, v0, M, S=S)[1])
    if np.array_equal(answer, true):
        return f"Correct: the signs of v(inf) are {true.astype(int).tolist()}."
    if np.array_equal(answer, sign_rule(Q0, v0, M)):
        raise AssertionError("those are the signs of an escape along m_k (l_df); l_tf escapes along c_k")
    wrong = np.flatnonzero(answer != true).tolist()
    raise AssertionError(f"wrong sign in columns {wrong}: compute r_k(0) = c_hat_k . q_k(0) + v_k(0)")
