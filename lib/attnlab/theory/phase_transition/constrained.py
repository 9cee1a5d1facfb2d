"""Part II's training loss with the branch's order parameter held fixed (chapter 03).

``constrained(alpha, omega, branch, value, sigma=0.5, lam=0.01, A=None, *, n_nodes=20) -> Constrained``
    The replica-symmetric training loss ε_t(value) of the best student whose order parameter is
    held at ``value`` (θ/σ² on the semantic branch, m on the positional one; the other one is 0),
    and its slope dε_t/d(value).

Holding θ fixed replaces the θ-equation of the fixed point by the constraint: in Φ
(eq-pt-se-phi) the terms in θ̂ are ``-θ θ̂ + σ²ρ θ̂²/(2D)``, stationary at θ̂_c = θ D/(σ²ρ) with
D = λ + σ² V̂, while the hat equation gives θ̂_h = α E[g η]/sqrt(ρ - θ²/q) = -(α/2) ∂E_min/∂θ.
The remaining equations (q, V and their hats) are solved as usual, and by the envelope theorem
dε_t/dθ = -dΦ/dθ = θ̂_c - θ̂_h: zero exactly at a fixed point of the full map. On the positional
branch the same holds with m̂_c = m D and dε_t/dm = m̂_c - m̂_h. ``value`` at a branch's fixed
point gives back that fixed point's ε_t (tests).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab.theory.phase_transition.equations import BRANCHES, _Problem
from attnlab.theory.phase_transition.prox import _check_common
from attnlab.validation import check_choice, check_int, check_real

__all__ = ["Constrained", "constrained"]


@dataclass(frozen=True)
class Constrained:
    """The training loss at a fixed order parameter (θ/σ² or m) and its slope in that parameter."""

    alpha: float
    omega: float
    branch: str
    value: float
    eps_t: float
    slope: float
    q: float
    V: float
    residual: float
    converged: bool


def constrained(
    alpha,
    omega,
    branch,
    value,
    sigma=0.5,
    lam=0.01,
    A=None,
    *,
    n_nodes: int = 20,
    init=None,
    tol: float = 1e-8,
    max_iter: int = 400,
) -> Constrained:
    """ε_t with the order parameter held at ``value`` (θ/σ² if ``branch="semantic"``, else m).

    The other equations are iterated with damping 1/2 from ``init = (q, V)`` (default
    (0.07, 2)) until the relative change of q and V is below ``tol``. ``slope`` is dε_t/d(value).
    Where the overlap cannot be held at ``value`` (the iteration leaves q > 0, V > 0 or overflows
    as θ² reaches σ² q), it stops at once: ``eps_t``, ``slope``, ``q`` and ``V`` are nan and
    ``converged`` is False; from a given ``init`` it is first retried from the default start.
    """
    alpha, omega, sigma, lam, A = _check_common(alpha, omega, sigma, lam, A)
    branch = check_choice("branch", branch, BRANCHES)
    value = check_real("value", value)
    n_nodes = check_int("n_nodes", n_nodes, minimum=2, maximum=60)
    tol = check_real("tol", tol, minimum=0.0, strict_minimum=True)
    max_iter = check_int("max_iter", max_iter, minimum=1)
    s2 = sigma**2
    semantic = branch == "semantic"
    if semantic and not abs(value) < 1:
        raise ValueError(f"value must be theta/sigma^2 in (-1, 1) on the semantic branch, got {value!r}")
    q, V = (0.07, 2.0) if init is None else (float(init[0]), float(init[1]))
    if not (q > 0 and V > 0):
        raise ValueError(f"init must be (q, V) with q > 0 and V > 0, got {init!r}")
    prob = _Problem(alpha, omega, sigma, lam, A, n_nodes, 1e-10, branch)
    m, theta = (0.0, value * s2) if semantic else (value, 0.0)

    def step(q, V, **kw):
        q_hat, m_hat, V_hat, theta_hat, e_min = prob.hats(q, m, V, theta, **kw)
        D = lam + s2 * V_hat
        hat_c = theta * D / (s2 * prob.rho) if semantic else m * D  # the constraint's conjugate
        extra = s2 * prob.rho * hat_c**2 if semantic else hat_c**2
        q_new = s2 * (s2 * q_hat + extra) / D**2
        hats = (q_hat, 0.0, V_hat, hat_c) if semantic else (q_hat, hat_c, V_hat, 0.0)
        return q_new, s2 / D, hats, e_min, hat_c - (theta_hat if semantic else m_hat)

    res = np.inf
    for it in range(max_iter):
        q_new, V_new, *_ = step(q, V, fresh=it % 4 == 0)
        if not (np.isfinite(q_new) and np.isfinite(V_new) and q_new > 0 and V_new > 0):
            # the overlap cannot be held at this value (θ² reaches σ² q): stop, not converged
            q, V, res = float("nan"), float("nan"), float("inf")
            break
        res = max(abs(q_new - q) / q, abs(V_new - V) / V)
        q, V = 0.5 * (q + q_new), 0.5 * (V + V_new)
        if res < tol:
            break
    if not np.isfinite(q) and init is not None:  # a warm start outside the basin: start afresh
        return constrained(
            alpha, omega, branch, value, sigma, lam, A, n_nodes=n_nodes, tol=tol, max_iter=max_iter
        )
    if np.isfinite(q):
        _, _, hats, e_min, gap = step(q, V, all_starts=True)
        eps_t = -prob.phi((q, m, V, theta), hats, e_min)
        slope = gap * s2 if semantic else gap  # dε_t/d(θ/σ²) = σ² dε_t/dθ
    else:
        eps_t = slope = float("nan")
    return Constrained(
        alpha,
        omega,
        branch,
        value,
        float(eps_t),
        float(slope),
        float(q),
        float(V),
        float(res),
        bool(res < tol),
    )
