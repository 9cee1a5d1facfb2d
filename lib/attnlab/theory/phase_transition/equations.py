"""The fixed-point map of Part II (chapter 02): conjugates from overlaps and back, Φ and ε_g.

:class:`FixedPoint` is one solution with its errors and diagnostics; ``_Problem`` holds everything
fixed during one solve (parameters, Gauss–Hermite nodes, warm starts of the prox) and evaluates
the map. The solver that iterates it is :mod:`.fixed_point`; the authors' variant of the averages
is :mod:`.authors`.

Numerics: the hats use the Stein form. With φ the prox's minimum value (continuous) and
g = -∇_u φ / 2, the averages E[g], E[g ξ], E[g η] are written as averages of φ times polynomials.
The prox jumps between mirror-image valleys; φ does not, so the quadrature converges much faster
(chapter 02). Only q̂ = α E‖g‖² keeps a discontinuous integrand. This matters most for θ̂ at small
θ: direct averages of g η on a low-order rule (as in the authors' code) overestimate the slope of
θ -> θ_new near θ = 0 (above 1 where the converged value is about 0.7, ω = 0.3, α = 0.35), so
their semantic branch keeps θ > 0 down to α -> 0, while the converged map has θ = 0 stable below
α ≈ 0.6 (test_theta_zero_is_stable_at_small_alpha).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from attnlab.theory.phase_transition.cubature import product_rule
from attnlab.theory.phase_transition.prox import _global_starts, _loss, _prox_batch, _softmax_diag, _target

__all__ = ["BRANCHES", "STARTS", "FixedPoint"]

BRANCHES = ("semantic", "positional")
METHODS = ("converged", "authors")  # this module's solver, or the authors' procedure (solve_authors)
# Starting points (q, m, V, θ) of the authors' iteration, one per branch.
STARTS = {
    "positional": (0.0206838209589, 0.2, 14.575, 0.0),
    "semantic": (0.906838209589, 0.0002, 14.575, 0.3472),
}


@dataclass(frozen=True)
class FixedPoint:
    """A solution of the fixed-point equations, with its errors and convergence diagnostics.

    ``mu_max`` is the largest real part of the eigenvalues μ of the Jacobian of the map on the
    branch's invariant subspace at the point (``nan`` where it was not computed). A damped
    iteration converges to the point for some damping if and only if ``mu_max < 1``; a point with
    ``mu_max > 1`` repels the iteration for every damping (``solve`` never reports one as
    converged).
    """

    alpha: float
    omega: float
    branch: str
    sigma: float
    lam: float
    q: float
    m: float
    V: float
    theta: float
    q_hat: float
    m_hat: float
    V_hat: float
    theta_hat: float
    eps_g: float
    eps_t: float
    iterations: int
    residual: float
    converged: bool
    n_nodes: int
    rule: str = "gauss-hermite"
    mu_max: float = float("nan")

    @property
    def theta_over_sigma2(self) -> float:
        """θ/σ², the overlap that experiments report as Q*ᵀQ/d."""
        return self.theta / self.sigma**2

    def as_dict(self) -> dict:
        return asdict(self)


class _Problem:
    """Everything fixed during one solve: parameters, nodes, warm starts of the prox."""

    def __init__(self, alpha, omega, sigma, lam, A, n_nodes, prune, branch=None):
        self.alpha, self.omega, self.sigma, self.lam, self.A = alpha, omega, sigma, lam, A
        self.branch = branch
        self.s2 = sigma**2
        self.rho = sigma**2
        self.X, self.W = product_rule(n_nodes, 4, prune)  # X = (ν₁, ν₂, ζ₁, ζ₂)
        self.h = None  # warm start of the prox: [2, N]

    def fields(self, q, m, theta):
        """Pre-activations u and teacher fields h* at the nodes X = (ν₁, ν₂, ζ₁, ζ₂).

        The pair (u₀ = √q ξ, h* = (θ/√q) ξ + sqrt(ρ - θ²/q) η) of the equations is Gaussian with
        covariance [[q, θ], [θ, ρ]]; we draw it as h* = √ρ ζ, u₀ = (θ/√ρ) ζ + b ν with
        b = sqrt(q - θ²/ρ), so that u depends on ν and h* does not.
        """
        nu1, nu2, z1, z2 = self.X
        sr = np.sqrt(self.rho)
        b = np.sqrt(max(q - theta**2 / self.rho, 1e-300))
        c = theta / sr
        u1, u2 = c * z1 + b * nu1 + m, c * z2 + b * nu2 - m  # u_ℓ = u₀_ℓ + s_ℓ m
        hs1, hs2 = sr * z1, sr * z2
        return u1, u2, hs1, hs2, b

    def hats(self, q, m, V, theta, all_starts=False, fresh=True):
        """Conjugate variables and E[min] from the prox at every node (eq-pt-se-hats).

        With φ = min_h {‖h - u‖²/V + ℓ(h; h*)} (continuous) and g = (prox - u)/V = -∇_u φ / 2,
        Stein's lemma in ν gives E[g_ℓ] = -E[φ ν_ℓ]/(2b), E[g_ℓ ν_ℓ] = -E[φ (ν_ℓ² - 1)]/(2b) and
        E[g_ℓ ζ_ℓ] = -E[φ ν_ℓ ζ_ℓ]/(2b). These are the same integrals as in eq-pt-se-hats, but φ only
        has kinks where g jumps between two minima of the prox, so Gauss–Hermite converges much
        faster. E[g_ℓ ξ_ℓ] and E[g_ℓ η_ℓ] follow from ξ = (θ ζ/√ρ + b ν)/√q and
        η = (√ρ ζ - θ ξ/√q)/sqrt(ρ - θ²/q).
        """
        nu1, nu2, z1, z2 = self.X
        u1, u2, hs1, hs2, b = self.fields(q, m, theta)
        T = _target(hs1, hs2, self.omega, self.A)
        # ℓ(h) = ℓ(-h): the prox has a valley near u and its mirror valley near -u, and at some
        # nodes neither u nor 0 leads Newton to the lower one (positional branch, alpha = 2: a
        # weight of 2e-4, enough to move the fixed point by 3e-4 depending on the warm starts).
        if self.h is None or all_starts:  # from u, -u, 0 and the previous solution
            starts = _global_starts(u1, u2)
            if self.h is not None:
                starts.append((self.h[0], self.h[1]))
        elif fresh:  # from u, -u and the previous solution
            starts = [(u1, u2), (-u1, -u2), (self.h[0], self.h[1])]
        else:  # warm start only (cheap: a few Newton steps)
            starts = [(self.h[0], self.h[1])]
        h1, h2, phi = _prox_batch(u1, u2, V, T, self.s2, starts)
        self.h = np.stack([h1, h2])
        W, alpha, rho = self.W, self.alpha, self.rho
        g1, g2 = (h1 - u1) / V, (h2 - u2) / V
        q_hat = alpha * W @ (g1**2 + g2**2)
        Eg1, Eg2 = -(W @ (phi * nu1)) / (2 * b), -(W @ (phi * nu2)) / (2 * b)
        Eg_nu = -(W @ (phi * (nu1**2 + nu2**2 - 2))) / (2 * b)  # Σ_ℓ E[g_ℓ ν_ℓ]
        Eg_z = -(W @ (phi * (nu1 * z1 + nu2 * z2))) / (2 * b)  # Σ_ℓ E[g_ℓ ζ_ℓ]
        sq = np.sqrt(q)
        s_star = np.sqrt(max(rho - theta**2 / q, 1e-300))
        Eg_xi = (theta / np.sqrt(rho) * Eg_z + b * Eg_nu) / sq  # Σ_ℓ E[g_ℓ ξ_ℓ]
        Eg_eta = (np.sqrt(rho) * Eg_z - theta / sq * Eg_xi) / s_star  # Σ_ℓ E[g_ℓ η_ℓ]
        m_hat = alpha * (Eg1 - Eg2)
        theta_hat = alpha * Eg_eta / s_star
        V_hat = -alpha * Eg_xi / sq + theta * theta_hat / q
        return q_hat, m_hat, V_hat, theta_hat, W @ phi

    def overlaps(self, q_hat, m_hat, V_hat, theta_hat):
        """Overlaps from the conjugates (eq-pt-se-overlaps), D = λ + σ² V̂."""
        s2, rho = self.s2, self.rho
        D = self.lam + s2 * V_hat
        q = s2 * (s2 * q_hat + m_hat**2 + s2 * rho * theta_hat**2) / D**2
        return np.array([q, m_hat / D, s2 / D, s2 * rho * theta_hat / D])

    def restrict(self, hats):
        """Stay in the branch's invariant subspace: θ̂ = 0 (positional) or m̂ = 0 (semantic)."""
        q_hat, m_hat, V_hat, theta_hat = hats
        if self.branch == "positional":
            theta_hat = 0.0
        elif self.branch == "semantic":
            m_hat = 0.0
        return q_hat, m_hat, V_hat, theta_hat

    def eps_g(self, q, m, theta):
        """ε_g = (σ²/2) E‖S(u) - T(h*)‖_F² (chapter 01, eq-pt-eps-overlaps)."""
        u1, u2, hs1, hs2, _ = self.fields(q, m, theta)
        T = _target(hs1, hs2, self.omega, self.A)
        a, b = _softmax_diag(u1, u2)
        return 0.5 * self.W @ _loss(a, b, T, self.s2)

    def phi(self, x, hats, e_min):
        """Free energy Φ at (overlaps, hats); the training loss is ε_t = -Φ (eq-pt-se-phi)."""
        q, m, V, theta = x
        q_hat, m_hat, V_hat, theta_hat = hats
        s2, rho = self.s2, self.rho
        D = self.lam + s2 * V_hat
        return (
            0.5 * (V_hat * q - q_hat * V)
            - m * m_hat
            - theta * theta_hat
            + 0.5 * (s2 * q_hat + m_hat**2 + s2 * rho * theta_hat**2) / D
            - 0.5 * self.alpha * e_min
        )


def _result(
    prob, branch, x, hats, phi, iterations, residual, converged, n_nodes, rule="gauss-hermite", mu_max=np.nan
):
    """The FixedPoint at overlaps ``x`` with conjugates ``hats`` and free energy ``phi``."""
    q, m, V, theta = (float(v) for v in x)
    return FixedPoint(
        alpha=prob.alpha,
        omega=prob.omega,
        branch=branch,
        sigma=prob.sigma,
        lam=prob.lam,
        q=q,
        m=m,
        V=V,
        theta=theta,
        q_hat=float(hats[0]),
        m_hat=float(hats[1]),
        V_hat=float(hats[2]),
        theta_hat=float(hats[3]),
        eps_g=float(prob.eps_g(q, m, theta)),
        eps_t=float(-phi),
        iterations=int(iterations),
        residual=float(residual),
        converged=bool(converged),
        n_nodes=n_nodes,
        rule=rule,
        mu_max=float(mu_max),
    )
