"""A port of the authors' state-evolution algorithm (Part II), the baseline of ``bench_state_evolution``.

Written for the benchmark from the algorithm of the theory notebook of Cui et al. (2024)
(github.com/SPOC-group/positional-and-semantic-attention, ``theory/theory.ipynb``); none of their
code is copied. What is kept from their algorithm:

* the prox ``argmin_h ‖h - u‖²/V + ℓ(h; h*)`` is one ``scipy.optimize.minimize`` call (BFGS, the
  default, with finite-difference gradients, started at ``h = 0``) per quadrature node, on an
  objective written with 2×2 matrices (softmax of ``h hᵀ``, traces);
* the hats are the direct averages ``q̂ = α E Σ g²``, ``m̂ = α E Σ s g``,
  ``θ̂ = α E Σ g η / V*``, ``V̂ = -α E Σ g ξ / √q + θ θ̂ / q`` (``g = (prox - u)/V``);
* the fixed point is found by plain damped iteration (0.8 old + 0.2 new) that stops when the
  largest absolute change of (q, m, θ) is below ``tol`` (1e-4 in the notebook), at most 300 times.

Differences, both in the baseline's favour: the quadrature is the library's 4-D Gauss–Hermite
product rule (the same nodes as the solver it is compared with) instead of nested degree-7
``quadpy`` schemes, and one prox per node serves all four hats (the notebook solves the same prox
four times, once per hat, and once more for Φ).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize

from attnlab.theory import phase_transition as se
from attnlab.theory.phase_transition.equations import _Problem


def _softmax_rows(M):
    M = M - M.max(axis=1, keepdims=True)
    P = np.exp(M)
    return P / P.sum(axis=1, keepdims=True)


def _moreau(h, u, Y, V, rho_xx):
    """‖h - u‖²/V + Tr[S Σ Sᵀ] - 2 Tr[Y Σ Sᵀ] (the constant Tr[Y Σ Yᵀ] is left out, as in the notebook)."""
    S = _softmax_rows(np.outer(h, h))
    return ((h - u) ** 2).sum() / V + np.trace(S @ rho_xx @ S.T) - 2 * np.trace(Y @ rho_xx @ S.T)


def _prox_all(q, m, V, theta, nodes, omega, A, rho, rho_xx):
    """One BFGS per node: returns prox [N, 2], u [N, 2] and the full Moreau value [N] (with Tr[YΣYᵀ])."""
    xi1, xi2, eta1, eta2 = nodes
    v_star = np.sqrt(rho - theta**2 / q)
    u = np.stack([np.sqrt(q) * xi1 + m, np.sqrt(q) * xi2 - m], axis=1)  # [N, 2]
    hs = np.stack(
        [v_star * eta1 + theta / np.sqrt(q) * xi1, v_star * eta2 + theta / np.sqrt(q) * xi2], axis=1
    )
    out = np.empty_like(u)
    val = np.empty(u.shape[0])
    for i in range(u.shape[0]):  # the authors' loop over quadrature nodes
        Y = (1 - omega) * _softmax_rows(np.outer(hs[i], hs[i])) + omega * A
        res = minimize(_moreau, np.zeros(2), args=(u[i], Y, V, rho_xx))
        out[i] = res.x
        val[i] = res.fun + np.trace(Y @ rho_xx @ Y.T)
    return out, u, val


def solve_baseline(
    alpha, omega, init, *, sigma=0.5, lam=0.01, A=None, n_nodes=6, tol=1e-4, max_iter=300, damping=0.8
) -> dict:
    """Damped fixed-point iteration with a BFGS prox per node; returns the overlaps, ε_g, ε_t, iterations."""
    A = se.DEFAULT_A if A is None else np.asarray(A, dtype=float)
    X, W = se.product_rule(n_nodes, 4, 1e-10)  # (ξ₁, ξ₂, η₁, η₂), the solver's nodes
    rho, s2 = sigma**2, sigma**2
    rho_xx = s2 * np.eye(2)
    q, m, V, theta = (float(v) for v in init)
    xi1, xi2, eta1, eta2 = X
    converged = False
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007 (it is reported)
        h, u, _ = _prox_all(q, m, V, theta, X, omega, A, rho, rho_xx)
        g = (h - u) / V  # [N, 2]
        v_star = np.sqrt(rho - theta**2 / q)
        q_hat = alpha * W @ (g**2).sum(1)
        m_hat = alpha * W @ (g[:, 0] - g[:, 1])
        theta_hat = alpha * W @ (g[:, 0] * eta1 + g[:, 1] * eta2) / v_star
        V_hat = -alpha * W @ (g[:, 0] * xi1 + g[:, 1] * xi2) / np.sqrt(q) + theta * theta_hat / q
        D = lam + s2 * V_hat
        new = (
            s2 * (s2 * q_hat + m_hat**2 + s2 * rho * theta_hat**2) / D**2,
            m_hat / D,
            s2 / D,
            s2 * rho * theta_hat / D,
        )
        if max(abs(new[0] - q), abs(new[1] - m), abs(new[3] - theta)) < tol:
            converged = True
            break
        q, m, V, theta = ((1 - damping) * n + damping * o for n, o in zip(new, (q, m, V, theta), strict=True))
    # Training loss ε_t = -Φ (one more prox pass, as the notebook's Φ) and test error ε_g.
    _, _, val = _prox_all(q, m, V, theta, X, omega, A, rho, rho_xx)
    D = lam + s2 * V_hat
    phi = (
        0.5 * (V_hat * q - q_hat * V)
        - theta * theta_hat
        - m * m_hat
        + 0.5 * (s2 * q_hat + m_hat**2 + s2 * rho * theta_hat**2) / D
        - 0.5 * alpha * (W @ val)
    )
    prob = _Problem(alpha, omega, sigma, lam, A, n_nodes, 1e-10)
    eps_g = float(prob.eps_g(q, m, theta))
    return {
        "q": q,
        "m": m,
        "V": V,
        "theta": theta,
        "eps_g": eps_g,
        "eps_t": float(-phi),
        "iterations": it,
        "converged": converged,
        "n_nodes": n_nodes,
        "n_points": int(W.size),
    }
