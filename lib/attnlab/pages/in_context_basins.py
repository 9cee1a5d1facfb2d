"""Learning rates, seeds and basins: the tables of Part III's lab notes on them.

The lab notes on the CPU recipe's learning rates (``icl_lr_sweep``, ``icl_lr_sweep_seeds``,
``icl_table_rates`` against ``icl_table_6k``), on seeds that end in basins (``icl_seed_basins``,
``icl_full_basins``, ``icl_diag_deep_basins``, ``icl_gdpp_basins``) and on 7-layer DIAG's
divergence (``icl_diag7_rate``, ``icl_diag7_schedule``, ``icl_diag7_float64``,
``icl_table_diag7_float64``) show one table per investigation. Each function here builds one
from committed results only (:func:`attnlab.experiments.load_result`); nothing is trained.
Rows are indexed by a model (``'DIAG 3L'``) or a cell (``'DIAG 3L, U(0, 3)'``), ratios are
against Table 1 (:data:`~attnlab.experiments.in_context.table1.TABLE1`).
"""

from __future__ import annotations

import re
from math import comb

import numpy as np
import pandas as pd

from attnlab.experiments.in_context.lr_sweep import lr_choice
from attnlab.experiments.in_context.recipe import per_model
from attnlab.experiments.in_context.table1 import NAMES, TABLE1, TABLE1_NOISE, cells, label, within


def _check(result, name: str, arg: str):
    """``result``, after checking that it is the committed result ``name``."""
    if getattr(result, "name", None) != name or not hasattr(result, "rows"):
        raise ValueError(f"{arg} must be the committed result {name!r}, got {result!r:.60}")
    return result


def _frame(result, name: str, arg: str) -> pd.DataFrame:
    """``result``'s table rows as a DataFrame with the paper's value and the target (``met``)."""
    _check(result, name, arg)
    df = pd.DataFrame(result.rows)
    if "kind" in df.columns:
        df = df[df["kind"] == "table"].copy()
    df["paper"] = [
        TABLE1[(p, int(L))][TABLE1_NOISE.index(n)]
        for p, L, n in zip(df.param, df.n_layers, df.noise, strict=True)
    ]
    df["met"] = within(df.adjusted, df.paper)
    return df


def _model(p: str, L: int) -> str:
    return f"{NAMES[p]} {int(L)}L"


def _cell(p: str, L: int, n: str) -> str:
    return f"{_model(p, L)}, {label(n)}"


def lr_sweep(sweep, seeds, cfg: dict) -> pd.DataFrame:
    """``icl_lr_sweep`` scored by :func:`lr_choice` (seed 0), one row per model.

    Columns: the score at a third of the pilot's rate, at it and at three times it; the pilot's rate,
    the rate chosen and the CPU table's rate (from ``cfg``, the table's config). For the models
    ``seeds`` (``icl_lr_sweep_seeds``, seeds 1 and 2) sweeps again: how many of the three seeds alone
    move the model to a higher rate (None elsewhere), and the gain with the three seeds pooled (the
    score at the pilot's rate over the lowest).
    """
    if not isinstance(cfg, dict) or "lr" not in cfg or "rerun_lr_factor" not in cfg:
        raise ValueError("cfg must be the CPU table's config, with 'lr' and 'rerun_lr_factor'")
    _check(sweep, "icl_lr_sweep", "sweep")
    _check(seeds, "icl_lr_sweep_seeds", "seeds")

    def choice(rows):
        return lr_choice(rows, current=sweep.config["lr"], rerun_lr_factor=cfg["rerun_lr_factor"])

    sw = choice(sweep.rows)
    scores = sw.filter(like="score@").to_numpy()
    out = pd.DataFrame(
        [row[~np.isnan(row)] for row in scores],  # three rates per model
        columns=["rate / 3", "rate", "3 × rate"],
        index=pd.Index([_model(p, L) for p, L in sw.index], name="model"),
    )
    out["pilot's rate"] = sw.current.to_numpy()
    out["chosen"] = sw.chosen.to_numpy()
    out["table's rate"] = [float(per_model(cfg["lr"], p, L)) for p, L in sw.index]
    by_seed = [sw] + [choice([r for r in seeds.rows if r["seed"] == s]) for s in (1, 2)]
    again = by_seed[1].index
    moving = sum((c.chosen.loc[again] > 1.5 * c.current.loc[again]).astype(int) for c in by_seed)
    pooled = choice([r for r in sweep.rows if (r["param"], r["n_layers"]) in set(again)] + list(seeds.rows))
    names = [_model(p, L) for p, L in again]
    moves = dict(zip(names, moving.tolist(), strict=True))
    out["seeds moving it (of 3)"] = pd.Series(
        [moves.get(m) for m in out.index], index=out.index, dtype=object
    )
    out["gain, 3 seeds"] = pd.Series(pooled.gain.loc[again].to_numpy(), index=names)
    return out


def moved_cells(six, rates, models) -> pd.DataFrame:
    """The Table 1 cells of ``models`` (names such as ``'DIAG 4L'``; a model Table 1 lacks has none),
    best seed: at the pilot's rate (``six``, ``icl_table_6k``: ``ours_pilot``, ``met_pilot``) and at
    the rate the sweep chose (``rates``, ``icl_table_rates``, which the CPU table takes them from:
    ``ours``, ``trimmed``, ``met``), with the paper's value; indexed by cell."""
    _check(six, "icl_table_6k", "six")
    _check(rates, "icl_table_rates", "rates")
    models = list(models)
    pattern = r"(GD\+\+|DIAG|FULL) [1-9]L"
    if not models or not all(isinstance(m, str) and re.fullmatch(pattern, m) for m in models):
        raise ValueError(f"models must be model names such as 'DIAG 4L', got {models}")
    key = ["param", "L", "noise"]
    df = cells(six).merge(cells(rates), on=key + ["paper"], suffixes=("_pilot", ""))
    df["model"] = [_model(p, L) for p, L in zip(df.param, df.L, strict=True)]
    df = df[df.model.isin(models)].copy()
    df["order"] = [TABLE1_NOISE.index(n) for n in df.noise]
    df = df.sort_values(["param", "L", "order"])
    df.index = pd.Index(
        [_cell(p, L, n) for p, L, n in zip(df.param, df.L, df.noise, strict=True)], name="cell"
    )
    return df[["model", "ours_pilot", "met_pilot", "ours", "trimmed", "met", "paper"]]


def met_by_model(moved: pd.DataFrame) -> pd.DataFrame:
    """Per model of :func:`moved_cells`: its cells of Table 1 within the target at each rate."""
    if not isinstance(moved, pd.DataFrame) or not {"model", "met_pilot", "met"} <= set(moved.columns):
        raise ValueError("moved must be a DataFrame from moved_cells")
    return moved.groupby("model", sort=False).agg(
        **{"met at the pilot's rate": ("met_pilot", "sum"), "met at the new rate": ("met", "sum")},
        cells=("met", "size"),
    )


def listed(moved: pd.DataFrame) -> str:
    """Cells of :func:`moved_cells` as prose: ``'DIAG 3L, U(0, 5) (1.21 times Table 1), ...'``."""
    if not isinstance(moved, pd.DataFrame) or not {"ours", "paper"} <= set(moved.columns):
        raise ValueError("moved must be rows of a DataFrame from moved_cells")
    return ", ".join(
        f"{c} ({o / p:.2f} times Table 1)"
        for c, o, p in zip(moved.index, moved.ours, moved.paper, strict=True)
    )


def seed_basins(basins) -> pd.DataFrame:
    """``icl_seed_basins`` per cell and variant (column ``variant``): the lowest trimmed loss of the
    eight seeds over Table 1, the highest over the lowest, the seeds within the target by their mean
    and the chance that the best of k = 1, 3, 5 of the eight seeds is."""
    df = _frame(basins, "icl_seed_basins", "basins")
    rows = []
    for (p, L, n, arm), g in df.groupby(["param", "n_layers", "noise", "arm"], sort=False):
        low, good = g.adjusted_trimmed.min(), int(g.met.sum())
        row = {"cell": _cell(p, L, n), "variant": arm, "lowest / paper": low / g.paper.iloc[0]}
        row |= {"highest / lowest": g.adjusted_trimmed.max() / low, "within (of 8)": good}
        row |= {f"P(best of {k})": 1 - comb(len(g) - good, k) / comb(len(g), k) for k in (1, 3, 5)}
        rows.append(row)
    return pd.DataFrame(rows).set_index("cell")


def paired_basins(*results) -> pd.DataFrame:
    """``icl_full_basins`` and ``icl_diag_deep_basins``: eight seeds by the recipe and seeds 0-3 with
    four times the steps, per cell. Columns: the recipe's lowest trimmed loss over Table 1, its seeds
    within the target by their mean and diverged; the 4x run's trimmed loss over the recipe's of the
    same seed (median and highest over the seeds where both are finite), its lowest trimmed loss over
    Table 1, its seeds within the target and diverged."""
    names = ("icl_full_basins", "icl_diag_deep_basins")
    if not results or any(getattr(r, "name", None) not in names for r in results):
        raise ValueError(f"results must be committed results among {names}")
    out = []
    for res in results:
        df = _frame(res, res.name, "results")
        for (p, L, n), g in df.groupby(["param", "n_layers", "noise"], sort=False):
            rec, four = (g[g.arm == a].set_index("seed") for a in ("recipe", "4x steps"))
            ratio = (four.adjusted_trimmed / rec.adjusted_trimmed.loc[four.index]).replace(np.inf, np.nan)
            ratio = ratio[np.isfinite(rec.adjusted_trimmed.loc[four.index])].dropna()
            paper = g.paper.iloc[0]
            row = {"cell": _cell(p, L, n), "lowest / paper": rec.adjusted_trimmed.min() / paper}
            row |= {"within (of 8)": int(rec.met.sum()), "diverged (of 8)": int(rec.diverged.sum())}
            row |= {"4x / recipe, median": ratio.median(), "4x / recipe, highest": ratio.max()}
            row |= {"4x lowest / paper": four.adjusted_trimmed.min() / paper}
            row |= {"4x within (of 4)": int(four.met.sum()), "4x diverged (of 4)": int(four.diverged.sum())}
            out.append(row)
    return pd.DataFrame(out).set_index("cell")


def diag7(deep, rate, schedule, f64, table_f64) -> pd.DataFrame:
    """7-layer DIAG on {1, 3} and at σ_max = 4 in every variant tried, one row per noise and variant:
    the runs, how many diverged and the lowest adjusted loss over Table 1. Seeds 0-3 of
    ``icl_diag_deep_basins`` (the recipe's rate 1e-3, its steps and four times as many),
    ``icl_diag7_rate`` (3e-4), ``icl_diag7_schedule`` (a cosine decay), ``icl_diag7_float64`` (float32
    and float64, four times the steps) and the five seeds of ``icl_table_diag7_float64`` (the recipe in
    float64)."""
    db = _frame(deep, "icl_diag_deep_basins", "deep")
    db = db[(db.n_layers == 7) & (db.seed < 4)].replace(
        {"arm": {"recipe": "1e-3", "4x steps": "1e-3, 4x steps"}}
    )
    parts = [db, _frame(rate, "icl_diag7_rate", "rate"), _frame(schedule, "icl_diag7_schedule", "schedule")]
    f = _frame(f64, "icl_diag7_float64", "f64")
    parts.append(f.assign(arm=f.arm + ", 4x steps"))
    t = _frame(table_f64, "icl_table_diag7_float64", "table_f64")
    parts.append(t[(t.n_layers == 7) & t.noise.isin(db.noise.unique())].assign(arm="float64, recipe"))
    df = pd.concat(parts, ignore_index=True).replace(
        {"arm": {"lr 3e-4": "3e-4", "lr 3e-4, 4x steps": "3e-4, 4x steps"}}
    )
    g = df.groupby(["noise", "arm"], sort=False)
    out = pd.DataFrame(
        {"runs": g.size(), "diverged": g.diverged.sum(), "lowest / paper": g.adjusted.min() / g.paper.first()}
    )
    out = out.sort_index(level="noise", sort_remaining=False)
    out.index = pd.Index([f"{label(n)}, {a}" for n, a in out.index], name="noise, variant")
    return out


def float64_curves(f64) -> pd.DataFrame:
    """``icl_diag7_float64``'s float64 runs, one row per noise and seed: the highest mean training
    loss over 100 steps (``peak``), the step of that window (``peak_step``) and the last one (``end``)."""
    _check(f64, "icl_diag7_float64", "f64")
    c = pd.DataFrame([r for r in f64.rows if r["kind"] == "curve" and r["arm"] == "float64"])
    c = c.astype({"train_loss": float, "step": int}).sort_values("step")
    g = c.groupby(["noise", "seed"]).train_loss
    top = c.loc[g.idxmax()].set_index(["noise", "seed"]).step
    return pd.DataFrame({"peak": g.max(), "peak_step": top, "end": g.last()})


def float32_flips(deep, f64) -> int:
    """How many float32 runs of ``icl_diag7_float64`` differ in whether they diverge from the same seed
    and data in ``icl_diag_deep_basins`` (four times the steps, trained in one batched call)."""
    db = _frame(deep, "icl_diag_deep_basins", "deep")
    db = db[(db.arm == "4x steps") & (db.n_layers == 7)].set_index(["noise", "seed"]).diverged
    f = _frame(f64, "icl_diag7_float64", "f64")
    f = f[f.arm == "float32"].set_index(["noise", "seed"]).diverged
    return int((f != db.loc[f.index]).sum())


def recipe_float64(table_f64, cpu_run) -> dict:
    """``icl_table_diag7_float64`` (7-layer DIAG by the recipe in float64) against the CPU table's
    float32 run: runs diverged, cells within the target in each (of Table 1's ten) and the best
    seed's loss on {1, 3} over Table 1."""
    t = _frame(table_f64, "icl_table_diag7_float64", "table_f64")
    if not hasattr(cpu_run, "rows"):
        raise ValueError(f"cpu_run must be the CPU table (an icl_mixed_noise result), got {cpu_run!r:.60}")
    best = t[t.best.astype(bool)].set_index("noise")
    c = cells(cpu_run)
    c = c[(c.param == "diag") & (c.L == 7)]
    r13 = float(best.adjusted["categorical:1,3"] / best.paper["categorical:1,3"])
    return {
        "diverged": int(t.diverged.sum()),
        "met": int(best.met.sum()),
        "met32": int(c.met.sum()),
        "r13": r13,
    }


def gdpp_basins(gbas, cpu_run) -> pd.DataFrame:
    """``icl_gdpp_basins`` (GD++ with 3 layers at σ_max = 2 by the recipe at the pilot's rate, eight
    seeds) per initialisation scale, and the CPU table's seeds of that cell (three times the rate):
    the lowest, median and highest adjusted loss (over Table 1, or over the lowest), the seeds, those
    within the target and the batches skipped for an overflow."""
    df = _frame(gbas, "icl_gdpp_basins", "gbas")
    if not hasattr(cpu_run, "rows"):
        raise ValueError(f"cpu_run must be the CPU table (an icl_mixed_noise result), got {cpu_run!r:.60}")
    t = pd.DataFrame(r for r in cpu_run.rows if r.get("kind") == "table")
    t = t[(t.param == "gdpp") & (t.n_layers == 3) & (t.noise == "uniform:2")]
    t = t.assign(arm="3 × rate (the table)", paper=df.paper.iloc[0])
    df = pd.concat([df, t.assign(met=within(t.adjusted, t.paper))], ignore_index=True)
    g = df.groupby("arm", sort=False)
    out = pd.DataFrame(
        {
            "lowest / paper": g.adjusted.min() / g.paper.first(),
            "median / paper": g.adjusted.median() / g.paper.first(),
            "highest / lowest": g.adjusted.max() / g.adjusted.min(),
            "seeds": g.size(),
            "within": g.met.sum(),
            "skipped batches": g.skipped.sum(),
        }
    )
    out.index.name = "initialisation"
    return out
