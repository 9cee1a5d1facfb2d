"""The authors' numerical procedure for Part II's fixed point, to reproduce their published numbers.

``solve_authors(alpha, omega, branch, sigma=0.5, lam=0.01, A=None, ...) -> FixedPoint`` re-implements
their procedure (low-order cubature, direct averages, their stopping rule) from its description,
so that the book can show where their numbers differ from the converged ones (chapters 02 and 04).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize

from attnlab.theory.phase_transition import cubature
from attnlab.theory.phase_transition.equations import BRANCHES, STARTS, FixedPoint, _Problem, _result
from attnlab.theory.phase_transition.prox import (
    _check_common,
    _grad_hess,
    _objective,
    _prox_batch,
    _softmax_diag,
    _target,
)
from attnlab.validation import check_choice, check_int, check_real

PROXES = ("newton", "bfgs")  # the prox from h = 0: our batched Newton, or BFGS node by node (theirs)

__all__ = ["solve_authors"]

_AUTHORS_RULES: dict = {}


def _authors_rules():
    """The authors' cubatures: nested degree 7 (hats), nested degree 11 (Φ), mixed (ε_g)."""
    if not _AUTHORS_RULES:
        ss, rr = cubature.stroud_secrest_vi(), cubature.rabinowitz_richter_2()
        _AUTHORS_RULES.update(
            two_d=rr, hats=cubature.nested(ss, ss), phi=cubature.nested(rr, rr), cross=cubature.nested(rr, ss)
        )
    return _AUTHORS_RULES


def _prox_bfgs(u1, u2, V, T, s2):
    """The local minimum of the prox objective reached by BFGS from h = 0, node by node.

    As in the authors' notebook (scipy's BFGS, here with the exact gradient). Unlike the batched
    Newton method it does not step off a saddle point: where the gradient at 0 points along the
    diagonal h₁ = h₂ and the objective is symmetric under swapping the tokens, it stays on the
    diagonal (chapter 02's tie nodes).
    """
    h1, h2, f = np.empty_like(u1), np.empty_like(u1), np.empty_like(u1)
    for i in range(u1.size):
        Ti = tuple(np.array([t[i]]) for t in T)
        a, b = np.array([u1[i]]), np.array([u2[i]])

        def fun(h, a=a, b=b, Ti=Ti):
            x, y = np.array([h[0]]), np.array([h[1]])
            G1, G2, *_ = _grad_hess(x, y, a, b, V, Ti, s2)
            return float(_objective(x, y, a, b, V, Ti, s2)[0]), np.array([G1[0], G2[0]])

        res = minimize(fun, np.zeros(2), jac=True, method="BFGS")
        h1[i], h2[i], f[i] = res.x[0], res.x[1], res.fun
    return h1, h2, f


class _AuthorsProblem(_Problem):
    """The fixed-point map as the authors evaluate it (fields in (ξ, η), prox from h = 0).

    Shares ``overlaps``, ``restrict`` and ``phi`` with :class:`_Problem`; the averages differ.
    """

    def __init__(self, alpha, omega, sigma, lam, A, branch=None, n_nodes=None, prox="newton"):
        self.alpha, self.omega, self.sigma, self.lam, self.A = alpha, omega, sigma, lam, A
        self.branch = branch  # the invariant subspace to hold (None: none, for one step of the map)
        self.s2 = self.rho = sigma**2
        self.prox = prox
        self.rules = _authors_rules()
        if n_nodes is not None:  # the same direct averages on a Gauss–Hermite product rule
            self.rules = self.rules | {"hats": cubature.product_rule(n_nodes, 4, prune=0.0)}

    def _prox(self, X, q, m, V, theta):
        xi1, xi2, eta1, eta2 = X
        sq, s_star = np.sqrt(q), np.sqrt(self.rho - theta**2 / q)
        u1, u2 = sq * xi1 + m, sq * xi2 - m  # eq-pt-se-fields
        T = _target(theta / sq * xi1 + s_star * eta1, theta / sq * xi2 + s_star * eta2, self.omega, self.A)
        if self.prox == "bfgs":
            h1, h2, phi = _prox_bfgs(u1, u2, V, T, self.s2)
        else:
            zero = np.zeros_like(u1)
            h1, h2, phi = _prox_batch(u1, u2, V, T, self.s2, [(zero, zero.copy())])  # local minimum from 0
        return u1, u2, h1, h2, phi, s_star

    def hats(self, q, m, V, theta):
        """Direct averages of eq-pt-se-hats on the nested degree-7 rule (or the one asked for)."""
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
    n_nodes: int | None = None,
    prox: str = "newton",
    hold: bool = True,
) -> FixedPoint:
    """The fixed point as the authors' theory notebook computes it, to reproduce their numbers.

    Re-implemented from their description of the algorithm (no code of theirs is used); every
    numerical choice is theirs, not this module's:

    * the hats are direct averages of g, g ξ, g η and g² (not the Stein form) on the nested
      Stroud–Secrest VI rule, 12 × 12 nodes, exact to degree 7 only;
    * the prox is the local minimum reached from h = 0 (they run BFGS from 0 at every node;
      ``prox="newton"``, the default, reaches it by the batched Newton method of :func:`prox`,
      fast, and ``prox="bfgs"`` by scipy's BFGS node by node, as they do, a hundred times slower);
    * plain damped iteration (``damping`` = weight of the old value); it stops when the largest
      *absolute* change of (q, m, θ) is below ``tol`` (V is not checked) and returns the point
      before that last update;
    * ε_g averages the two one-field terms on the 28-node degree-11 rule and the cross term on
      that rule nested with the degree-7 one; Φ uses the degree-11 rule nested with itself.

    ``branch`` picks the starting point and, with ``hold=True`` (the default), holds the
    iteration on the branch's invariant subspace as :func:`solve` does: m = 0 on the semantic
    branch (m̂ set to 0), θ = 0 on the positional one, from the start with that coordinate set
    to 0. The hold stands in for their BFGS prox: their procedure itself, unheld, with BFGS from
    0 and from their start m = 0.0002, stays on the semantic branch (at ω = 0.5, α = 1.1875 it
    ends at |m| < 1e-9, θ/σ² = 0.3825). With the Newton prox unheld, m = 0 repels instead (Newton
    steps off the saddle points on the diagonal h₁ = h₂ that BFGS stays on) and the same start
    drifts to m = -0.28; held, it gives θ/σ² = 0.3826. ``hold=False`` iterates the whole map.
    The result has ``rule="authors"`` and ``n_nodes=12`` (the nodes of the 2-D rule of the hats).

    ``n_nodes`` replaces only the rule of the hats (the one that decides the fixed point) by a
    Gauss–Hermite product with ``n_nodes`` points per dimension; everything else stays theirs.
    The result then has ``rule="authors, gauss-hermite"`` and that ``n_nodes``. At ω = 0.5,
    α = 1.1875 (semantic) θ/σ² is 0.38 with their rule and moves with the order of the rule
    (about 0.25 at 16 points): their value is a property of their rule (chapter 03).
    """
    alpha, omega, sigma, lam, A = _check_common(alpha, omega, sigma, lam, A)
    branch = check_choice("branch", branch, BRANCHES)
    tol = check_real("tol", tol, minimum=0.0, strict_minimum=True)
    max_iter = check_int("max_iter", max_iter, minimum=1)
    damping = check_real("damping", damping, minimum=0.0, maximum=0.99)
    if n_nodes is not None:
        n_nodes = check_int("n_nodes", n_nodes, minimum=2, maximum=40)
    prox = check_choice("prox", prox, PROXES)
    if not isinstance(hold, bool):
        raise ValueError(f"hold must be True or False, got {hold!r}")
    prob = _AuthorsProblem(alpha, omega, sigma, lam, A, branch if hold else None, n_nodes, prox)
    x = np.array(STARTS[branch], dtype=float)
    if hold:
        x[1 if branch == "semantic" else 3] = 0.0  # start in the branch's subspace: m = 0 or θ = 0
    converged, change = False, np.inf
    iterations = 0
    while iterations < max_iter:
        iterations += 1
        hats = prob.restrict(prob.hats(*x))
        new = prob.overlaps(*hats)
        if not np.all(np.isfinite(new)) or new[0] <= 0 or new[3] ** 2 >= prob.rho * new[0]:
            break  # the map left its domain
        change = float(np.max(np.abs(new - x)[[0, 1, 3]]))
        if change < tol:
            converged = True
            break
        x = damping * x + (1 - damping) * new
    phi = prob.phi(x, hats, prob.e_min(*x))
    if n_nodes is None:
        return _result(prob, branch, x, hats, phi, iterations, change, converged, 12, rule="authors")
    rule = "authors, gauss-hermite"
    return _result(prob, branch, x, hats, phi, iterations, change, converged, n_nodes, rule=rule)
