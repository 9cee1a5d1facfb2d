"""Fixed-point (state-evolution) equations of the tied low-rank attention model (Part II).

This module solves the high-dimensional limit of Cui, Behrens, Krzakala & Zdeborová (2024), "A
phase transition between positional and semantic learning in a solvable model of dot-product
attention", in the setting of every main figure: L = 2 tokens, rank r = 1, Σ_ℓ = σ² I, a target
``T(h*) = (1 - ω) softmax(h* h*ᵀ) + ω A``. Chapter ``book/phase-transition/02-high-dim-limit.md``
derives the equations; chapters 03 and 04 use the solver.

Public API
----------
``solve(alpha, omega, branch, sigma=0.5, lam=0.01, A=None, *, n_nodes=20, ...) -> FixedPoint``
    One fixed point. ``branch`` is ``"semantic"`` or ``"positional"`` (the two starting points of
    the authors). The result has ``.eps_g`` (= E‖f - y‖²/(2d)), ``.eps_t`` (= -Φ), ``.q``, ``.m``,
    ``.V``, ``.theta`` (and ``.theta_over_sigma2``), the conjugates ``.q_hat``, ``.m_hat``,
    ``.V_hat``, ``.theta_hat`` and the diagnostics ``.iterations``, ``.residual``,
    ``.converged``.
``solve_both(alpha, omega, ...) -> dict``
    ``{"semantic": FixedPoint, "positional": FixedPoint, "global": FixedPoint}``; the global
    minimum is the branch with the lower training loss ``eps_t``.
``global_minimum(alpha, omega, ...) -> FixedPoint``
    The branch with the lower ``eps_t``.
``branch_curves(alphas, omega, ...) -> dict``
    Theory curves over α for both branches (for plots against experiments):
    ``{"alpha": [n], "semantic": {"eps_g": [n], "eps_t": [n], "q", "m", "V", "theta",
    "theta_over_sigma2", "converged"}, "positional": {...}, "global": {... , "branch": [n] str},
    "eps_lin": float}``.
``eps_lin(omega, sigma=0.5, A=None, *, method="converged") -> float``
    Test error of the best purely positional linear model ``f_B(x) = B x`` (independent of α).
``alpha_c(omega, ..., method="converged")``, ``alpha_l(omega, ..., method="converged")``
    Root finding (``scipy.optimize.brentq``): α_c where the semantic branch's training loss
    drops below the positional one's; α_l where the semantic branch's test error drops below
    ``eps_lin``. ``method="authors"`` uses ``solve_authors`` and the authors' ``eps_lin``.
``solve_authors(alpha, omega, branch, sigma=0.5, lam=0.01, A=None) -> FixedPoint``
    The authors' own numerical procedure (low-order cubature, direct averages, their stopping
    rule), re-implemented so that the book can reproduce their published numbers and show where
    they differ from the converged ones (chapters 02 and 04).
``prox(u, h_star, V, omega, sigma=0.5, A=None, start=None) -> (h, value)``
    The 2-D proximal step, batched over any number of points (batched Newton, see below).
``hat_variables(alpha, omega, q, m, V, theta, ..., monte_carlo=None) -> dict``
    One step of the fixed-point map (hats and new overlaps); ``monte_carlo=N`` evaluates the
    direct averages by sampling instead, as an independent check of the quadrature.
``product_rule(n_nodes, dim=4, prune=1e-10) -> (nodes [dim, N], weights [N])``
    Gauss–Hermite product rule for E over independent standard Gaussians.
``check_eps_lin(answer, omega, sigma=0.5, A=None)``
    For exercises: raises ``ValueError`` with a message unless ``answer`` matches ``eps_lin``.

Numerics
--------
* Gaussian averages over four standard Gaussians use a 4-D Gauss–Hermite product rule with
  ``n_nodes`` nodes per dimension; nodes whose product weight is below ``prune`` times the
  largest weight are dropped (they carry less than ~1e-9 of the mass at the default).
* The prox ``argmin_h ‖h - u‖²/V + ℓ(h; h*)`` is solved for all nodes at once by a batched
  Newton method on the 2-D problem with an eigenvalue-shifted Hessian (a descent direction even
  where the problem is non-convex) and a backtracking Armijo line search. Converged nodes leave
  the active set. Several starting points (u, 0 and the previous solution) are tried and the
  lowest objective is kept, so the prox is the global minimizer, not a local one.
* The hats use the Stein form: with φ the prox's minimum value (continuous) and
  g = -∇_u φ / 2, the averages E[g], E[g ξ], E[g η] are written as averages of φ times
  polynomials. The prox jumps between mirror-image valleys; φ does not, so the quadrature
  converges much faster (chapter 02). Only q̂ = α E‖g‖² keeps a discontinuous integrand.
  This matters most for θ̂ at small θ: direct averages of g η on a low-order rule (as in the
  authors' code) overestimate the slope of θ -> θ_new near θ = 0 (above 1 where the converged
  value is about 0.7, ω = 0.3, α = 0.35), so their semantic branch keeps θ > 0 down to α -> 0,
  while the converged map has θ = 0 stable below α ≈ 0.6 (test_theta_zero_is_stable_at_small_alpha).
* The fixed point of hats -> overlaps is found by damped iteration (``damping`` is the weight of
  the old value, as in the authors' code) accelerated with Anderson mixing close to the fixed
  point; the residual is the largest relative change of (q, m, V, θ). Each branch is kept in its
  invariant subspace: θ = 0 (positional: θ̂ ≡ 0) or m = 0 (semantic: m̂ ≡ 0); by symmetry the
  exact map preserves both, for any A.
* The default of 20 nodes per dimension is converged: doubling it changes ε_g by less than
  0.1 % on both branches (chapter 02). Fewer nodes oscillate on the positional branch, where the
  jumps of the prox cut through the bulk of the Gaussian mass (12 nodes: 0.13 % off).
* Cost: a single solve takes well under a second of CPU at ``n_nodes=8`` and one to three
  seconds at the default 20; a 20 x 20 (α, ω) grid at 8 nodes takes a few CPU minutes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy.optimize import brentq
from scipy.special import expit

from attnlab.theory import cubature
from attnlab.validation import check_choice, check_finite, check_int, check_real, check_shape, make_rng

__all__ = [
    "BRANCHES",
    "DEFAULT_A",
    "FixedPoint",
    "alpha_c",
    "alpha_l",
    "branch_curves",
    "check_eps_lin",
    "eps_lin",
    "global_minimum",
    "hat_variables",
    "product_rule",
    "prox",
    "solve",
    "solve_authors",
    "solve_both",
]

DEFAULT_A = np.array([[0.6, 0.4], [0.4, 0.6]])
BRANCHES = ("semantic", "positional")
METHODS = ("converged", "authors")  # this module's solver, or the authors' procedure (solve_authors)
# Starting points (q, m, V, θ) of the authors' iteration, one per branch.
STARTS = {
    "positional": (0.0206838209589, 0.2, 14.575, 0.0),
    "semantic": (0.906838209589, 0.0002, 14.575, 0.3472),
}


# ----------------------------------------------------------------------------------------------
# Input checks
# ----------------------------------------------------------------------------------------------


def _check_A(A) -> np.ndarray:
    if A is None:
        return DEFAULT_A.copy()
    if not isinstance(A, np.ndarray):
        try:
            A = np.asarray(A, dtype=float)
        except (TypeError, ValueError) as err:
            raise ValueError("A must be a 2x2 array of real numbers") from err
    check_shape("A", A, (2, 2))
    A = np.asarray(A, dtype=float)
    check_finite("A", A)
    return A


def _check_common(alpha, omega, sigma, lam, A):
    alpha = check_real("alpha", alpha, minimum=0.0, strict_minimum=True)
    omega = check_real("omega", omega, minimum=0.0, maximum=1.0)
    sigma = check_real("sigma", sigma, minimum=0.0, strict_minimum=True)
    lam = check_real("lam", lam, minimum=0.0, strict_minimum=True)
    return alpha, omega, sigma, lam, _check_A(A)


# ----------------------------------------------------------------------------------------------
# Quadrature
# ----------------------------------------------------------------------------------------------

_RULES: dict = {}


def gauss_hermite(n_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights (summing to one) of the n-point rule for E f(x), x ~ N(0, 1)."""
    n_nodes = check_int("n_nodes", n_nodes, minimum=1, maximum=200)
    x, w = np.polynomial.hermite_e.hermegauss(n_nodes)
    return x, w / w.sum()


def product_rule(n_nodes: int, dim: int = 4, prune: float = 1e-10) -> tuple[np.ndarray, np.ndarray]:
    """Gauss–Hermite product rule in ``dim`` dimensions: nodes ``[dim, N]``, weights ``[N]``.

    Nodes whose weight is below ``prune`` times the largest weight are dropped and the remaining
    weights renormalised (``prune=0`` keeps the full product rule).
    """
    n_nodes = check_int("n_nodes", n_nodes, minimum=1, maximum=200)
    dim = check_int("dim", dim, minimum=1, maximum=6)
    prune = check_real("prune", prune, minimum=0.0, maximum=1e-3)
    key = (n_nodes, dim, prune)
    if key not in _RULES:
        x, w = gauss_hermite(n_nodes)
        grids = np.meshgrid(*([x] * dim), indexing="ij")
        weights = w
        for _ in range(dim - 1):
            weights = np.multiply.outer(weights, w)
        nodes = np.stack([g.ravel() for g in grids])  # [dim, n_nodes**dim]
        weights = weights.ravel()
        keep = weights >= prune * weights.max()
        nodes, weights = nodes[:, keep], weights[keep] / weights[keep].sum()
        nodes.setflags(write=False)
        weights.setflags(write=False)
        _RULES[key] = (nodes, weights)
    return _RULES[key]


# ----------------------------------------------------------------------------------------------
# The two-token softmax, the target and the loss ℓ(h; h*)
# ----------------------------------------------------------------------------------------------


_sigmoid = expit  # 1 / (1 + exp(-z)), a fast ufunc


def _softmax_diag(h1, h2):
    """Diagonal (a, b) of S(h) = softmax_row(h hᵀ) for L = 2: S = [[a, 1-a], [1-b, b]]."""
    return _sigmoid(h1 * (h1 - h2)), _sigmoid(h2 * (h2 - h1))


def _target(hs1, hs2, omega, A):
    """Entries (T11, T12, T21, T22) of T = (1 - ω) S(h*) + ω A."""
    a, b = _softmax_diag(hs1, hs2)
    return (
        (1 - omega) * a + omega * A[0, 0],
        (1 - omega) * (1 - a) + omega * A[0, 1],
        (1 - omega) * (1 - b) + omega * A[1, 0],
        (1 - omega) * b + omega * A[1, 1],
    )


def _loss(a, b, T, s2):
    """ℓ = Tr[S Σ Sᵀ] - 2 Tr[T Σ Sᵀ] + Tr[T Σ Tᵀ] = σ² ‖S - T‖_F² with Σ = σ² I."""
    T11, T12, T21, T22 = T
    return s2 * ((a - T11) ** 2 + (1 - a - T12) ** 2 + (1 - b - T21) ** 2 + (b - T22) ** 2)


def _objective(h1, h2, u1, u2, V, T, s2):
    a, b = _softmax_diag(h1, h2)
    return ((h1 - u1) ** 2 + (h2 - u2) ** 2) / V + _loss(a, b, T, s2)


def _grad_hess(h1, h2, u1, u2, V, T, s2):
    """Gradient and Hessian of ‖h - u‖²/V + ℓ(h) (chain rule through z₁ = h₁(h₁-h₂), z₂)."""
    T11, T12, T21, T22 = T
    a, b = _softmax_diag(h1, h2)
    pa, pb = a * (1 - a), b * (1 - b)
    La = 2 * s2 * (2 * a - 1 - T11 + T12)  # dℓ/da
    Lb = 2 * s2 * (2 * b - 1 - T22 + T21)  # dℓ/db
    z1_1, z1_2 = 2 * h1 - h2, -h1  # ∇z₁
    z2_1, z2_2 = -h2, 2 * h2 - h1  # ∇z₂
    ca, cb = La * pa, Lb * pb  # dℓ/dz₁, dℓ/dz₂
    G1 = 2 * (h1 - u1) / V + ca * z1_1 + cb * z2_1
    G2 = 2 * (h2 - u2) / V + ca * z1_2 + cb * z2_2
    ka = 4 * s2 * pa**2 + La * pa * (1 - 2 * a)  # d²ℓ/dz₁²
    kb = 4 * s2 * pb**2 + Lb * pb * (1 - 2 * b)
    # Hessians of z₁ and z₂: [[2, -1], [-1, 0]] and [[0, -1], [-1, 2]].
    H11 = 2 / V + ka * z1_1**2 + kb * z2_1**2 + 2 * ca
    H12 = ka * z1_1 * z1_2 + kb * z2_1 * z2_2 - ca - cb
    H22 = 2 / V + ka * z1_2**2 + kb * z2_2**2 + 2 * cb
    return G1, G2, H11, H12, H22


def _newton(h1, h2, u1, u2, V, T, s2, max_iter=60, gtol=1e-9):
    """Batched safeguarded Newton for the 2-D prox; returns (h1, h2, n_unconverged)."""
    h1, h2 = h1.copy(), h2.copy()
    idx = np.arange(h1.size)
    floor = 0.1 / V  # smallest eigenvalue allowed in the (shifted) Newton matrix
    for _ in range(max_iter):
        a1, a2, b1, b2 = h1[idx], h2[idx], u1[idx], u2[idx]
        Ts = tuple(t[idx] for t in T)
        G1, G2, H11, H12, H22 = _grad_hess(a1, a2, b1, b2, V, Ts, s2)
        done = np.abs(G1) + np.abs(G2) < gtol
        lmin = 0.5 * (H11 + H22) - np.sqrt(0.25 * (H11 - H22) ** 2 + H12**2)
        shift = np.where(lmin < floor, floor - lmin, 0.0)
        H11, H22 = H11 + shift, H22 + shift
        det = H11 * H22 - H12**2
        p1 = -(H22 * G1 - H12 * G2) / det
        p2 = -(H11 * G2 - H12 * G1) / det
        f0 = _objective(a1, a2, b1, b2, V, Ts, s2)
        slope = G1 * p1 + G2 * p2  # < 0: the shifted matrix is positive definite
        # Where the predicted decrease is at rounding level, the point has converged.
        done |= -slope <= 1e-13 * (np.abs(f0) + 1e-300)
        t = np.ones_like(a1)
        pend = np.flatnonzero(~done)
        for _ls in range(30):  # backtracking (Armijo), only on the points still pending
            f = _objective(
                a1[pend] + t[pend] * p1[pend],
                a2[pend] + t[pend] * p2[pend],
                b1[pend],
                b2[pend],
                V,
                tuple(x[pend] for x in Ts),
                s2,
            )
            ok = f <= f0[pend] + 1e-4 * t[pend] * slope[pend]
            pend = pend[~ok]
            if pend.size == 0:
                break
            t[pend] *= 0.5
        t[pend] = 0.0
        t[done] = 0.0
        h1[idx], h2[idx] = a1 + t * p1, a2 + t * p2
        tiny = np.abs(t * p1) + np.abs(t * p2) <= 1e-12 * (1 + np.abs(a1) + np.abs(a2))
        idx = idx[~(done | tiny)]
        if idx.size == 0:
            break
    return h1, h2, idx.size


def _prox_batch(u1, u2, V, T, s2, starts):
    """Global prox over a list of starting points: keep the lowest objective per node.

    A start can sit on a stationary point that is not a minimum (at u = 0 the origin is one,
    by the symmetry h -> -h); nodes whose result has a Hessian that is not positive definite are
    restarted from small kicks around it, and the lowest value is kept.
    """
    best = None
    for s1, s2_ in starts:
        h1, h2, _ = _newton(s1, s2_, u1, u2, V, T, s2)
        f = _objective(h1, h2, u1, u2, V, T, s2)
        if best is None:
            best = [h1, h2, f]
        else:
            better = f < best[2] - 1e-14
            best = [np.where(better, h1, best[0]), np.where(better, h2, best[1]), np.minimum(f, best[2])]
    _, _, H11, H12, H22 = _grad_hess(best[0], best[1], u1, u2, V, T, s2)
    lmin = 0.5 * (H11 + H22) - np.sqrt(0.25 * (H11 - H22) ** 2 + H12**2)
    bad = np.flatnonzero(lmin <= 1e-12)
    if bad.size:
        sub = (u1[bad], u2[bad])
        Tb = tuple(t[bad] for t in T)
        for k1, k2 in ((0.3, -0.3), (-0.3, 0.3), (0.3, 0.3), (-0.3, -0.3)):
            h1, h2, _ = _newton(best[0][bad] + k1, best[1][bad] + k2, *sub, V, Tb, s2)
            f = _objective(h1, h2, *sub, V, Tb, s2)
            better = f < best[2][bad] - 1e-14
            best[0][bad] = np.where(better, h1, best[0][bad])
            best[1][bad] = np.where(better, h2, best[1][bad])
            best[2][bad] = np.minimum(f, best[2][bad])
    return best


def prox(u, h_star, V, omega, sigma=0.5, A=None, start=None):
    """Batched prox ``argmin_h ‖h - u‖²/V + ℓ(h; h*)`` and its value (chapter 02, eq-pt-se-prox).

    ``u`` and ``h_star`` have shape ``[N, 2]``; returns ``h`` of shape ``[N, 2]`` and the minimum
    value ``[N]``. Starts from ``u``, from 0 and (if given) from ``start`` ``[N, 2]``.
    """
    u = np.asarray(u, dtype=float)
    h_star = np.asarray(h_star, dtype=float)
    check_shape("u", u, (None, 2))
    check_shape("h_star", h_star, (u.shape[0], 2))
    check_finite("u", u)
    check_finite("h_star", h_star)
    V = check_real("V", V, minimum=0.0, strict_minimum=True)
    omega = check_real("omega", omega, minimum=0.0, maximum=1.0)
    sigma = check_real("sigma", sigma, minimum=0.0, strict_minimum=True)
    A = _check_A(A)
    u1, u2 = u[:, 0].copy(), u[:, 1].copy()
    T = _target(h_star[:, 0], h_star[:, 1], omega, A)
    starts = [(u1, u2), (np.zeros_like(u1), np.zeros_like(u2))]
    if start is not None:
        start = np.asarray(start, dtype=float)
        check_shape("start", start, u.shape)
        starts.append((start[:, 0].copy(), start[:, 1].copy()))
    h1, h2, f = _prox_batch(u1, u2, V, T, sigma**2, starts)
    return np.stack([h1, h2], axis=1), f


# ----------------------------------------------------------------------------------------------
# The fixed-point map
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FixedPoint:
    """A solution of the fixed-point equations, with its errors and convergence diagnostics."""

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
        if self.h is None or all_starts:  # from u, from 0 and from the previous solution
            starts = [(u1, u2), (np.zeros_like(u1), np.zeros_like(u2))]
            if self.h is not None:
                starts.append((self.h[0], self.h[1]))
        elif fresh:  # from u and from the previous solution
            starts = [(u1, u2), (self.h[0], self.h[1])]
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


def hat_variables(
    alpha,
    omega,
    q,
    m,
    V,
    theta,
    sigma=0.5,
    lam=0.01,
    A=None,
    *,
    n_nodes: int = 20,
    monte_carlo: int | None = None,
    seed: int = 0,
    method: str = "converged",
) -> dict:
    """One step of the fixed-point map at (q, m, V, θ): the hats (eq-pt-se-hats) and new overlaps.

    By default the averages use the Gauss–Hermite rule and the Stein form of the solver. With
    ``monte_carlo=N`` they are instead the direct averages of eq-pt-se-hats over ``N`` Gaussian
    samples (ξ, η) drawn with ``seed``: an independent check of the quadrature. With
    ``method="authors"`` they are the authors' direct averages on their degree-7 rule, with the
    prox from h = 0 (as in :func:`solve_authors`).
    Returns ``{"q_hat", "m_hat", "V_hat", "theta_hat", "q", "m", "V", "theta"}``.
    """
    alpha, omega, sigma, lam, A = _check_common(alpha, omega, sigma, lam, A)
    q = check_real("q", q, minimum=0.0, strict_minimum=True)
    m = check_real("m", m)
    V = check_real("V", V, minimum=0.0, strict_minimum=True)
    theta = check_real("theta", theta)
    if theta**2 >= sigma**2 * q:
        raise ValueError(f"theta must satisfy theta**2 < sigma**2 * q, got theta={theta}, q={q}")
    prob = _Problem(alpha, omega, sigma, lam, A, check_int("n_nodes", n_nodes, minimum=2, maximum=60), 1e-10)
    method = check_choice("method", method, METHODS)
    if method == "authors" and monte_carlo is not None:
        raise ValueError("monte_carlo and method='authors' are two different averages: give one")
    if method == "authors":
        prob = _AuthorsProblem(alpha, omega, sigma, lam, A)
        hats = prob.hats(q, m, V, theta)
    elif monte_carlo is None:
        hats = prob.hats(q, m, V, theta, all_starts=True)[:4]
    else:
        n = check_int("monte_carlo", monte_carlo, minimum=100)
        rng = make_rng(seed)
        xi, eta = rng.standard_normal((2, 2, n))  # [2 tokens, n] each
        rho = prob.rho
        sq, s_star = np.sqrt(q), np.sqrt(rho - theta**2 / q)
        u1, u2 = sq * xi[0] + m, sq * xi[1] - m  # eq-pt-se-fields
        hs1, hs2 = theta / sq * xi[0] + s_star * eta[0], theta / sq * xi[1] + s_star * eta[1]
        T = _target(hs1, hs2, omega, A)
        h1, h2, _ = _prox_batch(u1, u2, V, T, sigma**2, [(u1, u2), (np.zeros(n), np.zeros(n))])
        g1, g2 = (h1 - u1) / V, (h2 - u2) / V
        theta_hat = alpha * np.mean(g1 * eta[0] + g2 * eta[1]) / s_star
        hats = (
            alpha * np.mean(g1**2 + g2**2),
            alpha * np.mean(g1 - g2),
            -alpha * np.mean(g1 * xi[0] + g2 * xi[1]) / sq + theta * theta_hat / q,
            theta_hat,
        )
    new = prob.overlaps(*hats)
    names = ("q_hat", "m_hat", "V_hat", "theta_hat", "q", "m", "V", "theta")
    return dict(zip(names, (float(v) for v in (*hats, *new)), strict=True))


def _project(x, rho):
    """Keep (q, m, V, θ) in the domain: q, V > 0 and θ² < ρ q."""
    q = max(x[0], 1e-12)
    V = max(x[2], 1e-8)
    bound = 0.999999 * np.sqrt(rho * q)
    return np.array([q, x[1], V, float(np.clip(x[3], -bound, bound))])


def _residual(new, x):
    return float(np.max(np.abs(new - x) / (np.abs(x) + 1e-3)))


def _iterate(prob, x, damping, tol, max_iter, anderson, anderson_from=0.2, max_step=0.2, refresh=4):
    """Damped fixed-point iteration with Anderson mixing; returns (x, hats, e_min, it, res).

    Anderson steps are only taken once the residual is below ``anderson_from`` and are limited to
    a change ``max_step`` relative to |x| + 0.05, so that the acceleration stays in the basin of
    the fixed point that the damped iteration is heading to (another one may lie close by).
    The prox is warm-started from the previous iteration (and also solved from u every ``refresh``
    iterations); at convergence it is re-solved from all starting points (u, 0, warm) and the
    iteration goes on if the residual is not small then.
    """
    x = _project(np.asarray(x, dtype=float), prob.rho)
    hist_x, hist_f = [], []  # Anderson history: iterates and residuals f = G(x) - x
    res = np.inf
    all_starts = False
    for it in range(1, max_iter + 1):
        fresh = it % refresh == 0  # re-solve the prox from u every ``refresh`` iterations
        *hats, _ = prob.hats(*x, all_starts=all_starts, fresh=fresh)
        gx = prob.overlaps(*prob.restrict(hats))
        if not np.all(np.isfinite(gx)):
            return x, None, None, it, np.inf
        res = _residual(gx, x)
        if res < tol:
            if all_starts:
                x = gx
                break
            all_starts = True  # verify with a global prox before accepting
            continue
        f = gx - x
        step = x + (1 - damping) * f
        if anderson > 0 and res < anderson_from:
            hist_x.append(x.copy())
            hist_f.append(f)
            hist_x, hist_f = hist_x[-anderson - 1 :], hist_f[-anderson - 1 :]
            if len(hist_f) > 1:
                dF = np.stack([hist_f[i + 1] - hist_f[i] for i in range(len(hist_f) - 1)], axis=1)
                dX = np.stack([hist_x[i + 1] - hist_x[i] for i in range(len(hist_x) - 1)], axis=1)
                scale = np.abs(x) + 1e-3
                gamma, *_ = np.linalg.lstsq(dF / scale[:, None], f / scale, rcond=None)
                cand = x + (1 - damping) * f - (dX + (1 - damping) * dF) @ gamma
                if np.all(np.isfinite(cand)) and np.max(np.abs(cand - x) / (np.abs(x) + 0.05)) < max_step:
                    step = cand
                else:
                    hist_x, hist_f = hist_x[-1:], hist_f[-1:]
        x = _project(step, prob.rho)
    *hats, e_min = prob.hats(*x, all_starts=True)
    return x, prob.restrict(hats), e_min, it, res


def solve(
    alpha,
    omega,
    branch,
    sigma=0.5,
    lam=0.01,
    A=None,
    *,
    n_nodes: int = 20,
    prune: float = 1e-10,
    damping: float = 0.8,
    anderson: int = 4,
    tol: float = 1e-7,
    max_iter: int = 500,
    init=None,
) -> FixedPoint:
    """Solve the fixed-point equations (chapter 02, eq-pt-se-hats and eq-pt-se-overlaps) on one branch.

    ``branch`` picks the authors' starting point: ``"positional"`` (q, m, V, θ) = (0.0207, 0.2,
    14.575, 0) or ``"semantic"`` (0.907, 0.0002, 14.575, 0.3472); ``init`` overrides it.
    ``damping`` is the weight of the old iterate (the authors used 0.8 without acceleration),
    ``anderson`` the Anderson memory (0 = plain damped iteration), ``tol`` the tolerance on the
    largest relative change of (q, m, V, θ).
    """
    alpha, omega, sigma, lam, A = _check_common(alpha, omega, sigma, lam, A)
    branch = check_choice("branch", branch, BRANCHES)
    n_nodes = check_int("n_nodes", n_nodes, minimum=2, maximum=60)
    damping = check_real("damping", damping, minimum=0.0, maximum=0.99)
    anderson = check_int("anderson", anderson, minimum=0, maximum=20)
    tol = check_real("tol", tol, minimum=0.0, strict_minimum=True)
    max_iter = check_int("max_iter", max_iter, minimum=1)
    if init is None:
        init = STARTS[branch]
    init = np.array(init, dtype=float)
    check_shape("init", init, (4,))
    check_finite("init", init)
    if init[0] <= 0 or init[2] <= 0 or init[3] ** 2 >= sigma**2 * init[0]:
        raise ValueError("init must be (q, m, V, theta) with q > 0, V > 0 and theta**2 < sigma**2 * q")
    if branch == "positional":
        init[3] = 0.0
    else:
        init[1] = 0.0
    prob = _Problem(alpha, omega, sigma, lam, A, n_nodes, prune, branch)
    x, hats, e_min, it, res = _iterate(prob, init, damping, tol, max_iter, anderson)
    if hats is None:  # the map left its domain: report a non-converged point
        nan = float("nan")
        return FixedPoint(
            alpha,
            omega,
            branch,
            sigma,
            lam,
            *map(float, x),
            nan,
            nan,
            nan,
            nan,
            nan,
            nan,
            it,
            res,
            False,
            n_nodes,
        )
    return _result(prob, branch, x, hats, prob.phi(x, hats, e_min), it, res, res < tol, n_nodes)


def _result(prob, branch, x, hats, phi, iterations, residual, converged, n_nodes, rule="gauss-hermite"):
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
    )


# ----------------------------------------------------------------------------------------------
# The authors' procedure, for comparison with their published numbers
# ----------------------------------------------------------------------------------------------

_AUTHORS_RULES: dict = {}


def _authors_rules():
    """The authors' cubatures: nested degree 7 (hats), nested degree 11 (Φ), mixed (ε_g)."""
    if not _AUTHORS_RULES:
        ss, rr = cubature.stroud_secrest_vi(), cubature.rabinowitz_richter_2()
        _AUTHORS_RULES.update(
            two_d=rr, hats=cubature.nested(ss, ss), phi=cubature.nested(rr, rr), cross=cubature.nested(rr, ss)
        )
    return _AUTHORS_RULES


class _AuthorsProblem(_Problem):
    """The fixed-point map as the authors evaluate it (fields in (ξ, η), prox from h = 0).

    Shares ``overlaps``, ``restrict`` and ``phi`` with :class:`_Problem`; the averages differ.
    """

    def __init__(self, alpha, omega, sigma, lam, A):
        self.alpha, self.omega, self.sigma, self.lam, self.A = alpha, omega, sigma, lam, A
        self.branch = None  # no restriction to an invariant subspace
        self.s2 = self.rho = sigma**2
        self.rules = _authors_rules()

    def _prox(self, X, q, m, V, theta):
        xi1, xi2, eta1, eta2 = X
        sq, s_star = np.sqrt(q), np.sqrt(self.rho - theta**2 / q)
        u1, u2 = sq * xi1 + m, sq * xi2 - m  # eq-pt-se-fields
        T = _target(theta / sq * xi1 + s_star * eta1, theta / sq * xi2 + s_star * eta2, self.omega, self.A)
        zero = np.zeros_like(u1)
        h1, h2, phi = _prox_batch(u1, u2, V, T, self.s2, [(zero, zero.copy())])  # local minimum from 0
        return u1, u2, h1, h2, phi, s_star

    def hats(self, q, m, V, theta):
        """Direct averages of eq-pt-se-hats on the nested degree-7 rule."""
        X, W = self.rules["hats"]
        u1, u2, h1, h2, _, s_star = self._prox(X, q, m, V, theta)
        g1, g2 = (h1 - u1) / V, (h2 - u2) / V
        a = self.alpha
        theta_hat = a * (W @ (g1 * X[2] + g2 * X[3])) / s_star
        V_hat = -a * (W @ (g1 * X[0] + g2 * X[1])) / np.sqrt(q) + theta * theta_hat / q
        return a * (W @ (g1**2 + g2**2)), a * (W @ (g1 - g2)), V_hat, theta_hat

    def eps_g(self, q, m, theta):
        """Their three terms: E Tr[TΣTᵀ] and E Tr[SΣSᵀ] on the 2-D degree-11 rule, the cross term mixed."""
        (p, w), (X, W) = self.rules["two_d"], self.rules["cross"]
        sq, s_star, sr = np.sqrt(q), np.sqrt(self.rho - theta**2 / q), np.sqrt(self.rho)
        T = _target(sr * p[0], sr * p[1], self.omega, self.A)
        teacher = w @ sum(t**2 for t in T)
        a, b = _softmax_diag(sq * p[0] + m, sq * p[1] - m)
        student = w @ (a**2 + (1 - a) ** 2 + (1 - b) ** 2 + b**2)
        a, b = _softmax_diag(sq * X[0] + m, sq * X[1] - m)
        T = _target(theta / sq * X[0] + s_star * X[2], theta / sq * X[1] + s_star * X[3], self.omega, self.A)
        cross = W @ (T[0] * a + T[1] * (1 - a) + T[2] * (1 - b) + T[3] * b)
        return 0.5 * self.s2 * (teacher + student - 2 * cross)

    def e_min(self, q, m, V, theta):
        """E min_h {‖h - u‖²/V + ℓ} for Φ (eq-pt-se-phi), on the nested degree-11 rule."""
        X, W = self.rules["phi"]
        return W @ self._prox(X, q, m, V, theta)[4]


def solve_authors(
    alpha,
    omega,
    branch,
    sigma=0.5,
    lam=0.01,
    A=None,
    *,
    tol: float = 1e-4,
    max_iter: int = 300,
    damping: float = 0.8,
) -> FixedPoint:
    """The fixed point as the authors' theory notebook computes it, to reproduce their numbers.

    Re-implemented from their description of the algorithm (no code of theirs is used); every
    numerical choice is theirs, not this module's:

    * the hats are direct averages of g, g ξ, g η and g² (not the Stein form) on the nested
      Stroud–Secrest VI rule, 12 × 12 nodes, exact to degree 7 only;
    * the prox is the local minimum reached from h = 0 (they run BFGS from 0 at every node);
    * plain damped iteration (``damping`` = weight of the old value), no branch restriction; it
      stops when the largest *absolute* change of (q, m, θ) is below ``tol`` (V is not checked)
      and returns the point before that last update;
    * ε_g averages the two one-field terms on the 28-node degree-11 rule and the cross term on
      that rule nested with the degree-7 one; Φ uses the degree-11 rule nested with itself.

    ``branch`` picks the starting point, as in :func:`solve`. The result has ``rule="authors"``
    and ``n_nodes=12`` (the nodes of the 2-D rule of the hats).
    """
    alpha, omega, sigma, lam, A = _check_common(alpha, omega, sigma, lam, A)
    branch = check_choice("branch", branch, BRANCHES)
    tol = check_real("tol", tol, minimum=0.0, strict_minimum=True)
    max_iter = check_int("max_iter", max_iter, minimum=1)
    damping = check_real("damping", damping, minimum=0.0, maximum=0.99)
    prob = _AuthorsProblem(alpha, omega, sigma, lam, A)
    x = np.array(STARTS[branch], dtype=float)
    converged, change = False, np.inf
    iterations = 0
    while iterations < max_iter:
        iterations += 1
        hats = prob.hats(*x)
        new = prob.overlaps(*hats)
        if not np.all(np.isfinite(new)) or new[0] <= 0 or new[3] ** 2 >= prob.rho * new[0]:
            break  # the map left its domain
        change = float(np.max(np.abs(new - x)[[0, 1, 3]]))
        if change < tol:
            converged = True
            break
        x = damping * x + (1 - damping) * new
    phi = prob.phi(x, hats, prob.e_min(*x))
    return _result(prob, branch, x, hats, phi, iterations, change, converged, 12, rule="authors")


def solve_both(alpha, omega, sigma=0.5, lam=0.01, A=None, **kwargs) -> dict:
    """Both branches and the global minimum (lower ``eps_t``) at one (α, ω)."""
    out = {b: solve(alpha, omega, b, sigma, lam, A, **kwargs) for b in BRANCHES}
    out["global"] = min((out[b] for b in BRANCHES), key=lambda r: r.eps_t)
    return out


def global_minimum(alpha, omega, sigma=0.5, lam=0.01, A=None, **kwargs) -> FixedPoint:
    """The fixed point with the lower training loss ``eps_t`` of the two branches."""
    return solve_both(alpha, omega, sigma, lam, A, **kwargs)["global"]


_CURVE_FIELDS = ("eps_g", "eps_t", "q", "m", "V", "theta", "theta_over_sigma2", "converged", "iterations")


def branch_curves(alphas, omega, sigma=0.5, lam=0.01, A=None, **kwargs) -> dict:
    """Theory curves over ``alphas`` for both branches, the global minimum and ``eps_lin``.

    Returns ``{"alpha": [n], "semantic": {field: [n]}, "positional": {field: [n]},
    "global": {field: [n], "branch": [n]}, "eps_lin": float}`` with fields ``eps_g``, ``eps_t``,
    ``q``, ``m``, ``V``, ``theta``, ``theta_over_sigma2``, ``converged``, ``iterations``.
    Each α is solved from the branch's own starting point (no continuation).
    """
    alphas = np.atleast_1d(np.asarray(alphas, dtype=float))
    if alphas.ndim != 1 or alphas.size == 0:
        raise ValueError("alphas must be a non-empty 1-D array of positive numbers")
    if not np.all(np.isfinite(alphas)) or np.any(alphas <= 0):
        raise ValueError("alphas must be finite and > 0")
    out = {"alpha": alphas}
    sols = {b: [solve(a, omega, b, sigma, lam, A, **kwargs) for a in alphas] for b in BRANCHES}
    for b in BRANCHES:
        out[b] = {f: np.array([getattr(s, f) for s in sols[b]]) for f in _CURVE_FIELDS}
    glob = [
        min(s, p, key=lambda r: r.eps_t) for s, p in zip(sols["semantic"], sols["positional"], strict=True)
    ]
    out["global"] = {f: np.array([getattr(s, f) for s in glob]) for f in _CURVE_FIELDS}
    out["global"]["branch"] = np.array([s.branch for s in glob])
    out["eps_lin"] = eps_lin(omega, sigma, A)
    return out


# ----------------------------------------------------------------------------------------------
# The linear baseline and the transitions
# ----------------------------------------------------------------------------------------------


def eps_lin(omega, sigma=0.5, A=None, *, n_nodes: int = 40, method: str = "converged") -> float:
    """Test error of the best positional linear model ``f_B(x) = B x`` (chapter 01, eq-pt-linear).

    ``B̂ = ωA + (1-ω) E S(h*)`` and ``ε_lin = (σ²/2)(1-ω)² E‖S(h*) - E S(h*)‖_F²``, with
    ``h* ~ N(0, σ² I₂)``; it does not depend on α, λ or A. ``method="authors"`` computes it as
    their notebook does: ``E S(h*)`` on the degree-7 rule (slightly off, so that their ``B̂`` is
    not quite the best one) and the error of that ``B̂`` on the degree-11 rule.
    """
    omega = check_real("omega", omega, minimum=0.0, maximum=1.0)
    sigma = check_real("sigma", sigma, minimum=0.0, strict_minimum=True)
    _check_A(A)
    n_nodes = check_int("n_nodes", n_nodes, minimum=2, maximum=200)
    method = check_choice("method", method, METHODS)
    if method == "authors":
        p, w = cubature.stroud_secrest_vi()
        a, b = _softmax_diag(sigma * p[0], sigma * p[1])
        Ea, Eb = w @ a, w @ b  # their E S(h*) = [[Ea, 1 - Ea], [1 - Eb, Eb]]
        p, w = cubature.rabinowitz_richter_2()
        a, b = _softmax_diag(sigma * p[0], sigma * p[1])
        err = 2 * (a - Ea) ** 2 + 2 * (b - Eb) ** 2  # ‖S - B̂‖_F² / (1 - ω)²
        return float(0.5 * sigma**2 * (1 - omega) ** 2 * (w @ err))
    X, W = product_rule(n_nodes, 2, 0.0)
    a, b = _softmax_diag(sigma * X[0], sigma * X[1])  # S = [[a, 1-a], [1-b, b]]
    var = 2 * (W @ a**2 - (W @ a) ** 2) + 2 * (W @ b**2 - (W @ b) ** 2)  # E‖S - ES‖_F²
    return float(0.5 * sigma**2 * (1 - omega) ** 2 * var)


def check_eps_lin(answer, omega, sigma=0.5, A=None, rtol=1e-3) -> float:
    """Exercise checker: raise ``ValueError`` unless ``answer`` is ε_lin(ω) within ``rtol``."""
    answer = check_real("answer", answer)
    ref = eps_lin(omega, sigma, A)
    if abs(answer - ref) > rtol * abs(ref):
        raise ValueError(
            f"answer {answer:.6g} is not eps_lin({omega}) (relative error {abs(answer - ref) / ref:.2g})"
        )
    return ref


def _bracket_root(fun, lo, hi, n_grid, xtol):
    grid = np.linspace(lo, hi, n_grid)
    vals = [fun(a) for a in grid]
    for i in range(n_grid - 1):
        if np.isfinite(vals[i]) and np.isfinite(vals[i + 1]) and vals[i] * vals[i + 1] <= 0:
            return brentq(fun, grid[i], grid[i + 1], xtol=xtol)
    return float("nan")


def _threshold_args(omega, bracket, n_grid, method, kwargs):
    omega = check_real("omega", omega, minimum=0.0, maximum=1.0)
    lo, hi = (check_real("bracket", v, minimum=0.0, strict_minimum=True) for v in bracket)
    if hi <= lo:
        raise ValueError(f"bracket must be (low, high) with low < high, got {bracket}")
    n_grid = check_int("n_grid", n_grid, minimum=2)
    method = check_choice("method", method, METHODS)
    if method == "authors" and "n_nodes" in kwargs:
        raise ValueError("n_nodes does not apply to method='authors' (their rules are fixed)")
    return omega, lo, hi, n_grid, solve if method == "converged" else solve_authors


def alpha_c(
    omega,
    sigma=0.5,
    lam=0.01,
    A=None,
    *,
    bracket=(0.1, 3.0),
    n_grid=4,
    xtol=1e-4,
    method="converged",
    **kwargs,
) -> float:
    """α_c(ω): root of ε_t(semantic) - ε_t(positional) (brentq); ``nan`` if none in ``bracket``.

    The bracket is first scanned on ``n_grid`` points and Brent's method runs on the first
    interval with a sign change. ``method="authors"`` solves with :func:`solve_authors`;
    ``kwargs`` go to the solver.
    """
    omega, lo, hi, n_grid, solver = _threshold_args(omega, bracket, n_grid, method, kwargs)

    def diff(alpha):
        s = solver(alpha, omega, "semantic", sigma, lam, A, **kwargs)
        p = solver(alpha, omega, "positional", sigma, lam, A, **kwargs)
        return s.eps_t - p.eps_t

    return float(_bracket_root(diff, lo, hi, n_grid, xtol))


def alpha_l(
    omega,
    sigma=0.5,
    lam=0.01,
    A=None,
    *,
    bracket=(0.1, 3.0),
    n_grid=4,
    xtol=1e-4,
    method="converged",
    **kwargs,
) -> float:
    """α_l(ω): root of ε_g(semantic) - ε_lin (brentq); ``nan`` if none in ``bracket``.

    ``method="authors"`` uses :func:`solve_authors` and ``eps_lin(..., method="authors")``.
    """
    omega, lo, hi, n_grid, solver = _threshold_args(omega, bracket, n_grid, method, kwargs)
    ref = eps_lin(omega, sigma, A, method=method)

    def diff(alpha):
        return solver(alpha, omega, "semantic", sigma, lam, A, **kwargs).eps_g - ref

    return float(_bracket_root(diff, lo, hi, n_grid, xtol))
