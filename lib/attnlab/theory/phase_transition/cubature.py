"""Gaussian cubature rules of Part II: the solver's Gauss–Hermite products and two published rules.

``gauss_hermite(n_nodes)``, ``product_rule(n_nodes, dim=4, prune=1e-10) -> (nodes [dim, N], weights [N])``
    The solver's rule: Gauss–Hermite with ``n_nodes`` nodes per dimension; nodes whose product
    weight is below ``prune`` times the largest are dropped (less than ~1e-9 of the mass at the
    default) and the weights renormalised.

The authors of paper B average over pairs of standard Gaussians with fixed, fully symmetric
rules for the weight ``exp(-x² - y²)`` (chapter 02 uses them to reproduce their numbers):

``stroud_secrest_vi() -> (nodes [2, 12], weights [12])``
    Stroud & Secrest (1963), rule E2r2 VI: 12 points, exact for polynomials of degree ≤ 7.
``rabinowitz_richter_2() -> (nodes [2, 28], weights [28])``
    Rabinowitz & Richter (1969), the second E2r2 rule: 28 points, exact for degree ≤ 11.
``nested(outer, inner) -> (nodes [4, N_o N_i], weights [N_o N_i])``
    The rule for E over four standard Gaussians ``(x₁, x₂, y₁, y₂)`` made by averaging over
    ``(y₁, y₂)`` with ``inner`` at every node ``(x₁, x₂)`` of ``outer``.
``exact_degree(rule, max_degree=20) -> int``
    The largest total degree up to which the rule integrates every monomial exactly (1e-12).

Nodes and weights are for E f(x), x ~ N(0, I₂) (the published points times √2; weights sum to
one). The points of rule VI are in closed form; of the 28-point rule, two radii are the published
decimals and the others are closed forms. The weights are not typed in: they are the least-squares
solution of the moment equations at these points, and ``exact_degree`` checks the result.
"""

from __future__ import annotations

from math import factorial

import numpy as np

from attnlab.validation import check_int, check_real

__all__ = [
    "exact_degree",
    "gauss_hermite",
    "nested",
    "product_rule",
    "rabinowitz_richter_2",
    "stroud_secrest_vi",
]


def _orbit_axis(a):
    """The 4 points (±a, 0), (0, ±a)."""
    return [(a, 0.0), (-a, 0.0), (0.0, a), (0.0, -a)]


def _orbit_diag(a):
    """The 4 points (±a, ±a)."""
    return [(a, a), (a, -a), (-a, a), (-a, -a)]


def _orbit_ab(a, b):
    """The 8 points (±a, ±b), (±b, ±a)."""
    return [(s * x, t * y) for x, y in ((a, b), (b, a)) for s in (1, -1) for t in (1, -1)]


def _gauss_moment(k: int) -> float:
    """E x^k for x ~ N(0, 1)."""
    return 0.0 if k % 2 else factorial(k) / (2 ** (k // 2) * factorial(k // 2))


def _weights_from_moments(orbits, degree):
    """One weight per orbit, fitted to E x^i y^j = m_i m_j for all i + j ≤ degree (least squares)."""
    rows, rhs = [], []
    for i in range(degree + 1):
        for j in range(degree + 1 - i):
            rows.append([sum(x**i * y**j for x, y in orbit) for orbit in orbits])
            rhs.append(_gauss_moment(i) * _gauss_moment(j))
    w, *_ = np.linalg.lstsq(np.array(rows), np.array(rhs), rcond=None)
    points = np.array([p for orbit in orbits for p in orbit]).T
    weights = np.concatenate([np.full(len(orbit), wk) for orbit, wk in zip(orbits, w, strict=True)])
    return points, weights


def _freeze(points, weights):
    points.setflags(write=False)
    weights.setflags(write=False)
    return points, weights


def stroud_secrest_vi() -> tuple[np.ndarray, np.ndarray]:
    """Stroud–Secrest rule VI for N(0, I₂): 12 nodes, degree 7 (the authors' ``get_good_scheme(7)``)."""
    s = np.sqrt(2.0)  # the published rule is for exp(-x² - y²): x = z/√2
    r5 = np.sqrt(5.0)
    xi, eta = np.sqrt((9 - 3 * r5) / 8), np.sqrt((9 + 3 * r5) / 8)
    orbits = [_orbit_axis(s * np.sqrt(3.0)), _orbit_diag(s * xi), _orbit_diag(s * eta)]
    return _freeze(*_weights_from_moments(orbits, 7))


def rabinowitz_richter_2() -> tuple[np.ndarray, np.ndarray]:
    """Rabinowitz–Richter rule 2 for N(0, I₂): 28 nodes, degree 11 (the authors' ``get_good_scheme(11)``)."""
    s = np.sqrt(2.0)
    axis = (2.757816396257008, np.sqrt(3.0), 0.6280515301597559)  # two published decimals, one closed form
    pairs = ((np.sqrt(1.5), np.sqrt(0.5)), (np.sqrt(4.5), np.sqrt(1.5)))
    orbits = [_orbit_axis(s * a) for a in axis] + [_orbit_ab(s * a, s * b) for a, b in pairs]
    return _freeze(*_weights_from_moments(orbits, 11))


def nested(outer, inner) -> tuple[np.ndarray, np.ndarray]:
    """4-D rule: ``inner`` over (y₁, y₂) at every node (x₁, x₂) of ``outer``; nodes [4, N], weights [N]."""
    (p, w), (r, v) = outer, inner
    if p.shape[0] != 2 or r.shape[0] != 2:
        raise ValueError("outer and inner must be 2-D rules: nodes of shape [2, N]")
    nodes = np.concatenate([np.repeat(p, v.size, axis=1), np.tile(r, (1, w.size))])
    return _freeze(nodes, np.repeat(w, v.size) * np.tile(v, w.size))


def exact_degree(rule, max_degree: int = 20) -> int:
    """Largest total degree ``k ≤ max_degree`` such that every monomial of degree ≤ k is exact (1e-12)."""
    max_degree = check_int("max_degree", max_degree, minimum=0, maximum=40)
    nodes, weights = rule
    dim = nodes.shape[0]
    for k in range(max_degree + 1):
        for exps in _compositions(k, dim):
            exact = np.prod([_gauss_moment(e) for e in exps])
            got = weights @ np.prod([nodes[i] ** e for i, e in enumerate(exps)], axis=0)
            if abs(got - exact) > 1e-12 * max(1.0, abs(exact)):
                return k - 1
    return max_degree


def _compositions(k, dim):
    """All tuples of ``dim`` non-negative integers summing to ``k``."""
    if dim == 1:
        yield (k,)
        return
    for first in range(k + 1):
        for rest in _compositions(k - first, dim - 1):
            yield (first, *rest)


# ----------------------------------------------------------------------------------------------
# The solver's rule: Gauss–Hermite products
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
