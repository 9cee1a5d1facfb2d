"""Theory grids over (α, ω) for Part II, chapter 04 (the phase diagram).

Both experiments only call the fixed-point solver :mod:`attnlab.theory.state_evolution`; they
are registered so that the paper-scale grids run from the CLI and the chapter loads a small CSV::

    python -m attnlab.experiments run pt_phase_diagram --scale paper --out lib/attnlab/results
    python -m attnlab.experiments run pt_transition_lines --scale paper --out lib/attnlab/results
"""

from __future__ import annotations

import numpy as np

from attnlab.experiments import experiment, sweep

_BASE = {"sigma": 0.5, "lam": 0.01}


def _grid_column(omega, alphas, sigma, lam, n_nodes, tol):
    """Both branches at every α of one ω column, plus ε_lin(ω)."""
    from attnlab.theory import state_evolution as se

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
    from attnlab.theory import state_evolution as se

    kw = {"n_nodes": n_nodes, "bracket": bracket, "n_grid": n_grid, "xtol": xtol}
    return {
        "omega": float(omega),
        "alpha_c": se.alpha_c(omega, sigma, lam, **kw),
        "alpha_l": se.alpha_l(omega, sigma, lam, **kw),
        "eps_lin": se.eps_lin(omega, sigma),
    }


@experiment(
    "pt_transition_lines",
    book={**_BASE, "omegas": [0.0, 0.2, 0.3], "n_nodes": 8, "xtol": 1e-3, "alpha_low": 0.2,
          "alpha_high": 2.5, "n_grid": 4, "n_jobs": 2},
    paper={**_BASE, "omegas": [0.0, 0.1, 0.2, 0.3, 0.38, 0.4], "n_nodes": 12, "xtol": 1e-4, "alpha_low": 0.2,
           "alpha_high": 2.5, "n_grid": 6, "n_jobs": 2},
    description="alpha_c(omega) and alpha_l(omega) by root finding (brentq) on the fixed-point solver",
)  # fmt: skip
def pt_transition_lines(config: dict, device: str) -> list[dict]:
    """One row per ω: α_c (equal training losses) and α_l (semantic ε_g = ε_lin)."""
    args = {"sigma": config["sigma"], "lam": config["lam"], "n_nodes": config["n_nodes"],
            "xtol": config["xtol"], "bracket": (config["alpha_low"], config["alpha_high"]),
            "n_grid": config["n_grid"]}  # fmt: skip
    return sweep(_lines_at, [{"omega": float(w), **args} for w in config["omegas"]], n_jobs=config["n_jobs"])


def _probe(omega, alpha, sigma, lam, n_nodes):
    from attnlab.theory import state_evolution as se

    sol = se.solve_both(alpha, omega, sigma, lam, n_nodes=n_nodes)
    row = {"omega": float(omega), "alpha": float(alpha), "eps_lin": se.eps_lin(omega, sigma)}
    for b in ("semantic", "positional"):
        row |= {f"eps_g_{b}": sol[b].eps_g, f"eps_t_{b}": sol[b].eps_t, f"converged_{b}": sol[b].converged}
    return row


@experiment(
    "pt_threshold_probes",
    book={**_BASE, "points": [[0.3, 1.241], [0.3, 1.451]], "n_nodes": 8, "n_jobs": 2},
    paper={**_BASE, "points": [[0.0, 0.548], [0.1, 0.707], [0.2, 0.928], [0.3, 1.241], [0.4, 1.751],
                               [0.0, 0.722], [0.1, 0.851], [0.2, 1.071], [0.3, 1.451], [0.38, 1.993]],
           "n_nodes": 12, "n_jobs": 2},
    description="both branches at given (omega, alpha) points, e.g. the published thresholds (chapter 4)",
)  # fmt: skip
def pt_threshold_probes(config: dict, device: str) -> list[dict]:
    """Both branches' errors and ε_lin at each ``(omega, alpha)`` of ``points``.

    At paper scale the points are the thresholds tabulated by Cui et al. (2024): how far from a
    root the published values sit measures how sensitive each threshold is.
    """
    args = {"sigma": config["sigma"], "lam": config["lam"], "n_nodes": config["n_nodes"]}
    configs = [{"omega": float(w), "alpha": float(a), **args} for w, a in config["points"]]
    return sweep(_probe, configs, n_jobs=config["n_jobs"])
