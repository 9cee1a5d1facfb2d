"""Gradient flow and gradient descent of the diagonal network, integrated numerically (chapter 3).

The flow on ``l_df`` or ``l_tf`` (eq. ``eq-flow``) with scipy's adaptive DOP853 at tight
tolerances, full-batch gradient descent, and the first time the loss falls to a fraction of its
initial value (the plateau length) by event location.
"""

from __future__ import annotations

import numpy as np
from scipy.integrate import solve_ivp

from attnlab.theory.diagonal_net.arguments import as_M, as_Qv, as_S, as_t
from attnlab.theory.diagonal_net.reduction import chain_rule, grad_P_df, grad_P_tf, l_df, l_tf
from attnlab.validation import check_int, check_positive, check_real

__all__ = [
    "RTOL",
    "ATOL",
    "integrate",
    "gradient_flow",
    "gradient_flow_tf",
    "gradient_descent",
    "plateau_time",
    "plateau_point",
]

RTOL = 1e-11
ATOL = 1e-13


def integrate(grad_P, Q0, v0, t, rtol, atol, events=None):
    d = Q0.shape[0]

    def rhs(_, y):
        Q = y[: d * d].reshape(d, d)
        v = y[d * d :]
        dQ, dv = chain_rule(Q, v, grad_P(Q, v))
        return -np.concatenate([dQ.ravel(), dv])

    y0 = np.concatenate([Q0.ravel(), v0])
    sol = solve_ivp(
        rhs, (0.0, float(t[-1])), y0, method="DOP853", t_eval=t, rtol=rtol, atol=atol, events=events
    )
    if sol.status == -1:
        raise RuntimeError(f"gradient flow integration failed: {sol.message}")
    return sol


def _flow(grad_P, Q0, v0, t, rtol, atol):
    sol = integrate(grad_P, Q0, v0, t, rtol, atol)
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
    M = as_M(M)
    Q0, v0 = as_Qv(Q0, v0, M.shape[0], batched=False)
    t = as_t(t)
    rtol, atol = _check_tol(rtol, atol)
    return _flow(lambda Q, v: grad_P_df(Q, v, M), Q0, v0, t, rtol, atol)


def gradient_flow_tf(Q0, v0, M, t, S, *, rtol: float = RTOL, atol: float = ATOL):
    """Integrate gradient flow on the population loss ``l_tf`` (eq. ``eq-ltf``).

    ``S`` is the moment tensor ``[d, d, d]`` or an int ``N`` (uniform tokens, sequence length
    ``N``). Returns ``(Q_t [len(t), d, d], v_t [len(t), d])`` like :func:`gradient_flow`.
    """
    M = as_M(M)
    Q0, v0 = as_Qv(Q0, v0, M.shape[0], batched=False)
    S = as_S(S, M.shape[0])
    t = as_t(t)
    rtol, atol = _check_tol(rtol, atol)
    return _flow(lambda Q, v: grad_P_tf(Q, v, M, S), Q0, v0, t, rtol, atol)


def gradient_descent(Q0, v0, M, *, lr: float, steps: int, S=None, scale: float = 1.0, record_every: int = 1):
    """Full-batch gradient descent on ``scale * l_df`` (``S=None``) or on ``l_tf`` (``S`` given).

    Returns ``(steps [K], Q [K, d, d], v [K, d])`` recorded every ``record_every`` steps (and at
    the last step). With a small ``lr`` it follows the gradient flow at time ``lr * step``.
    """
    M = as_M(M)
    Q, v = as_Qv(Q0, v0, M.shape[0], batched=False)
    lr = check_positive("lr", lr)
    scale = check_positive("scale", scale)
    steps = check_int("steps", steps, minimum=0)
    record_every = check_int("record_every", record_every, minimum=1)
    if S is None:
        grad_P = lambda Q, v: scale * grad_P_df(Q, v, M)  # noqa: E731
    else:
        S = as_S(S, M.shape[0])
        grad_P = lambda Q, v: grad_P_tf(Q, v, M, S)  # noqa: E731
    Q, v = Q.copy(), v.copy()
    ks, Qs, vs = [], [], []
    for k in range(steps + 1):
        if k % record_every == 0 or k == steps:
            ks.append(k)
            Qs.append(Q.copy())
            vs.append(v.copy())
        if k == steps:
            break
        dQ, dv = chain_rule(Q, v, grad_P(Q, v))
        Q -= lr * dQ
        v -= lr * dv
    if not (np.all(np.isfinite(Q)) and np.all(np.isfinite(v))):
        raise RuntimeError("gradient descent diverged: lower lr")
    return np.asarray(ks), np.asarray(Qs), np.asarray(vs)


def plateau_time(Q0, v0, M, *, fraction: float = 0.5, S=None, t_max: float = 1e4) -> float:
    """The first time gradient flow brings the loss to ``fraction`` of its initial value.

    Found by event location in the ODE solver (root finding on ``l(t) - fraction * l(0)``), on
    ``l_df`` (``S=None``) or on ``l_tf`` (``S`` given). Raises ``RuntimeError`` if not reached by
    ``t_max`` (e.g. from a saddle).
    """
    return plateau_point(Q0, v0, M, fraction=fraction, S=S, t_max=t_max)[0]


def plateau_point(Q0, v0, M, *, fraction: float = 0.5, S=None, t_max: float = 1e4):
    """:func:`plateau_time` and the point ``(Q [d, d], v [d])`` the flow has reached then."""
    M = as_M(M)
    Q0, v0 = as_Qv(Q0, v0, M.shape[0], batched=False)
    fraction = check_real("fraction", fraction, minimum=0.0, maximum=1.0, strict_minimum=True)
    t_max = check_positive("t_max", t_max)
    d = M.shape[0]
    if S is None:
        grad_P = lambda Q, v: grad_P_df(Q, v, M)  # noqa: E731
        loss = lambda Q, v: float(l_df(Q, v, M))  # noqa: E731
    else:
        S = as_S(S, d)
        grad_P = lambda Q, v: grad_P_tf(Q, v, M, S)  # noqa: E731
        loss = lambda Q, v: float(l_tf(Q, v, M, S))  # noqa: E731
    level = fraction * loss(Q0, v0)

    def event(_, y):
        return loss(y[: d * d].reshape(d, d), y[d * d :]) - level

    event.terminal = True
    event.direction = -1
    sol = integrate(grad_P, Q0, v0, np.array([0.0, t_max]), RTOL, ATOL, events=event)
    if sol.t_events[0].size == 0:
        raise RuntimeError(f"the loss did not reach {fraction} of its initial value by t_max={t_max}")
    y = sol.y_events[0][0]
    return float(sol.t_events[0][0]), y[: d * d].reshape(d, d), y[d * d :]
