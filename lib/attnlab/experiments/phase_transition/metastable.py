"""Part II: side studies of the metastable branches (chapter 03 and its lab notes).

``pt_authors_rules`` asks where the authors' metastable theory values come from, at the points of
chapter 03 (A: ω = 0.5, α = 1.19, semantic; B: ω = 0.15, α = 1.79, positional)::

    python -m attnlab.experiments run pt_authors_rules --scale paper --out lib/attnlab/results

* ``kind="rule"``: the authors' procedure (:func:`~attnlab.theory.phase_transition.solve_authors`)
  with their degree-7 rule for the hats replaced by Gauss–Hermite products of ``n_nodes`` points
  per dimension, at A: how θ/σ² depends on the averaging rule;
* ``kind="monte carlo"``: one step of the exact map, its averages by Monte Carlo
  (``hat_variables(..., monte_carlo=N)``, with the solver's global prox from u, -u and 0), from
  their fixed point (``start="theirs"``) and from the converged solver's (``start="ours"``; at B
  that is the agnostic point m = 0, not converged as a positional point), one row per seed: a
  fixed point of the exact map does not move, up to the Monte-Carlo error;
* ``kind="hold"``: their procedure at A with the branch held or not (``hold``) and the prox from
  h = 0 by our Newton method or by BFGS as theirs (``prox``): why holding the branch stands in
  for their BFGS;
* ``kind="nodes"``: the converged solver's semantic fixed point at ω = 0.5 and each of
  ``node_alphas`` (1.1708: the α of the authors' own gradient descent) with ``node_orders``
  nodes per dimension: its quadrature error.

``pt_long_gd`` runs the authors' gradient descent from Q* four times as long as they did, where
the converged equations have no semantic fixed point (ω = 0.3, α = 0.5075)::

    python -m attnlab.experiments run pt_long_gd --scale paper --out lib/attnlab/results
"""

from __future__ import annotations

from attnlab.experiments import experiment, sweep

_BASE = {"sigma": 0.5, "lam": 0.01, "omega_A": 0.5, "alpha_A": 1.19, "n_jobs": 2}
_B = (0.15, 1.79, "positional")


def _rule_rows(alpha, omega, n_nodes, sigma, lam):
    from attnlab.theory import phase_transition as se

    fp = se.solve_authors(alpha, omega, "semantic", sigma, lam, n_nodes=n_nodes)
    return [{"kind": "rule", "omega": omega, "alpha": alpha, "branch": "semantic", "n_nodes": n_nodes,
             "value": fp.theta_over_sigma2, "q": fp.q, "V": fp.V, "iterations": fp.iterations,
             "converged": fp.converged}]  # fmt: skip


def _mc_rows(alpha, omega, branch, n_nodes, samples, seeds, sigma, lam):
    from attnlab.theory import phase_transition as se

    def order(theta, m):
        return theta / sigma**2 if branch == "semantic" else m

    starts = {
        "theirs": se.solve_authors(alpha, omega, branch, sigma, lam),
        "ours": se.solve(alpha, omega, branch, sigma, lam, n_nodes=n_nodes),
    }
    rows = []
    for start, fp in starts.items():
        for seed in range(seeds):
            new = se.hat_variables(alpha, omega, fp.q, fp.m, fp.V, fp.theta, sigma, lam,
                                   monte_carlo=samples, seed=seed)  # fmt: skip
            rows.append({"kind": "monte carlo", "omega": omega, "alpha": alpha, "branch": branch,
                         "start": start, "seed": seed, "samples": samples, "converged": fp.converged,
                         "q_start": fp.q, "V_start": fp.V, "value_start": order(fp.theta, fp.m),
                         "q": new["q"], "V": new["V"], "value": order(new["theta"], new["m"])})  # fmt: skip
    return rows


def _hold_rows(alpha, omega, prox, hold, sigma, lam):
    from attnlab.theory import phase_transition as se

    fp = se.solve_authors(alpha, omega, "semantic", sigma, lam, prox=prox, hold=hold)
    return [{"kind": "hold", "omega": omega, "alpha": alpha, "branch": "semantic", "prox": prox, "hold": hold,
             "value": fp.theta_over_sigma2, "m": fp.m, "q": fp.q, "V": fp.V, "iterations": fp.iterations,
             "converged": fp.converged}]  # fmt: skip


def _nodes_rows(alpha, omega, n_nodes, sigma, lam):
    from attnlab.theory import phase_transition as se

    fp = se.solve(alpha, omega, "semantic", sigma, lam, n_nodes=n_nodes)
    return [{"kind": "nodes", "omega": omega, "alpha": alpha, "branch": "semantic", "n_nodes": n_nodes,
             "value": fp.theta_over_sigma2, "q": fp.q, "V": fp.V, "mu_max": fp.mu_max,
             "converged": fp.converged}]  # fmt: skip


def _call(fn, kwargs):
    return fn(**kwargs)


@experiment(
    "pt_authors_rules",
    book={**_BASE, "orders": [3, 4, 5, 6], "mc_samples": 20_000, "mc_seeds": 2, "n_nodes": 8,
          "node_alphas": [1.19], "node_orders": [6, 8], "hold_alpha": 1.1875,
          "hold_runs": [["newton", True], ["newton", False]]},
    paper={**_BASE, "orders": list(range(3, 17)), "mc_samples": 1_000_000, "mc_seeds": 4, "n_nodes": 20,
           "node_alphas": [1.1708333333333334], "node_orders": [12, 16, 20, 24, 28], "hold_alpha": 1.1875,
           "hold_runs": [["bfgs", False], ["newton", True], ["newton", False]]},
    description="the authors' metastable values: their rule's order, a Monte-Carlo step, our nodes (ch. 3)",
)  # fmt: skip
def pt_authors_rules(config: dict, device: str) -> list[dict]:
    """Rows of kinds ``rule``, ``monte carlo``, ``hold`` and ``nodes`` (see the module's docstring)."""
    common = {"sigma": config["sigma"], "lam": config["lam"]}
    omega, alpha = config["omega_A"], config["alpha_A"]
    mc = {"n_nodes": config["n_nodes"], "samples": config["mc_samples"], "seeds": config["mc_seeds"]}
    tasks = [(_nodes_rows, {"alpha": a, "omega": omega, "n_nodes": n, **common})
             for n in sorted(config["node_orders"], reverse=True) for a in config["node_alphas"]]  # fmt: skip
    tasks += [(_hold_rows, {"alpha": config["hold_alpha"], "omega": omega, "prox": p, "hold": h, **common})
              for p, h in config["hold_runs"]]  # fmt: skip
    tasks += [(_mc_rows, {"alpha": a, "omega": w, "branch": b, **mc, **common})
             for w, a, b in ((omega, alpha, "semantic"), _B)]  # fmt: skip
    orders = sorted(config["orders"], key=lambda n: -n)  # the slow ones first
    tasks += [(_rule_rows, {"alpha": alpha, "omega": omega, "n_nodes": n, **common}) for n in orders]
    out = sweep(_call, [{"fn": fn, "kwargs": kw} for fn, kw in tasks], n_jobs=config["n_jobs"])
    rows = [row for part in out for row in part]
    return sorted(rows, key=lambda r: (r["kind"], r.get("n_nodes", 0)))


@experiment(
    "pt_long_gd",
    book={"alpha": 0.5075, "omega": 0.3, "d": 100, "n_seeds": 2, "steps": 4000, "record_every": 1000,
          "n_test": 500, "seed": 0},
    paper={"alpha": 0.5075, "omega": 0.3, "d": 400, "n_seeds": 4, "steps": 20_000, "record_every": 5000,
           "n_test": 2000, "seed": 0},
    description="GD from Q* for 4x the authors' 5000 steps, where the semantic branch is lost (chapter 3)",
)  # fmt: skip
def pt_long_gd(config: dict, device: str) -> list[dict]:
    """One row per (recorded step, seed): θ/σ² and m of gradient descent from Q* (chapter 03).

    At ω = 0.3 and α = 0.5075 (a point of the authors' grid where the converged equations have no
    semantic fixed point), the authors' gradient descent (lr 0.15, weight decay λ) from Q* run four
    times as long as theirs, to see whether θ drifts to 0.
    """
    from attnlab.experiments.phase_transition.engine import train_batched

    keys = ("alpha", "omega", "d", "n_seeds", "seed", "steps", "record_every", "n_test")
    out = train_batched(**{k: config[k] for k in keys}, inits=("semantic",), device=device)
    theta, m = out["curve_theta_over_sigma2"][:, 0], out["curve_m"][:, 0]  # [records, seeds]
    point = {k: config[k] for k in ("alpha", "omega", "d")}
    return [{**point, "step": int(step), "seed": s, "theta_over_sigma2": float(theta[i, s]),
             "m": float(m[i, s])}
            for i, step in enumerate(out["curve_steps"]) for s in range(config["n_seeds"])]  # fmt: skip
