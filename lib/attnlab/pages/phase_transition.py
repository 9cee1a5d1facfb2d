"""Part II's pages: committed results turned into the tables and curves chapter 03 and its lab notes show.

Each function reads the rows of one committed result (:func:`attnlab.experiments.load_result`) and
returns what a page draws or tabulates; none trains or solves anything.

* :func:`theory_curves` – the two branches of ``pt_theory`` over α (points that missed the
  solver's tolerance set to NaN), and :func:`theory_rows` to pick its other rows;
* :func:`slices` – ``pt_slices``: the training loss along both branches' slices, as one path;
* :func:`against_theory` – gradient descent against the fixed points at one α (``pt_gd``);
* :func:`targets` – ``pt_targets`` against the committed theory curves at ω = 0.3;
* :func:`branch_paths` – ``pt_branches``: both branches continued, and where each ends;
* :func:`metastable_runs`, :func:`metastable_summary` – ``pt_metastable`` at the points of
  :data:`POINT_NAMES`, against the fixed points of ``pt_constrained``;
* :func:`rule_orders`, :func:`monte_carlo_steps` – ``pt_authors_rules``;
* :func:`reproduce` – every committed Part II result with the command that made it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnlab.experiments import load_result, names

# The points of pt_metastable, (ω, start) -> name, as chapter 03 shows them.
POINT_NAMES = {
    (0.5, "semantic"): "A: ω = 0.5, α = 1.19, from Q*",
    (0.5, "positional"): "control: ω = 0.5, α = 1.19, positional",
    (0.15, "positional"): "B: ω = 0.15, α = 1.79, positional",
    (0.3, "semantic"): "C: ω = 0.3, α = 0.8, from Q*",
}
BRANCHES = ("semantic", "positional")
_ORDER = {"semantic": "theta_over_sigma2", "positional": "m"}  # each branch's order parameter


def _true(values) -> np.ndarray:
    """Booleans from a column that holds True/False or their strings."""
    return np.array([v in (True, "True") for v in values])


def _check_rows(rows, columns, name):
    frame = pd.DataFrame(rows)
    if frame.empty or not set(columns) <= set(frame):
        raise ValueError(f"rows must be {name}'s rows (with {', '.join(columns)}), got {list(frame)}")
    return frame


def theory_rows(theory, **where) -> list[dict]:
    """The rows of a ``pt_theory`` result whose columns equal ``where`` (e.g. ``kind="bracket"``)."""
    return [r for r in theory.rows if all(r.get(k) == v for k, v in where.items())]


def theory_curves(theory) -> dict:
    """``{branch: {"alpha", "eps_g", "eps_t", "m", "theta_over_sigma2", "converged"}}`` from
    ``pt_theory``: arrays over α, with the points that missed the solver's tolerance set to NaN
    (``alpha`` and ``converged`` are kept whole)."""
    curves = {}
    for b in BRANCHES:
        ok = _true(theory.column("converged", kind="curve", branch=b))
        curve = {"converged": ok, "alpha": theory.column("alpha", kind="curve", branch=b).astype(float)}
        for k in ("eps_g", "eps_t", "m", "theta_over_sigma2"):
            curve[k] = np.where(ok, theory.column(k, kind="curve", branch=b).astype(float), np.nan)
        curves[b] = curve
    return curves


def slices(rows) -> dict:
    """``pt_slices`` as one path per α through the agnostic point m = θ = 0.

    Returns ``{alpha: {"x", "eps_t", "minima"}}``: ``x`` runs from -m_max (the positional slice,
    drawn to the left) through 0 to θ/σ² = θ_max (the semantic slice), ``eps_t`` is the training
    loss there (points that did not converge dropped) and ``minima`` maps each branch to its fixed
    point ``(x, eps_t)``.
    """
    frame = _check_rows(rows, ("kind", "alpha", "branch", "value", "eps_t", "converged"), "pt_slices")
    out = {}
    for alpha, g in frame.groupby("alpha"):
        s = g[(g["kind"] == "slice") & _true(g["converged"])]
        pos, sem = (s[s["branch"] == b].sort_values("value") for b in ("positional", "semantic"))
        x = np.concatenate([-pos["value"].to_numpy(float)[::-1], sem["value"].to_numpy(float)[1:]])
        y = np.concatenate([pos["eps_t"].to_numpy(float)[::-1], sem["eps_t"].to_numpy(float)[1:]])
        fixed = g[g["kind"] == "fixed point"].set_index("branch")
        sign = {"positional": -1.0, "semantic": 1.0}
        minima = {b: (sign[b] * float(fixed.loc[b, "value"]), float(fixed.loc[b, "eps_t"])) for b in BRANCHES}
        out[float(alpha)] = {"x": x, "eps_t": y, "minima": minima}
    return out


def against_theory(theory, summaries: dict, alpha: float = 2.0) -> pd.DataFrame:
    """Gradient descent against the fixed points of ``pt_theory`` at one ``alpha``.

    ``summaries`` maps a label (e.g. "book") to the summary rows of a ``pt_gd`` result
    (:func:`attnlab.experiments.phase_transition.summarize`). One row per (label, branch,
    quantity): the test error and the branch's own order parameter; columns ``experiment`` and
    ``theory``, indexed by "label · branch · quantity".
    """
    rows = []
    for label, data in summaries.items():
        for b in BRANCHES:
            th = {
                k: float(theory.column(k, kind="curve", branch=b, alpha=alpha)[0])
                for k in ("eps_g", _ORDER[b])
            }
            row = next(r for r in data if r["init"] == b and abs(r["alpha"] - alpha) < 1e-9)
            for key in ("eps_g", _ORDER[b]):
                name = f"{label} · {b} · {key}"
                rows.append(
                    {"scale · branch · quantity": name, "experiment": float(row[key]), "theory": th[key]}
                )
    return pd.DataFrame(rows).set_index("scale · branch · quantity")


def targets(rows, theory) -> pd.DataFrame:
    """``pt_targets`` (gradient descent run until flat, from both starts) against the fixed points.

    Only runs on their branch count (their own order parameter is the larger one). One row per
    (α, branch): runs, mean ε_g against the theory's, mean order parameter ± standard error against
    the theory's, their difference, and the largest change of the order parameter over the last
    10,000 steps.
    """
    tg = _check_rows(rows, ("alpha", "init", "eps_g", "m", "theta_over_sigma2"), "pt_targets")
    sem = tg["init"] == "semantic"
    tg["order"] = np.where(sem, tg["theta_over_sigma2"], tg["m"])
    tg["other"] = np.where(sem, tg["m"], tg["theta_over_sigma2"])
    tg["moved"] = np.abs(np.where(sem, tg["dtheta_last"], tg["dm_last"]))
    out = []
    for (alpha, init), g in tg.groupby(["alpha", "init"], sort=True):
        g = g[g["order"] > g["other"]]
        fp = next(r for r in theory_rows(theory, kind="curve", branch=init) if np.isclose(r["alpha"], alpha))
        fp_order = fp[_ORDER[init]]
        out.append({
            "α": alpha, "branch": init, "runs": len(g), "GD: ε_g": g["eps_g"].mean(),
            "theory: ε_g": fp["eps_g"], "ε_g ratio": g["eps_g"].mean() / fp["eps_g"],
            "GD: order parameter": g["order"].mean(),
            "± se": g["order"].std(ddof=1) / np.sqrt(len(g)), "theory": fp_order,
            "difference": g["order"].mean() - fp_order, "largest change, last 10,000 steps": g["moved"].max(),
        })  # fmt: skip
    return pd.DataFrame(out)


def branch_paths(rows) -> dict:
    """``pt_branches``: the semantic branch followed down and the positional one followed up.

    Returns ``{"alpha", "d_rel", "both", "missed", "mu_on", "ends"}``: the common α grid, the
    relative training-error difference semantic minus positional, where both points are on their
    branch, where the semantic iteration missed its tolerance (not an end: the branch is found on
    both sides), ``mu_max`` of every point found on a branch, and the table of where each
    continued branch stops being found.
    """
    bdf = _check_rows(rows, ("kind", "branch", "direction", "alpha", "eps_t", "on_branch"), "pt_branches")
    bdf["on"] = _true(bdf["on_branch"])
    curves = bdf[bdf["kind"] == "curve"].sort_values("alpha")
    sem = curves[(curves["branch"] == "semantic") & (curves["direction"] == "down")]
    pos = curves[(curves["branch"] == "positional") & (curves["direction"] == "up")]
    alpha = sem["alpha"].to_numpy(float)
    if not np.allclose(alpha, pos["alpha"].to_numpy(float)):
        raise ValueError("rows must hold both branches on one grid of alpha")
    ends = bdf[bdf["kind"] == "end"][
        ["branch", "direction", "alpha_off", "alpha_on", "mu_max", "theta_over_sigma2", "m"]
    ].reset_index(drop=True)
    return {
        "alpha": alpha,
        "d_rel": sem["eps_t"].to_numpy(float) / pos["eps_t"].to_numpy(float) - 1,
        "both": sem["on"].to_numpy() & pos["on"].to_numpy(),
        "missed": ~_true(sem["converged"]),
        "mu_on": curves[curves["on"]]["mu_max"].astype(float).to_numpy(),
        "ends": ends,
    }


def metastable_runs(rows) -> pd.DataFrame:
    """``pt_metastable``'s rows with the columns the pages use added.

    ``point`` (a name of :data:`POINT_NAMES`), ``order`` (the run's own order parameter: θ/σ²
    from Q*, m from the positional start), ``other`` (the other one), ``moved`` (the change of
    ``order`` over the last 10,000 steps, absolute) and ``on`` (the run is on its branch: its
    own order parameter is the larger one).
    """
    runs = pd.DataFrame(rows)
    if runs.empty or not {"omega", "init", "theta_over_sigma2", "m"} <= set(runs):
        raise ValueError("rows must be pt_metastable's rows (omega, init, theta_over_sigma2, m, ...)")
    sem = runs["init"] == "semantic"
    runs["point"] = [POINT_NAMES[p] for p in zip(runs["omega"], runs["init"], strict=True)]
    runs["order"] = np.where(sem, runs["theta_over_sigma2"], runs["m"])
    runs["other"] = np.where(sem, runs["m"], runs["theta_over_sigma2"])
    runs["moved"] = np.abs(np.where(sem, runs["dtheta_last"], runs["dm_last"]))
    runs["on"] = runs["order"] > runs["other"]
    return runs


def metastable_summary(meta_rows, constrained_rows) -> tuple[pd.DataFrame, dict]:
    """Gradient descent at the metastable points against the fixed points, per point and d.

    Returns the table (indexed by point and d: runs on the branch, mean order parameter ± its
    standard error, the fixed point's, runs still moving, median change over the last 10,000
    steps) and, per point, a straight line in 1/d through the means read at 1/d = 0.
    """
    cons = _check_rows(constrained_rows, ("kind", "omega", "branch", "value"), "pt_constrained")
    runs = metastable_runs(meta_rows)
    fixed = cons[cons["kind"] == "fixed point"].set_index(["omega", "branch"])
    runs["fixed point"] = [fixed.loc[p, "value"] for p in zip(runs["omega"], runs["init"], strict=True)]
    summary = (
        runs[runs["on"]]
        .groupby(["point", "d"], sort=False)
        .agg(
            runs=("order", "size"),
            order=("order", "mean"),
            se=("order", lambda v: v.std(ddof=1) / np.sqrt(len(v))),
            fixed=("fixed point", "first"),
            moving=("moved", lambda v: int((v > 0.005).sum())),
            moved=("moved", "median"),
        )
    )
    summary.columns = ["runs on the branch", "GD: order parameter", "± se", "fixed point",
                       "runs still moving", "median change, last 10,000 steps"]  # fmt: skip
    extrapolated = {}
    for name, g in summary.groupby(level="point", sort=False):
        inv_d = 1 / g.index.get_level_values("d").to_numpy(float)
        extrapolated[name] = float(np.polyfit(inv_d, g["GD: order parameter"], 1)[1])
    return summary, extrapolated


def rule_orders(rows) -> pd.Series:
    """θ/σ² at A by the authors' procedure with the hats on n-point Gauss–Hermite rules, by n."""
    frame = _check_rows(rows, ("kind", "n_nodes", "value"), "pt_authors_rules")
    rule = frame[frame["kind"] == "rule"]
    if not _true(rule["converged"]).all():
        raise ValueError("every rule row of pt_authors_rules must have converged")
    return rule.set_index(rule["n_nodes"].astype(int))["value"].astype(float).rename("θ/σ²")


def monte_carlo_steps(rows) -> pd.DataFrame:
    """One Monte-Carlo step of the exact map from the authors' point and from ours, at A and B.

    One row per (point, start): the order parameter at the start, its mean after one step over the
    seeds, the mean step and its standard error, their ratio ``z`` and V before and after.
    """
    frame = _check_rows(rows, ("kind", "branch", "start", "value", "value_start", "V", "V_start"),
                        "pt_authors_rules")  # fmt: skip
    numbers = ("value", "value_start", "V", "V_start")
    mc = frame[frame["kind"] == "monte carlo"].astype({c: float for c in numbers})
    mc = mc.assign(step=mc["value"] - mc["value_start"])
    moves = mc.groupby(["branch", "start"]).agg(
        start_value=("value_start", "first"),
        after=("value", "mean"),
        step=("step", "mean"),
        se=("step", lambda v: v.std(ddof=1) / np.sqrt(len(v))),
        V_start=("V_start", "first"),
        V_after=("V", "mean"),
    )
    moves["z"] = moves["step"] / moves["se"]
    moves.index = [f"{'A, θ/σ²' if b == 'semantic' else 'B, m'}: {s}" for b, s in moves.index]
    moves.columns = ["start", "after one step", "step", "± se", "V: start", "V: after", "step / se"]
    return moves


def reproduce(prefix: str = "pt_") -> pd.DataFrame:
    """Every committed result of the experiments named ``prefix...``: scale, command, wall time."""
    rows = []
    for name in names():
        if not name.startswith(prefix):
            continue
        for scale in ("book", "paper", "cpu"):
            try:
                res = load_result(name, scale)
            except (FileNotFoundError, ValueError):
                continue
            wall = res.meta.get("timing", {}).get("wall_s", float("nan"))
            rows.append(
                {"result": f"{name} ({scale})", "command": res.meta.get("command", ""), "wall (s)": wall}
            )
    if not rows:
        raise ValueError(f"prefix must start the names of committed experiments, got {prefix!r}")
    return pd.DataFrame(rows).set_index("result")
