"""Part II's transitions: the linear baseline ε_lin, the thresholds α_c and α_l, and branch curves.

α_c(ω) is where the semantic branch's training loss drops below the positional one's; α_l(ω) where
the semantic branch's test error drops below ε_lin, the error of the best positional linear model.
Both are roots found by ``scipy.optimize.brentq`` after a coarse scan of the bracket, each solve
warm-started from the nearest one already made on its branch, and first on 8 nodes.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import brentq

from attnlab.theory.phase_transition import cubature
from attnlab.theory.phase_transition.authors import solve_authors
from attnlab.theory.phase_transition.cubature import product_rule
from attnlab.theory.phase_transition.equations import BRANCHES, METHODS
from attnlab.theory.phase_transition.fixed_point import solve
from attnlab.theory.phase_transition.prox import _check_A, _softmax_diag
from attnlab.validation import check_choice, check_int, check_real

__all__ = ["alpha_c", "alpha_l", "branch_curves", "verify_eps_lin", "eps_lin"]

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


def verify_eps_lin(answer, omega, sigma=0.5, A=None, rtol=1e-3) -> float:
    """Exercise checker: raise ``ValueError`` unless ``answer`` is ε_lin(ω) within ``rtol``."""
    answer = check_real("answer", answer)
    ref = eps_lin(omega, sigma, A)
    if abs(answer - ref) > rtol * abs(ref):
        raise ValueError(
            f"answer {answer:.6g} is not eps_lin({omega}) (relative error {abs(answer - ref) / ref:.2g})"
        )
    return ref


def verify_alpha_c(
    answer, omega, sigma=0.5, lam=0.01, A=None, *, n_nodes: int = 8, atol: float = 0.01
) -> str:
    """Exercise checker (chapter 03): raise ``ValueError`` unless ``answer`` is α_c(ω) within ``atol``.

    The check is the definition (eq-pt3-alpha-c): with ``n_nodes`` per dimension the semantic
    branch's training loss must lie above the positional one's at ``answer - atol`` and below it at
    ``answer + atol`` (four solves, under a second at 8 nodes). Returns a message when it does.
    """
    answer = check_real("answer", answer, minimum=0.0, strict_minimum=True)
    atol = check_real("atol", atol, minimum=0.0, strict_minimum=True)
    n_nodes = check_int("n_nodes", n_nodes, minimum=2, maximum=60)
    if answer <= atol:
        raise ValueError(f"answer must be larger than atol = {atol}, got {answer}")

    def gap(alpha):
        sem, pos = (solve(alpha, omega, b, sigma, lam, A, n_nodes=n_nodes) for b in BRANCHES)
        return sem.eps_t - pos.eps_t

    below, above = gap(answer - atol), gap(answer + atol)
    if below > 0 > above:
        return f"Correct: the training losses cross within {atol} of {answer:.4g}."
    if below <= 0:
        raise ValueError(
            f"answer {answer:.4g} is too large: at {answer - atol:.4g} the semantic branch already has "
            "the lower training loss. Hint: keep the half of the bracket where the sign changes."
        )
    raise ValueError(
        f"answer {answer:.4g} is too small: at {answer + atol:.4g} the positional branch still has the "
        "lower training loss. Hint: keep the half of the bracket where the sign changes."
    )


def _remembered(fun):
    """``fun`` of one float, each value computed once (the values so far in ``.seen``)."""
    seen = {}

    def f(a):
        a = float(a)
        if a not in seen:
            seen[a] = fun(a)
        return seen[a]

    f.seen = seen
    return f


def _bracket_root(fun, lo, hi, n_grid, xtol):
    """Scan ``fun`` on ``n_grid`` points of [lo, hi]; Brent's method on the first sign change.

    Values are remembered, so Brent's method does not solve again at the scan's end points.
    """
    f = _remembered(fun)
    grid = np.linspace(lo, hi, n_grid)
    vals = [f(a) for a in grid]
    for i in range(n_grid - 1):
        if np.isfinite(vals[i]) and np.isfinite(vals[i + 1]) and vals[i] * vals[i + 1] <= 0:
            return brentq(f, grid[i], grid[i + 1], xtol=xtol)
    return float("nan")


COARSE_NODES = 8  # the root is first located on this many nodes per axis, then on the full rule
WARM_WITHIN = 0.3  # a new α starts from the nearest solved α of its branch at most this far away


def _secant_slope(seen, x):
    """The slope of the secant through the two remembered points nearest ``x``."""
    (a, fa), (b, fb) = sorted(seen.items(), key=lambda p: abs(p[0] - x))[:2]
    return (fb - fa) / (b - a)


def _polished_root(f, x0, slope, lo, hi, xtol, max_evals=6):
    """A root of ``f`` near ``x0`` to ``xtol`` by secant steps, or ``nan``.

    ``slope`` is an estimate of ``f'`` near the root (the coarse rule's). From ``x0``, each step
    goes to the secant estimate through the two points nearest to it (the first with ``slope``);
    once an estimate is within ``xtol / 2`` of the last point, the next point is placed ``xtol / 2``
    beyond it, so that the two bracket the root. The root returned is the linear interpolation
    inside a sign change of ``f`` of width at most ``xtol``: a root to ``xtol``, as brentq's.
    ``nan`` if no such bracket is found in ``max_evals`` evaluations inside [lo, hi].
    """
    x = x0
    for _ in range(max_evals):
        if not lo <= x <= hi:
            return float("nan")
        fx = f(x)
        if not np.isfinite(fx):
            return float("nan")
        if fx == 0:
            return x
        opposite = [a for a, v in f.seen.items() if np.isfinite(v) and v * fx < 0 and abs(a - x) <= xtol]
        if opposite:
            b = min(opposite, key=lambda a: abs(a - x))
            return x - fx * (b - x) / (f.seen[b] - fx)
        if len(f.seen) > 1:
            slope = _secant_slope(f.seen, x)
        if not np.isfinite(slope) or slope == 0:
            return float("nan")
        step = -fx / slope
        x = x + (step + np.sign(step) * xtol / 2 if abs(step) < xtol / 2 else step)
    return float("nan")


def _guided_root(fine, coarse, lo, hi, n_grid, xtol):
    """A root of ``fine`` to ``xtol``, located with a cheaper ``coarse`` (the same difference on fewer nodes).

    The scan and a rough Brent root (to 1e-3) use ``coarse``, in the first interval of the scan
    where ``coarse`` changes sign. From the rough root, secant steps on ``fine`` (the first with
    the coarse slope there) find a sign change of ``fine`` of width at most ``xtol`` inside that
    interval (:func:`_polished_root`; three or four evaluations of ``fine`` where the two rules
    differ by a shift). Failing that (no coarse sign change, or the secant leaves the interval:
    the coarse rule can misplace a root where the two sides nearly touch, as at small ω), ``fine``
    is scanned on the grid as in :func:`_bracket_root`. The result is a root of ``fine`` to
    ``xtol`` in every case.
    """
    f = _remembered(fine)
    if coarse is not None:
        grid = np.linspace(lo, hi, n_grid)
        c = _remembered(coarse)
        rough = _bracket_root(c, lo, hi, n_grid, max(xtol, 1e-3))
        if np.isfinite(rough):
            i = min(int(np.searchsorted(grid, rough, side="right")) - 1, n_grid - 2)
            root = _polished_root(f, rough, _secant_slope(c.seen, rough), grid[i], grid[i + 1], xtol)
            if np.isfinite(root):
                return root
    return _bracket_root(f, lo, hi, n_grid, xtol)


class _Branch:
    """One branch solved at the α a root finder asks for, each solve warm-started.

    A new α starts from the converged fixed point of the nearest α already solved on this branch
    (continuation), if one lies within ``WARM_WITHIN``; otherwise from the branch's own starting
    point, or, given ``coarse`` (the same branch on fewer nodes), from the coarse fixed point at
    this α (coarse-to-fine); with ``warm=False`` every α is solved cold. A start that does not
    lead to a converged point is retried from the branch's starting point, so a warm start never
    turns a solvable α into an unconverged one.
    """

    def __init__(self, solver, omega, branch, sigma, lam, A, kwargs, coarse=None, warm=True):
        self.solver, self.args, self.kwargs = solver, (omega, branch, sigma, lam, A), kwargs
        self.coarse, self.warm, self.solved = coarse, warm, []

    def _solve(self, alpha, init=None):
        return self.solver(alpha, *self.args, **self.kwargs, **({} if init is None else {"init": init}))

    def __call__(self, alpha):
        alpha = float(alpha)
        done = [s for s in self.solved if s.alpha == alpha]
        if done:  # asked again (the coarse rule by the scan and by a coarse-to-fine start)
            return done[0]
        near = [s for s in self.solved if self.warm and s.converged and abs(s.alpha - alpha) <= WARM_WITHIN]
        start = min(near, key=lambda s: abs(s.alpha - alpha)) if near else None
        if start is None and self.coarse is not None:
            start = self.coarse(alpha)
        fp = None
        if start is not None and start.converged:
            fp = self._solve(alpha, (start.q, start.m, start.V, start.theta))
        if fp is None or not fp.converged:
            fp = self._solve(alpha)
        self.solved.append(fp)
        return fp


def _branches(solver, omega, branches, sigma, lam, A, kwargs, method):
    """Fine and coarse :class:`_Branch` per branch (coarse ``None`` for the authors' method, which
    solves every α cold as their notebook does, or when the rule is not finer than the coarse one)."""
    if method == "authors":
        return {b: _Branch(solver, omega, b, sigma, lam, A, kwargs, warm=False) for b in branches}, None
    coarse = None
    if kwargs.get("n_nodes", 20) > COARSE_NODES:
        coarse = {
            b: _Branch(solver, omega, b, sigma, lam, A, {**kwargs, "n_nodes": COARSE_NODES}) for b in branches
        }
    fine = {b: _Branch(solver, omega, b, sigma, lam, A, kwargs, coarse and coarse[b]) for b in branches}
    return fine, coarse


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
    interval with a sign change. With the converged solver every solve is warm-started (see
    :class:`_Branch`), and on more than ``COARSE_NODES`` nodes the root is first located on
    ``COARSE_NODES`` (see :func:`_guided_root`). ``method="authors"`` solves every α cold with
    :func:`solve_authors`; ``kwargs`` go to the solver.
    """
    omega, lo, hi, n_grid, solver = _threshold_args(omega, bracket, n_grid, method, kwargs)
    fine, coarse = _branches(solver, omega, BRANCHES, sigma, lam, A, kwargs, method)

    def diff(branch):
        return lambda alpha: branch["semantic"](alpha).eps_t - branch["positional"](alpha).eps_t

    return float(_guided_root(diff(fine), coarse and diff(coarse), lo, hi, n_grid, xtol))


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
    fine, coarse = _branches(solver, omega, ["semantic"], sigma, lam, A, kwargs, method)

    def diff(branch):
        return lambda alpha: branch["semantic"](alpha).eps_g - ref

    return float(_guided_root(diff(fine), coarse and diff(coarse), lo, hi, n_grid, xtol))
