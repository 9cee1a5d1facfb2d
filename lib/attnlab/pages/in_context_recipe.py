"""Part III's lab notes on the CPU recipe: the tables and the figure of its runs (issue 35).

What ``book/lab-notes/in-context.md`` shows about how the CPU-scale Table 1 was made, built
from committed results only (nothing is trained or evaluated here):

- :func:`best_cells` and :func:`reduced_figure`: the reduced paper-scale run of
  ``icl_mixed_noise`` against Table 1;
- :func:`guards`: ``icl_stability``'s runs without and with clipping and patience;
- :func:`reruns`: per model of the table, its re-runs at a lower rate and the runs that the
  re-run rule of a single ``icl_mixed_noise --scale cpu`` command would flag;
- :func:`longer` and :func:`longer_table`: the models trained longer against their first runs
  at 6,000 steps (``icl_table_6k``);
- :func:`seed_choice`, :func:`closeness` and :func:`seed_spread`: the seed picked on
  validation, DIAG at CPU scale against the reduced run, and how much the seed matters.

The target is :func:`~attnlab.experiments.in_context.table1.within` (15% of Table 1, or 0.002).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from attnlab.experiments import load_result
from attnlab.experiments.in_context.recipe import per_model
from attnlab.experiments.in_context.reproduce import CPU_TABLE_RUNS
from attnlab.experiments.in_context.table1 import NAMES, TABLE1, TABLE1_NOISE, cells, label, within
from attnlab.plotting import OKABE_ITO

_KEY = ["param", "L", "noise"]


def _check(name: str, result, experiment: str, scale: str | None = None):
    """``result`` must be a committed result of ``experiment`` (at ``scale``)."""
    got = (getattr(result, "name", None), getattr(result, "scale", None))
    if not hasattr(result, "rows") or got[0] != experiment or scale not in (None, got[1]):
        raise ValueError(
            f"{name} must be a result of {experiment}" + (f" at scale {scale!r}" if scale else "")
            + f", got {type(result).__name__} {got}"
        )  # fmt: skip
    return result


def _model(param: str, L: int) -> str:
    return f"{NAMES[param]} {L}L"


def _table_rows(result) -> pd.DataFrame:
    return pd.DataFrame([r for r in result.rows if r["kind"] == "table"])


def best_cells(result) -> pd.DataFrame:
    """Best seed of every model and noise distribution of an ``icl_mixed_noise`` ``result``:
    columns param, L, noise, ours, paper (Table 1's value, NaN where it has no such model)."""
    _check("result", result, "icl_mixed_noise")
    df = _table_rows(result)
    df = df[df.best.astype(bool)].rename(columns={"n_layers": "L", "adjusted": "ours"})
    df["paper"] = [
        TABLE1[(p, L)][TABLE1_NOISE.index(n)] if (p, L) in TABLE1 else np.nan
        for p, L, n in zip(df.param, df.L, df.noise, strict=True)
    ]
    return df[[*_KEY, "ours", "paper"]].reset_index(drop=True)


def reduced_figure(paper_run, base, top: float = 10.0):
    """GD++ and DIAG of the reduced run per σ_max of U(0, σ_max), one line per depth, with
    Table 1 dashed, TunedRR and the Bayes floor of ``base`` (``icl_baselines``); values above
    ``top`` or diverged are crosses at ``top``."""
    cell = best_cells(_check("paper_run", paper_run, "icl_mixed_noise", "paper"))
    _check("base", base, "icl_baselines")
    if not top > 0:
        raise ValueError(f"top must be > 0, got {top!r}")
    smax = np.arange(8)
    fig, axes = plt.subplots(1, 2, figsize=(6.8, 3.6), sharey=True)
    depths = paper_run.config["depths"]
    for ax, param in zip(axes, ("gdpp", "diag"), strict=True):
        for i, L in enumerate(depths):
            c = plt.get_cmap("viridis")(i / len(depths))
            df = cell[(cell.param == param) & (cell.L == L)].set_index("noise")
            ours = df.ours.loc[[f"uniform:{s}" for s in smax]].to_numpy()
            ax.plot(smax, np.clip(ours, 1e-5, top), "o-", color=c, label=f"{L}L")
            off = ~(ours < top)
            ax.plot(smax[off], np.full(off.sum(), top), "x", color="k", ms=8)
            if (param, L) in TABLE1:
                paper = np.clip(TABLE1[(param, L)][:8], 1e-5, None)
                ax.plot(smax, paper, "--", color=c, alpha=0.7)
        for key, name, style in (
            ("tuned", "TunedRR", dict(color="k", ls=":")),
            ("bayes", "Bayes", dict(color=OKABE_ITO["vermillion"])),
        ):
            ax.plot(smax[1:], [r[key] for r in base.rows[1:8]], label=name, **style)
        ax.set(yscale="log", ylim=(1e-5, 2 * top), title=NAMES[param], xlabel=r"$\sigma_{\max}$")
    axes[0].set_ylabel("adjusted loss")
    axes[1].legend(ncol=2, fontsize="small")
    fig.tight_layout()
    return fig


def guards(stab) -> pd.DataFrame:
    """Per arm of ``stab`` (``icl_stability``: ``plain``, ``guarded``): runs, diverged runs,
    skipped updates, cells and cells whose best seed meets the target, cells flagged as
    dominated by a few prompts, and the median of best / paper."""
    st = _table_rows(_check("stab", stab, "icl_stability"))
    st["paper"] = [
        TABLE1[("diag", L)][TABLE1_NOISE.index(n)] for L, n in zip(st.n_layers, st.noise, strict=True)
    ]
    st["met"] = within(st.adjusted, st.paper)
    best = st[st.best.astype(bool)].groupby("arm")
    by = st.groupby("arm")
    out = pd.DataFrame(
        {
            "runs": by.size(),
            "diverged": by.diverged.sum(),
            "skipped updates": by.skipped.sum(),
            "cells": best.size(),
            "cells met": best.met.sum(),
            "outlier cells": best.outliers.sum(),
            "median best / paper": best.apply(lambda d: float(np.median(d.adjusted / d.paper))),
        }
    ).loc[["plain", "guarded"]]
    return out.astype({c: int for c in out.columns[:-1]})


def _flagged(ctab: pd.DataFrame, param: str, L: int, fail_ratio: float) -> pd.Series:
    """Runs of (param, L) more than ``fail_ratio`` above a shallower model of the recipe, for
    the same distribution and seed, or diverged (the re-run rule on the evaluation losses)."""
    own = ctab[(ctab.param == param) & (ctab.n_layers == L)].set_index(["noise", "seed"]).adjusted
    shallow = ctab[(ctab.param == param) & (ctab.n_layers < L)]
    bound = shallow.groupby(["noise", "seed"]).adjusted.min() * fail_ratio
    return ~np.isfinite(own) | (own > bound.reindex(own.index))


def reruns(cpu_run) -> pd.DataFrame:
    """Per model of the CPU table ``cpu_run``: its runs trained again at a lower rate (how many,
    diverged before and after, kept); and, where the shallower models beside it in its run are
    not the recipe's (other depths, rates or steps), those models and how many runs and noise
    distributions the re-run rule would flag beside the recipe's (by evaluation losses)."""
    ccfg = _check("cpu_run", cpu_run, "icl_mixed_noise", "cpu").config
    ctab = _table_rows(cpu_run)
    re = pd.DataFrame(cpu_run.meta["reruns"])
    re["model"] = [_model(p, L) for p, L in zip(re.param, re.n_layers, strict=True)]
    out = re.groupby("model", sort=False).agg(
        **{
            "re-runs": ("kept", "size"),
            "diverged before": ("diverged_before", "sum"),
            "diverged after": ("diverged_after", "sum"),
            "kept": ("kept", "sum"),
        }
    )
    source = {m: run for run, ms in CPU_TABLE_RUNS["replacements"].items() for m in ms}
    flags, configs = {}, {}
    for param, depths in ccfg["depths"].items():
        for L in depths:
            name = source.get((param, L), CPU_TABLE_RUNS["base"])
            if name not in configs:
                configs[name] = load_result(name, "cpu").config
            run_cfg = configs[name]
            beside = [d for d in run_cfg["depths"][param] if d < L]
            same = beside == [d for d in ccfg["depths"][param] if d < L] and all(
                per_model(run_cfg[k], param, d) == per_model(ccfg[k], param, d)
                for k in ("lr", "steps")
                for d in beside
            )
            if not same:
                f = _flagged(ctab, param, L, ccfg["fail_ratio"])
                flags[_model(param, L)] = {
                    "beside in its run": ", ".join(f"{d}L" for d in beside) or "none",
                    "runs flagged": int(f.sum()),
                    "distributions flagged": int(f.groupby(level="noise").any().sum()),
                }
    out = out.join(pd.DataFrame(flags).T, how="outer")
    order = [_model(p, L) for p, ds in ccfg["depths"].items() for L in ds]
    out = out.loc[[m for m in order if m in out.index]]
    out.index.name = "model"
    for c in out.columns[:4]:
        out[c] = out[c].fillna(0).astype(int)
    for c in out.columns[5:]:  # None (shown as a dash) where the company is the recipe's
        out[c] = pd.Series([None if pd.isna(v) else int(v) for v in out[c]], out.index, object)
    out["beside in its run"] = out["beside in its run"].fillna("")
    return out


def longer(cpu_run, six) -> pd.DataFrame:
    """Cells of Table 1 of the models that ``cpu_run`` trains for more steps than its shortest,
    with their best seed in ``six`` (``icl_table_6k``, every model at 6,000 steps): columns
    param, L, noise, ours_6k, met_6k, ours, trimmed, paper, met."""
    ccfg = _check("cpu_run", cpu_run, "icl_mixed_noise", "cpu").config
    _check("six", six, "icl_table_6k")
    steps = {(p, L): per_model(ccfg["steps"], p, L) for p, ds in ccfg["depths"].items() for L in ds}
    models = [m for m, s in steps.items() if s > min(steps.values()) and m in TABLE1]
    both = cells(six).merge(cells(cpu_run), on=_KEY, suffixes=("_6k", ""))
    keep = [(p, L) in models for p, L in zip(both.param, both.L, strict=True)]
    return both[keep].reset_index(drop=True)


def longer_table(cells_long: pd.DataFrame) -> pd.DataFrame:
    """Per model of :func:`longer`'s ``cells_long``: cells met at 6,000 steps, in the table."""
    need = {"param", "L", "met_6k", "met"}
    if not isinstance(cells_long, pd.DataFrame) or not need <= set(cells_long.columns):
        raise ValueError(f"cells_long must be a DataFrame from longer() with columns {sorted(need)}")
    out = cells_long.groupby(["param", "L"], sort=False).agg(
        **{"met at 6,000 steps": ("met_6k", "sum"), "met in the table": ("met", "sum"),
           "cells": ("met", "size")}
    )  # fmt: skip
    out = out.loc[sorted(out.index, key=lambda m: (list(NAMES).index(m[0]), m[1]))]
    out.index = pd.Index([_model(p, L) for p, L in out.index], name="model")
    return out


def cell_names(df: pd.DataFrame) -> str:
    """``'DIAG 5L at U(0, 3), ...'`` for the cells (param, L, noise) of ``df``."""
    if not isinstance(df, pd.DataFrame) or not set(_KEY) <= set(df.columns):
        raise ValueError(f"df must be a DataFrame with columns {_KEY}")
    return ", ".join(
        f"{_model(p, L)} at {label(n)}" for p, L, n in zip(df.param, df.L, df.noise, strict=True)
    )


def seed_choice(cpu_run) -> dict:
    """For the cells of Table 1 whose runs stored a validation loss: how many (``cells``, of
    ``n_models`` models), in how many the seed lowest on validation is not the one lowest on
    evaluation (``differ``), the median and largest ratio of their evaluation losses, and the
    cells met by each choice (``met_e``, ``met_v``)."""
    ctab = _table_rows(_check("cpu_run", cpu_run, "icl_mixed_noise", "cpu"))
    ctab["val"] = pd.to_numeric(ctab.get("adjusted_val"), errors="coerce")
    ok = np.isfinite(ctab.val) & np.array(
        [(p, L) in TABLE1 for p, L in zip(ctab.param, ctab.n_layers, strict=True)]
    )
    has = ctab[ok]
    by = has.groupby(["param", "n_layers", "noise"])
    ev = by.adjusted.min()
    va = has.loc[by.val.idxmin()].set_index(["param", "n_layers", "noise"]).adjusted
    paper = np.array([TABLE1[(p, L)][TABLE1_NOISE.index(n)] for p, L, n in ev.index])
    cost = va / ev
    return {
        "cells": len(ev),
        "n_models": len(ev.index.droplevel("noise").unique()),
        "differ": int((va > ev).sum()),
        "median": float(cost.median()),
        "worse": float(cost.max()),
        "met_e": int(within(ev, paper).sum()),
        "met_v": int(within(va.loc[ev.index], paper).sum()),
    }


def closeness(cpu_run, paper_run) -> pd.DataFrame:
    """DIAG with 3 layers and with 4 to 7: cells, cells met and the median factor
    ``exp(median |log(ours / paper)|)`` of the reduced run ``paper_run`` and of ``cpu_run``."""
    cpu = cells(_check("cpu_run", cpu_run, "icl_mixed_noise", "cpu"))
    red = cells(_check("paper_run", paper_run, "icl_mixed_noise", "paper"))
    both = cpu.merge(red, on=_KEY, suffixes=("_cpu", "_red"))
    both = both[both.param == "diag"]
    rows = {}
    for name, part in (("DIAG 3L", both[both.L == 3]), ("DIAG 4L to 7L", both[both.L >= 4])):
        rows[name] = {"cells": len(part)}
        for k, run in (("red", "reduced"), ("cpu", "CPU")):
            factor = np.exp(np.median(np.abs(np.log(part[f"ours_{k}"] / part.paper_cpu))))
            rows[name][f"met, {run}"] = int(part[f"met_{k}"].sum())
            rows[name][f"factor, {run}"] = float(factor)
    out = pd.DataFrame(rows).T.astype({"cells": int, "met, reduced": int, "met, CPU": int})
    out.index.name = "model"
    return out


def seed_spread(cpu_run) -> dict:
    """Deep DIAG and FULL cells (4 to 7 layers) of ``cpu_run``: how many, the median and the
    count above 2 of worst / best seed, and the cells met by the best of every seed, of seeds
    0 to 2 and by seed 0 alone."""
    ctab = _table_rows(_check("cpu_run", cpu_run, "icl_mixed_noise", "cpu"))
    deep = ctab[(ctab.param != "gdpp") & (ctab.n_layers >= 4)]
    deep = deep[[(p, L) in TABLE1 for p, L in zip(deep.param, deep.n_layers, strict=True)]]
    cell = ["param", "n_layers", "noise"]
    spread = deep.groupby(cell).adjusted.max() / deep.groupby(cell).adjusted.min()

    def met(seeds):
        best = deep[deep.seed.isin(seeds)].groupby(cell).adjusted.min()
        paper = [TABLE1[(p, L)][TABLE1_NOISE.index(n)] for p, L, n in best.index]
        return int(within(best.to_numpy(), np.array(paper)).sum())

    return {
        "cells": len(spread),
        "median": float(spread.median()),
        "over2": int((spread > 2).sum()),
        "met_best": met(range(int(cpu_run.config["n_seeds"]))),
        "met_three": met([0, 1, 2]),
        "met_seed0": met([0]),
    }
