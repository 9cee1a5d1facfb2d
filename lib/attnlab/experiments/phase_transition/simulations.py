"""Part II's registered finite-d experiments (pt = phase transition): GD and Adam vs alpha, d, variants.

Each experiment calls :func:`~attnlab.experiments.phase_transition.engine.train_batched` (chapters
01, 03, 04 and 05 show them), except ``pt_landscape``, which minimises the risk at a fixed overlap
(:func:`~attnlab.experiments.phase_transition.engine.lowest_risk_at_overlap`, chapter 03).

The chapters load the book-scale results of the longer ones, committed in ``lib/attnlab/results``
(``NAME-book.csv`` and ``.json``, which records the command and the time), so that a page executes
in seconds: ``pt_curves`` (chapter 01), ``pt_finite_d``, ``pt_adam_random``, ``pt_correlated``
(04), ``pt_untied``, ``pt_value`` and ``pt_histogram`` (05), each made with::

    python -m attnlab.experiments run NAME --scale book --no-cache --out lib/attnlab/results
"""

from __future__ import annotations

from attnlab.experiments import experiment, sweep
from attnlab.experiments.phase_transition.engine import (
    alpha_grid,
    lowest_risk_at_overlap,
    rows_from,
    run_alphas,
    train_batched,
)


def _train_kwargs(config: dict, device: str) -> dict:
    keys = ("omega", "sigma", "lam", "lr", "steps", "n_test", "lam_lin", "n_seeds", "normalize_teacher")
    return {k: config[k] for k in keys if k in config} | {"device": device}


_COMMON = {"omega": 0.3, "sigma": 0.5, "lam": 0.01, "lr": 0.15, "steps": 5000, "lam_lin": 1e-4}


@experiment(
    "pt_gd",
    book={
        **_COMMON,
        "steps": 2000,
        "d": 400,
        "alpha_min": 1.0,
        "alpha_max": 2.0,
        "n_alpha": 2,
        "alpha_every": 1,
        "n_seeds": 4,
        "n_test": 4000,
        "normalize_teacher": True,
        "seed": 0,
    },
    paper={
        **_COMMON,
        "d": 1000,
        "alpha_min": 0.01,
        "alpha_max": 2.0,
        "n_alpha": 25,
        "alpha_every": 1,
        "n_seeds": 24,
        "n_test": 10000,
        "normalize_teacher": False,
        "seed": 0,
    },
    description="full-batch GD from the semantic and positional starts vs alpha (chapter 3)",
)
def pt_gd(config: dict, device: str) -> list[dict]:
    """GD from both starts at every ``alpha`` of the grid; one row per (alpha, start, seed)."""
    return run_alphas(alpha_grid(config), d=config["d"], seed=config["seed"], **_train_kwargs(config, device))


@experiment(
    "pt_curves",
    book={**_COMMON, "d": 100, "alpha": 2.0, "n_seeds": 8, "n_test": 4000, "record_every": 250, "seed": 0},
    paper={
        **_COMMON,
        "d": 1000,
        "alpha": 2.0,
        "n_seeds": 24,
        "n_test": 10000,
        "record_every": 100,
        "seed": 0,
    },
    description="GD from both starts at one alpha, with training curves of eps_t, m and theta (chapter 1)",
)
def pt_curves(config: dict, device: str) -> list[dict]:
    """One row per (start, seed, recorded step) with ``eps_t``, ``m`` and ``theta_over_sigma2``;
    the rows of the last step also carry ``eps_g``, ``q`` and ``eps_lin``."""
    inits = ("semantic", "positional")
    out = train_batched(alpha=config["alpha"], d=config["d"], inits=inits, seed=config["seed"],
                        record_every=config["record_every"], **_train_kwargs(config, device))  # fmt: skip
    final = rows_from(out, inits, alpha=config["alpha"], d=config["d"], omega=config["omega"])
    rows = []
    last = len(out["curve_steps"]) - 1
    for j, step in enumerate(out["curve_steps"]):
        for i, init in enumerate(inits):
            for s in range(config["n_seeds"]):
                row = {"step": int(step), "init": init, "seed_index": s}
                row["eps_t"] = float(out["curve_eps_t"][j, i, s])
                row["m"] = float(out["curve_m"][j, i, s])
                row["theta_over_sigma2"] = float(out["curve_theta_over_sigma2"][j, i, s])
                if j == last:
                    row = {**final[i * config["n_seeds"] + s], **row}
                rows.append(row)
    return rows


@experiment(
    "pt_finite_d",
    book={
        **_COMMON,
        "steps": 2000,
        "alpha": 1.5,
        "ds": "25,50,100,200",
        "n_seeds": 6,
        "n_test": 2000,
        "normalize_teacher": True,
        "seed": 0,
    },  # fmt: skip
    paper={
        **_COMMON,
        "alpha": 1.5,
        "ds": "10,15,23,36,56,87,135,209,323,500",
        "n_seeds": 24,
        "n_test": 10000,
        "normalize_teacher": False,
        "seed": 0,
    },
    description="finite-d scaling at alpha = 1.5, omega = 0.3: GD from both starts vs d (chapter 4)",
)
def pt_finite_d(config: dict, device: str) -> list[dict]:
    """GD from both starts at one ``alpha`` for every ``d`` in ``ds`` (a comma-separated string)."""
    rows = []
    inits = ("semantic", "positional")
    for k, d in enumerate(int(v) for v in str(config["ds"]).split(",")):
        out = train_batched(alpha=config["alpha"], d=d, inits=inits, seed=config["seed"] + 1000 * k,
                            **_train_kwargs(config, device))  # fmt: skip
        rows += rows_from(out, inits, alpha=config["alpha"], d=d, omega=config["omega"], n=out["n"])
    return rows


_ADAM = {**_COMMON, "lr": 0.01, "steps": 2500, "d": 100, "alpha": 2.0, "seed": 0}
# GD references: the book scale stops at 2000 steps (converged at d = 100, see chapter 1)


@experiment(
    "pt_adam_random",
    book=_ADAM | {"n_seeds": 12, "n_test": 2000, "steps_gd": 2000, "normalize_teacher": True},
    paper=_ADAM | {"n_seeds": 48, "n_test": 10000, "steps_gd": 5000, "normalize_teacher": False},
    description="which minimum Adam reaches from a random start (d = 100, alpha = 2; chapter 4)",
)
def pt_adam_random(config: dict, device: str) -> list[dict]:
    """Adam (lr 0.01, 2500 steps, weight decay lam, as the authors) from ``Q = 0.1 N(0, I)``.

    On the same teachers and training sets, GD from the semantic and positional starts gives the
    two reference minima; each row carries both, so a reader can tell which one Adam reached.
    """
    kw = _train_kwargs(config, device)
    common = {"alpha": config["alpha"], "d": config["d"], "seed": config["seed"]}
    adam = train_batched(inits=("random",), optimizer="adam", **common, **kw)
    kw_gd = kw | {"lr": 0.15, "steps": config["steps_gd"]}
    gd = train_batched(inits=("semantic", "positional"), optimizer="gd", **common, **kw_gd)
    rows = rows_from(adam, ("random",), alpha=config["alpha"], d=config["d"], omega=config["omega"])
    for s, row in enumerate(rows):
        for i, name in enumerate(("semantic", "positional")):
            row[f"eps_t_{name}_gd"] = float(gd["eps_t"][i, s])
            row[f"eps_g_{name}_gd"] = float(gd["eps_g"][i, s])
        gap = {name: abs(row["eps_t"] - row[f"eps_t_{name}_gd"]) for name in ("semantic", "positional")}
        row["reached"] = (
            min(gap, key=gap.get) if row["theta_over_sigma2"] > 0.2 or row["m"] > 0.1 else "other"
        )
    return rows


def _variant_rows(config, device, variants: dict) -> list[dict]:
    """Run each named variant (a dict of :func:`train_batched` options) from both starts.

    Every variant uses the same seed, hence the same teachers and training sets."""
    rows = []
    for name, options in variants.items():
        kwargs = _train_kwargs(config, device) | options  # a variant may override lam
        new = run_alphas(alpha_grid(config), d=config["d"], seed=config["seed"], **kwargs)
        rows += [{"variant": name, **row} for row in new]
    return rows


_VARIANT_BOOK = {**_COMMON, "steps": 2000, "d": 100, "alpha_min": 0.5, "alpha_max": 2.0, "n_alpha": 4,
                 "alpha_every": 1, "n_seeds": 6, "n_test": 2000, "normalize_teacher": True,
                 "seed": 0}  # fmt: skip
_VARIANT_PAPER = {**_COMMON, "d": 500, "alpha_min": 0.25, "alpha_max": 2.0, "n_alpha": 8,
                  "alpha_every": 1, "n_seeds": 12, "n_test": 10000, "normalize_teacher": False,
                  "seed": 0}  # fmt: skip


@experiment(
    "pt_untied",
    book=_VARIANT_BOOK,
    paper=_VARIANT_PAPER,
    description="reviewers' question: untied query and key (both started alike) vs tied (chapter 4)",
)
def pt_untied(config: dict, device: str) -> list[dict]:
    """Tied ``Q = K`` against untied ``Q, K`` (both started at the same point), same data.

    At ``Q = K`` the untied penalty ``lam/2 (|Q|^2 + |K|^2)`` is twice the tied one, so the variant
    ``"untied, lam/2"`` compares them at equal effective regularisation.
    """
    variants = {
        "tied": {"tied": True},
        "untied": {"tied": False},
        "untied, lam/2": {"tied": False, "lam": config["lam"] / 2},
    }
    return _variant_rows(config, device, variants)


@experiment(
    "pt_value",
    book=_VARIANT_BOOK | {"d": 40, "n_seeds": 4, "alpha_min": 1.0, "n_alpha": 3},
    paper=_VARIANT_PAPER | {"d": 200},
    description="reviewers' question: a learned d x d value matrix (started at I) vs value = I (chapter 4)",
)
def pt_value(config: dict, device: str) -> list[dict]:
    """Value fixed to the identity against a learned ``W`` (``[d, d]``, from ``I``), same data."""
    return _variant_rows(config, device, {"identity": {"value": "identity"}, "learned": {"value": "learned"}})


@experiment(
    "pt_correlated",
    book=_VARIANT_BOOK | {"correlation": 0.5},
    paper=_VARIANT_PAPER | {"correlation": 0.5},
    description="reviewers' question: correlated tokens z_2 = c z_1 + sqrt(1-c^2) z' (chapter 4)",
)
def pt_correlated(config: dict, device: str) -> list[dict]:
    """Independent tokens against tokens with correlation ``c`` (the same teachers)."""
    c = float(config["correlation"])
    return _variant_rows(
        config, device, {"independent": {"correlation": 0.0}, f"c={c:g}": {"correlation": c}}
    )


# (omega, alpha, start) of issue 14: two metastable GD points, a control where GD and theory agree,
# and the semantic start at omega = 0.3, alpha = 0.8 (a target point of the issue, near the end of
# the semantic branch)
METASTABLE_POINTS = [
    [0.5, 1.19, "semantic"],
    [0.5, 1.19, "positional"],
    [0.15, 1.79, "positional"],
    [0.3, 0.8, "semantic"],
]

# GD run until flat (the runs of pt_metastable, pt_targets and pt_targets_scaling): six times the
# authors' 5000 steps, the overlaps recorded every 10,000 steps to see that they have stopped
_UNTIL_FLAT = {
    **_COMMON,
    "steps": 30_000,
    "record_every": 10_000,
    "n_seeds": 4,
    "n_test": 10000,
    "normalize_teacher": True,
}
_UNTIL_FLAT_BOOK = _UNTIL_FLAT | {"steps": 3000, "record_every": 1000, "n_seeds": 2, "n_test": 1000}


@experiment(
    "pt_metastable",
    book={
        **_UNTIL_FLAT_BOOK,
        "points": METASTABLE_POINTS,
        "ds": [100],
        "seed": 0,
    },
    paper={
        **_UNTIL_FLAT,
        "points": METASTABLE_POINTS,
        "ds": [250, 500, 1000],
        "seed": 0,
    },
    description="GD run until flat at the metastable points of issue 14, d up to 1000 (chapter 3)",
)
def pt_metastable(config: dict, device: str) -> list[dict]:
    """GD from one start at each ``(omega, alpha, init)`` of ``points`` and each ``d`` of ``ds``.

    One row per (point, d, seed) with the final ``eps_g``, ``eps_t``, ``m``, ``theta_over_sigma2``
    and ``q``, and how much ``m``, ``theta_over_sigma2`` and ``eps_t`` moved over the last
    ``record_every`` steps (``dm_last``, ``dtheta_last``, ``deps_t_last``): GD has stopped where these
    are small.
    """
    rows = []
    keys = ("sigma", "lam", "lr", "steps", "n_test", "lam_lin", "n_seeds", "normalize_teacher")
    kw = {k: config[k] for k in keys} | {"device": device}
    for k, (omega, alpha, init) in enumerate(config["points"]):
        for j, d in enumerate(config["ds"]):
            out = train_batched(
                alpha=alpha,
                d=d,
                omega=omega,
                inits=(init,),
                seed=config["seed"] + 100 * k + j,
                record_every=config["record_every"],
                **kw,
            )
            last = rows_from(out, (init,), alpha=alpha, d=d, omega=omega)
            for s, row in enumerate(last):
                row["dm_last"] = float(out["curve_m"][-1, 0, s] - out["curve_m"][-2, 0, s])
                row["dtheta_last"] = float(
                    out["curve_theta_over_sigma2"][-1, 0, s] - out["curve_theta_over_sigma2"][-2, 0, s]
                )
                row["deps_t_last"] = float(out["curve_eps_t"][-1, 0, s] - out["curve_eps_t"][-2, 0, s])
                rows.append(row)
    return rows


# the target points of issue 14 at omega = 0.3: both starts at alpha = 0.8, 1.2, 1.6 and 2
TARGET_POINTS = [[0.3, alpha, init] for alpha in (0.8, 1.2, 1.6, 2.0) for init in ("semantic", "positional")]

experiment(
    "pt_targets",
    book={
        **_UNTIL_FLAT_BOOK,
        "points": TARGET_POINTS[-2:],
        "ds": [100],
        "seed": 0,
    },
    paper={
        **_UNTIL_FLAT,
        "points": TARGET_POINTS,
        "ds": [1000],
        "seed": 0,
    },
    description="GD run until flat from both starts at omega = 0.3, alpha = 0.8-2, d = 1000 (chapter 3)",
)(pt_metastable)


experiment(
    "pt_targets_scaling",
    book={
        **_UNTIL_FLAT_BOOK,
        "points": TARGET_POINTS[-2:],
        "ds": [50],
        "seed": 50,
    },
    paper={
        **_UNTIL_FLAT,
        "points": TARGET_POINTS,
        "ds": [250, 500],
        "seed": 50,
    },
    description="pt_targets at d = 250 and 500, for a finite-size scaling with it (chapter 3)",
)(pt_metastable)


# (omega, alpha, branch, overlaps) of pt_landscape: the metastable points A, B and C of
# METASTABLE_POINTS, and a control where the semantic branch is the global minimum and GD agrees
# with the theory (omega = 0.3, alpha = 2)
LANDSCAPE_POINTS = [
    [0.5, 1.19, "semantic", [0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45]],
    [0.15, 1.79, "positional", [0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3]],
    [0.3, 0.8, "semantic", [0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45]],
    [0.3, 2.0, "semantic", [0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8]],
]


def _landscape_task(omega, alpha, branch, values, d, seed, sigma, lam):
    rows = lowest_risk_at_overlap(
        alpha=alpha, omega=omega, branch=branch, values=values, d=d, seed=seed, sigma=sigma, lam=lam
    )
    return [
        {"omega": omega, "alpha": alpha, "branch": branch, "kind": "finite d", "d": d, "seed": seed} | r
        for r in rows
    ]


def _landscape_theory(omega, alpha, branch, values, sigma, lam, n_nodes, check_nodes):
    from attnlab.theory import phase_transition as se

    rows, init = [], None
    where = {"omega": omega, "alpha": alpha, "branch": branch}
    for value in values:
        c = se.constrained(alpha, omega, branch, value, sigma, lam, n_nodes=n_nodes, init=init)
        init = (c.q, c.V) if c.converged else None
        # V = sigma^2 / (lam + sigma^2 V_hat) (eq-pt-se-overlaps)
        V_hat = (sigma**2 / c.V - lam) / sigma**2 if c.converged else float("nan")
        rows.append(where | {"kind": "theory", "value": value, "eps_t": c.eps_t, "q": c.q, "V_hat": V_hat})
    fp = se.solve(alpha, omega, branch, sigma, lam, n_nodes=n_nodes)
    row = where | {"kind": "fixed point", "value": fp.theta_over_sigma2 if branch == "semantic" else fp.m}
    row |= {"eps_t": fp.eps_t, "q": fp.q, "V_hat": fp.V_hat, "converged": fp.converged}
    if fp.converged:
        rep = se.replicon(fp)
        row |= {"V_hat_smooth": rep.V_hat_smooth, "jump_share": rep.jump_share, "replicon": rep.replicon}
        for n in check_nodes:
            row[f"replicon_{n}"] = se.replicon(fp, n_nodes=n).replicon
    return [*rows, row]


@experiment(
    "pt_landscape",
    book={
        "points": [[o, a, b, v[::4]] for o, a, b, v in LANDSCAPE_POINTS],
        "ds": [100, 200],
        "n_seeds": 2,
        "n_nodes": 8,
        "check_nodes": [12],
        "sigma": 0.5,
        "lam": 0.01,
        "seed": 0,
        "n_jobs": 2,
    },
    paper={
        "points": LANDSCAPE_POINTS,
        "ds": [250, 500, 1000, 2000],
        "n_seeds": 4,
        "n_nodes": 20,
        "check_nodes": [12, 28, 40],
        "sigma": 0.5,
        "lam": 0.01,
        "seed": 0,
        "n_jobs": 2,
    },
    description="finite-d lowest training loss at a fixed overlap vs the theory, d up to 2000 (chapter 3)",
)
def pt_landscape(config: dict, device: str) -> list[dict]:
    """A finite-size scaling of the training loss at a fixed order parameter (issue 14, item 1).

    At each point of ``points`` and each ``d`` of ``ds``, for ``n_seeds`` teachers and training
    sets, the lowest regularised risk that L-BFGS finds with the branch's order parameter held at
    each of the point's values (:func:`~attnlab.experiments.phase_transition.engine.lowest_risk_at_overlap`,
    ``kind = "finite d"``, one row per value, d and seed); the replica-symmetric curve at the same
    values (``se.constrained``, ``kind = "theory"``, with the conjugate ``V_hat``); and the branch's
    fixed point with its replicon diagnostics (``se.replicon`` at ``n_nodes`` and ``check_nodes``,
    ``kind = "fixed point"``). ``device`` is unused (float64 on the CPU).
    """
    sigma, lam = config["sigma"], config["lam"]
    tasks, theory = [], []
    for k, (omega, alpha, branch, values) in enumerate(config["points"]):
        values = [float(v) for v in values]
        where = {"omega": omega, "alpha": alpha, "branch": branch, "values": values}
        where |= {"sigma": sigma, "lam": lam}
        theory.append(where | {"n_nodes": config["n_nodes"], "check_nodes": config["check_nodes"]})
        for j, d in enumerate(config["ds"]):
            for s in range(config["n_seeds"]):
                seed = config["seed"] + 10_000 * k + 100 * j + s
                tasks.append(where | {"d": d, "seed": seed})
    # the largest d first, so that the two workers finish together
    tasks.sort(key=lambda t: -t["d"])
    parts = sweep(_landscape_task, tasks, n_jobs=config["n_jobs"])
    parts += sweep(_landscape_theory, theory, n_jobs=config["n_jobs"])
    return [row for part in parts for row in part]
