"""Part II's theory experiments (pt = phase transition): curves over alpha and grids over (alpha, omega).

They only call the fixed-point solver :mod:`attnlab.theory.phase_transition`; they are registered
so that the paper-scale runs go through the CLI and the chapters (02, 03, 04) load a small CSV::

    python -m attnlab.experiments run pt_theory --scale paper --out lib/attnlab/results
    python -m attnlab.experiments run pt_phase_diagram --scale paper --out lib/attnlab/results
    python -m attnlab.experiments run pt_transition_lines --scale paper --out lib/attnlab/results
    python -m attnlab.experiments run pt_crossing_scan --scale paper --out lib/attnlab/results
    python -m attnlab.experiments run pt_branches --scale paper --out lib/attnlab/results
    python -m attnlab.experiments run pt_quadrature --scale book --no-cache --out lib/attnlab/results
    python -m attnlab.experiments run pt_slices --scale paper --out lib/attnlab/results
"""

from __future__ import annotations

import numpy as np

from attnlab.experiments import experiment, sweep
from attnlab.experiments.phase_transition.simulations import METASTABLE_POINTS

_THEORY = {"omega": 0.3, "sigma": 0.5, "lam": 0.01, "alpha_min": 0.1, "alpha_max": 2.5}


@experiment(
    "pt_theory",
    book={**_THEORY, "n_alpha": 9, "n_nodes": 12, "xtol": 1e-3, "delta": 0.03},
    paper={**_THEORY, "n_alpha": 25, "n_nodes": 20, "xtol": 1e-4, "delta": 0.03},
    description="theory: both branches vs alpha, eps_lin, alpha_c and alpha_l by root finding (chapter 3)",
)
def pt_theory(config: dict, device: str) -> list[dict]:
    """Rows ``kind="curve"`` (alpha, branch, eps_g, eps_t, m, theta_over_sigma2, q, V, converged),
    one row ``kind="eps_lin"``, rows ``kind="transition"`` (``name`` alpha_c or alpha_l, ``alpha``)
    and rows ``kind="bracket"``: both branches solved at ``alpha_c -+ delta`` and ``alpha_l -+ delta``
    (``name``, ``side`` below/above), so that a reader can check that the roots are roots.

    The transitions are roots (``brentq`` inside :func:`~attnlab.theory.phase_transition.alpha_c`
    and ``alpha_l``), bracketed by the sign changes found on the curve's grid.
    """
    from attnlab.theory import phase_transition as se

    omega, sigma, lam = config["omega"], config["sigma"], config["lam"]
    kw = {"n_nodes": config["n_nodes"]}
    alphas = np.linspace(config["alpha_min"], config["alpha_max"], config["n_alpha"])
    rows, sols = [], {}
    for branch in ("semantic", "positional"):
        for a in alphas:
            fp = se.solve(float(a), omega, branch, sigma, lam, **kw)
            sols[branch, float(a)] = fp
            rows.append({
                "kind": "curve", "alpha": float(a), "branch": branch, "eps_g": fp.eps_g, "eps_t": fp.eps_t,
                "m": abs(fp.m), "theta_over_sigma2": abs(fp.theta) / sigma**2, "q": fp.q, "V": fp.V,
                "converged": bool(fp.converged),
            })  # fmt: skip
    lin = se.eps_lin(omega, sigma)
    rows.append({"kind": "eps_lin", "eps_lin": float(lin)})
    diff_t = [sols["semantic", float(a)].eps_t - sols["positional", float(a)].eps_t for a in alphas]
    diff_l = [sols["semantic", float(a)].eps_g - lin for a in alphas]
    roots = {"alpha_c": (se.alpha_c, diff_t), "alpha_l": (se.alpha_l, diff_l)}
    for name, (finder, diff) in roots.items():
        value = float("nan")
        for i in range(len(alphas) - 1):
            if np.isfinite(diff[i]) and np.isfinite(diff[i + 1]) and diff[i] * diff[i + 1] <= 0:
                bracket = (float(alphas[i]), float(alphas[i + 1]))
                value = finder(omega, sigma, lam, bracket=bracket, n_grid=2, xtol=config["xtol"], **kw)
                break
        rows.append({"kind": "transition", "name": name, "alpha": float(value)})
        if np.isfinite(value):
            for side, a in (("below", value - config["delta"]), ("above", value + config["delta"])):
                for branch in ("semantic", "positional"):
                    fp = se.solve(float(a), omega, branch, sigma, lam, **kw)
                    rows.append({"kind": "bracket", "name": name, "side": side, "alpha": float(a),
                                 "branch": branch, "eps_g": fp.eps_g, "eps_t": fp.eps_t,
                                 "converged": bool(fp.converged)})  # fmt: skip
    return rows


_BASE = {"sigma": 0.5, "lam": 0.01}


def _grid_column(omega, alphas, sigma, lam, n_nodes, tol):
    """Both branches at every α of one ω column, plus ε_lin(ω)."""
    from attnlab.theory import phase_transition as se

    lin = se.eps_lin(omega, sigma)
    rows = []
    for alpha in alphas:
        sol = se.solve_both(float(alpha), float(omega), sigma, lam, n_nodes=n_nodes, tol=tol)
        row = {"omega": float(omega), "alpha": float(alpha), "eps_lin": lin}
        for b in ("semantic", "positional"):
            fp = sol[b]
            row |= {
                f"eps_g_{b}": fp.eps_g,
                f"eps_t_{b}": fp.eps_t,
                f"m_{b}": fp.m,
                f"theta_over_sigma2_{b}": fp.theta_over_sigma2,
                f"converged_{b}": bool(fp.converged),
            }
        row["global"] = sol["global"].branch
        rows.append(row)
    return rows


@experiment(
    "pt_phase_diagram",
    book={**_BASE, "alpha_min": 0.2, "alpha_max": 2.0, "n_alpha": 5, "omega_min": 0.0, "omega_max": 0.4,
          "n_omega": 5, "n_nodes": 8, "tol": 1e-6, "n_jobs": 2},
    paper={**_BASE, "alpha_min": 0.1, "alpha_max": 2.0, "n_alpha": 20, "omega_min": 0.0, "omega_max": 0.475,
           "n_omega": 20, "n_nodes": 8, "tol": 1e-7, "n_jobs": 2},
    description="Both fixed-point branches on an (alpha, omega) grid: eps_t, eps_g, overlaps, eps_lin",
)  # fmt: skip
def pt_phase_diagram(config: dict, device: str) -> list[dict]:
    """Rows (ω, α) with both branches' errors and overlaps, ε_lin(ω) and the global minimum."""
    alphas = np.linspace(config["alpha_min"], config["alpha_max"], config["n_alpha"])
    omegas = np.linspace(config["omega_min"], config["omega_max"], config["n_omega"])
    args = {"alphas": alphas, "sigma": config["sigma"], "lam": config["lam"], "n_nodes": config["n_nodes"],
            "tol": config["tol"]}  # fmt: skip
    columns = sweep(_grid_column, [{"omega": float(w), **args} for w in omegas], n_jobs=config["n_jobs"])
    return [row for col in columns for row in col]


def _lines_at(omega, sigma, lam, n_nodes, xtol, bracket, n_grid):
    from attnlab.theory import phase_transition as se

    kw = {"bracket": bracket, "n_grid": n_grid, "xtol": xtol}
    return {
        "omega": float(omega),
        "alpha_c": se.alpha_c(omega, sigma, lam, n_nodes=n_nodes, **kw),
        "alpha_l": se.alpha_l(omega, sigma, lam, n_nodes=n_nodes, **kw),
        "eps_lin": se.eps_lin(omega, sigma),
        "alpha_c_authors": se.alpha_c(omega, sigma, lam, method="authors", **kw),
        "alpha_l_authors": se.alpha_l(omega, sigma, lam, method="authors", **kw),
        "eps_lin_authors": se.eps_lin(omega, sigma, method="authors"),
    }


@experiment(
    "pt_transition_lines",
    book={**_BASE, "omegas": [0.0, 0.2, 0.3], "n_nodes": 8, "xtol": 1e-3, "alpha_low": 0.2,
          "alpha_high": 2.5, "n_grid": 4, "n_jobs": 2},
    paper={**_BASE, "omegas": [0.0, 0.1, 0.2, 0.3, 0.38, 0.4], "n_nodes": 20, "xtol": 1e-4, "alpha_low": 0.2,
           "alpha_high": 2.5, "n_grid": 6, "n_jobs": 2},
    description="alpha_c(omega), alpha_l(omega) by root finding: converged, and with the authors' rules",
)  # fmt: skip
def pt_transition_lines(config: dict, device: str) -> list[dict]:
    """One row per ω: α_c (equal training losses) and α_l (semantic ε_g = ε_lin), by both methods.

    Columns ``alpha_c``, ``alpha_l``, ``eps_lin``: the converged solver with ``n_nodes``;
    ``*_authors``: the authors' procedure (``solve_authors``, their ε_lin), same bracket and scan.
    """
    args = {"sigma": config["sigma"], "lam": config["lam"], "n_nodes": config["n_nodes"],
            "xtol": config["xtol"], "bracket": (config["alpha_low"], config["alpha_high"]),
            "n_grid": config["n_grid"]}  # fmt: skip
    return sweep(_lines_at, [{"omega": float(w), **args} for w in config["omegas"]], n_jobs=config["n_jobs"])


def _scan_point(omega, alpha, sigma, lam, n_nodes):
    from attnlab.theory import phase_transition as se

    row = {"omega": float(omega), "alpha": float(alpha)}
    methods = (("converged", se.solve, {"n_nodes": n_nodes}), ("authors", se.solve_authors, {}))
    for method, solver, kw in methods:
        for b in ("semantic", "positional"):
            sol = solver(alpha, omega, b, sigma, lam, **kw)
            row |= {f"eps_t_{b}_{method}": sol.eps_t, f"eps_g_{b}_{method}": sol.eps_g,
                    f"theta_{b}_{method}": sol.theta, f"converged_{b}_{method}": sol.converged}  # fmt: skip
    return row


@experiment(
    "pt_crossing_scan",
    book={**_BASE, "omegas": [0.0], "alpha_min": 0.4, "alpha_max": 0.8, "n_alpha": 5, "n_nodes": 8,
          "n_jobs": 2},
    paper={**_BASE, "omegas": [0.0, 0.1], "alpha_min": 0.35, "alpha_max": 0.95, "n_alpha": 25, "n_nodes": 20,
           "n_jobs": 2},
    description="both branches near alpha_c at small omega, converged and with the authors' rules",
)  # fmt: skip
def pt_crossing_scan(config: dict, device: str) -> list[dict]:
    """Rows (ω, α) with ε_t, ε_g, θ and convergence of both branches, by both methods.

    Chapter 04 uses it to show how the two training errors cross at small ω, where the published
    α_c and ours differ most.
    """
    alphas = np.linspace(config["alpha_min"], config["alpha_max"], config["n_alpha"])
    args = {"sigma": config["sigma"], "lam": config["lam"], "n_nodes": config["n_nodes"]}
    configs = [{"omega": float(w), "alpha": float(a), **args} for w in config["omegas"] for a in alphas]
    return sweep(_scan_point, configs, n_jobs=config["n_jobs"])


def _branch_row(fp, direction) -> dict:
    from attnlab.theory import phase_transition as se

    return {
        "kind": "curve", "alpha": fp.alpha, "branch": fp.branch, "direction": direction, "eps_t": fp.eps_t,
        "eps_g": fp.eps_g, "m": abs(fp.m), "theta_over_sigma2": fp.theta_over_sigma2, "mu_max": fp.mu_max,
        "converged": bool(fp.converged), "on_branch": se.on_branch(fp),
    }  # fmt: skip


def _bisect_end(last_on, first_off, omega, sigma, lam, n_nodes, width):
    """Shrink [last_on.alpha, first_off.alpha] to ``width`` by solving at the midpoint, warm-started
    from the last on-branch point (the continuation's own rule)."""
    from attnlab.theory import phase_transition as se

    on, off = last_on, first_off.alpha
    while abs(off - on.alpha) > width:
        mid = 0.5 * (on.alpha + off)
        fp = se.solve(mid, omega, on.branch, sigma, lam, n_nodes=n_nodes, init=(on.q, on.m, on.V, on.theta))
        if se.on_branch(fp):
            on = fp
        else:
            off = mid
    return on, off


@experiment(
    "pt_branches",
    book={**_THEORY, "alpha_min": 0.5, "alpha_max": 2.0, "n_alpha": 4, "n_nodes": 8, "width": 0.01},
    paper={**_THEORY, "alpha_min": 0.3, "alpha_max": 2.5, "n_alpha": 23, "n_nodes": 20, "width": 0.01},
    description="both branches continued in alpha both ways, with mu_max, and where each ends (chapter 3)",
)  # fmt: skip
def pt_branches(config: dict, device: str) -> list[dict]:
    """Both branches continued along the α grid in both directions, and where each followed branch ends.

    Rows ``kind="curve"`` (alpha, branch, direction ``down``/``up``, eps_t, eps_g, m,
    theta_over_sigma2, mu_max, converged, on_branch): each branch is started fresh at one end of
    the grid and continued (:func:`~attnlab.theory.phase_transition.continue_branch`, warm starts
    from the last converged point) to the other end. A point is *on the branch* if it is
    ``converged`` (tolerance met, ``mu_max <= 1 + 1e-3``, positional |m| >= 1e-3) and, on the
    semantic branch, |θ|/σ² >= 1e-3 (below that the iteration sits on the agnostic point θ = 0,
    which stays converged inside the semantic subspace, so convergence alone does not see the end).

    Rows ``kind="end"`` (branch, direction, alpha_on, alpha_off, and the last on-branch point's
    mu_max, theta_over_sigma2, m): for each sweep whose last on-branch point is not the last α, the
    bracket [last on-branch α, next α] is shrunk by bisection to ``width``, each midpoint solved
    warm-started from the last on-branch point. An isolated point that is off the branch while the
    sweep finds the branch again further on (an iteration that missed the tolerance) is not an end.
    What is located is the α where the continued branch stops being found (converged with its
    order parameter): at a fold the iteration leaves the branch as ``mu_max`` -> 1; at a pitchfork
    the order parameter goes to 0 continuously, also with ``mu_max`` -> 1. But the iteration can
    also stop meeting ``tol`` on a branch that is still there; the bracket then marks where the
    solver loses the branch, not a spinodal. ``mu_max`` and the order parameter at ``alpha_on`` tell
    which: near 1 and near 0 at a pitchfork. At ω = 0.3 the semantic branch ends by θ -> 0 at 8
    nodes (between α = 0.65 and 0.67: where exactly depends on whether the iteration converges
    near θ/σ² = 0.04, which differs between CPUs); at 20 nodes the iteration stops converging near
    α = 0.75 with θ/σ² still about 0.17 and ``mu_max`` about 0.93 (a lost branch). The positional
    branch does not end on the grid. A sweep that stays on its branch to the end of the grid has no
    row.
    """
    from attnlab.theory import phase_transition as se

    omega, sigma, lam, n_nodes = config["omega"], config["sigma"], config["lam"], config["n_nodes"]
    grid = np.linspace(config["alpha_min"], config["alpha_max"], config["n_alpha"])
    rows = []
    for branch in ("semantic", "positional"):
        for direction, alphas in (("down", grid[::-1]), ("up", grid)):
            path = se.continue_branch(alphas, omega, branch, sigma, lam, n_nodes=n_nodes)
            rows += [_branch_row(fp, direction) for fp in path]
            found = np.flatnonzero([se.on_branch(fp) for fp in path])
            if found.size and found[-1] < len(path) - 1:
                i = int(found[-1])
                last, off = _bisect_end(path[i], path[i + 1], omega, sigma, lam, n_nodes, config["width"])
                rows.append({
                    "kind": "end", "branch": branch, "direction": direction, "alpha_on": last.alpha,
                    "alpha_off": off, "mu_max": last.mu_max, "theta_over_sigma2": last.theta_over_sigma2,
                    "m": abs(last.m),
                })  # fmt: skip
    return rows


@experiment(
    "pt_constrained",
    book={
        "points": METASTABLE_POINTS,
        "n_values": 3,
        "n_nodes": 8,
        "check_nodes": [6],
        "sigma": 0.5,
        "lam": 0.01,
    },
    paper={
        "points": METASTABLE_POINTS,
        "n_values": 11,
        "n_nodes": 20,
        "check_nodes": [12, 28],
        "sigma": 0.5,
        "lam": 0.01,
    },
    description="training loss with the order parameter held fixed, at the metastable points (chapter 3)",
)
def pt_constrained(config: dict, device: str) -> list[dict]:
    """ε_t and its slope with θ/σ² (semantic) or m (positional) held at ``n_values`` values.

    The values run over [0, 0.5] for θ/σ² and [0, 0.3] for m; one row per (point, value), and one
    row per point with ``kind = "fixed point"`` for the branch's own solution (``solve``), and one
    per point and number of nodes in ``check_nodes`` (``kind = "fixed point, n nodes"``, the
    quadrature check of the fixed point).
    """
    from attnlab.theory import phase_transition as se

    rows = []
    for omega, alpha, branch in config["points"]:
        top = 0.5 if branch == "semantic" else 0.3
        init = None
        for value in np.linspace(0.0, top, config["n_values"]):
            c = se.constrained(
                alpha,
                omega,
                branch,
                float(value),
                config["sigma"],
                config["lam"],
                n_nodes=config["n_nodes"],
                init=init,
            )
            init = (c.q, c.V)
            rows.append(
                {
                    "omega": omega,
                    "alpha": alpha,
                    "branch": branch,
                    "kind": "constrained",
                    "value": c.value,
                    "eps_t": c.eps_t,
                    "slope": c.slope,
                    "q": c.q,
                    "converged": c.converged,
                }
            )
        for n_nodes in [config["n_nodes"], *config["check_nodes"]]:
            fp = se.solve(alpha, omega, branch, config["sigma"], config["lam"], n_nodes=n_nodes)
            kind = "fixed point" if n_nodes == config["n_nodes"] else "fixed point, n nodes"
            rows.append(
                {
                    "omega": omega,
                    "alpha": alpha,
                    "branch": branch,
                    "kind": kind,
                    "value": fp.theta_over_sigma2 if branch == "semantic" else fp.m,
                    "eps_t": fp.eps_t,
                    "slope": 0.0,
                    "q": fp.q,
                    "converged": fp.converged,
                    "eps_g": fp.eps_g,
                    "n_nodes": n_nodes,
                }
            )
    return rows


_QUADRATURE = {**_BASE, "alpha": 2.0, "omega": 0.3, "base_nodes": 20}


@experiment(
    "pt_quadrature",
    book={**_QUADRATURE, "nodes": [40]},
    paper={**_QUADRATURE, "nodes": [8, 12, 16, 24, 28, 32, 40]},
    description="both fixed points at one (alpha, omega) with fewer and more quadrature nodes (chapter 2)",
)
def pt_quadrature(config: dict, device: str) -> list[dict]:
    """The quadrature check of chapter 02: both branches with ``base_nodes`` nodes per dimension,
    solved from their starts, then with every count in ``nodes``, warm-started from that fixed point.

    One row per (branch, n_nodes), the base included: ``eps_g``, ``eps_t``, ``m``,
    ``theta_over_sigma2``, ``q``, ``V``, ``converged``, ``iterations`` and ``n_points`` (the nodes
    of the pruned product rule).
    """
    from attnlab.theory import phase_transition as se

    alpha, omega, sigma, lam = config["alpha"], config["omega"], config["sigma"], config["lam"]
    rows = []
    for branch in se.BRANCHES:
        base = se.solve(alpha, omega, branch, sigma, lam, n_nodes=config["base_nodes"])
        start = (base.q, base.m, base.V, base.theta)
        for n_nodes in [config["base_nodes"], *config["nodes"]]:
            fp = base
            if n_nodes != config["base_nodes"]:
                fp = se.solve(alpha, omega, branch, sigma, lam, n_nodes=n_nodes, init=start)
            rows.append({
                "branch": branch, "n_nodes": n_nodes, "eps_g": fp.eps_g, "eps_t": fp.eps_t, "m": fp.m,
                "theta_over_sigma2": fp.theta_over_sigma2, "q": fp.q, "V": fp.V,
                "converged": bool(fp.converged), "iterations": fp.iterations,
                "n_points": int(se.product_rule(n_nodes)[1].size),
            })  # fmt: skip
    return rows


_SLICES = {"omega": 0.3, "sigma": 0.5, "lam": 0.01, "theta_max": 0.6, "m_max": 0.32}


@experiment(
    "pt_slices",
    book={**_SLICES, "alphas": [0.9, 1.6], "n_values": 5, "n_nodes": 8},
    paper={**_SLICES, "alphas": [0.9, 1.25, 1.6], "n_values": 17, "n_nodes": 20},
    description="the training loss along both branches' slices through the agnostic point (chapter 3)",
)
def pt_slices(config: dict, device: str) -> list[dict]:
    """The lowest training loss with the order parameter held (``constrained``) along both slices.

    For every α: ``kind="slice"`` rows (branch, value, eps_t, slope, converged) with θ/σ² from 0
    to ``theta_max`` on the semantic slice (m = 0) and m from 0 to ``m_max`` on the positional one
    (θ = 0), ``n_values`` each, continued from one value to the next; both slices start at the
    agnostic point m = θ = 0. ``kind="fixed point"`` rows: each branch's own fixed point
    (``solve``: value, eps_t, converged). Chapter 03 draws the two slices as one path through the
    agnostic point: the two branches are the two valleys of one curve.
    """
    from attnlab.theory import phase_transition as se

    omega, sigma, lam, n_nodes = config["omega"], config["sigma"], config["lam"], config["n_nodes"]
    tops = {"semantic": config["theta_max"], "positional": config["m_max"]}
    rows = []
    for alpha in config["alphas"]:
        for branch, top in tops.items():
            init = None
            for value in np.linspace(0.0, top, config["n_values"]):
                c = se.constrained(alpha, omega, branch, float(value), sigma, lam, n_nodes=n_nodes, init=init)
                if c.converged:
                    init = (c.q, c.V)
                rows.append({"kind": "slice", "alpha": float(alpha), "branch": branch, "value": c.value,
                             "eps_t": c.eps_t, "slope": c.slope, "converged": c.converged})  # fmt: skip
            fp = se.solve(float(alpha), omega, branch, sigma, lam, n_nodes=n_nodes)
            value = fp.theta_over_sigma2 if branch == "semantic" else fp.m
            rows.append({"kind": "fixed point", "alpha": float(alpha), "branch": branch, "value": value,
                         "eps_t": fp.eps_t, "slope": 0.0, "converged": fp.converged})  # fmt: skip
    return rows
