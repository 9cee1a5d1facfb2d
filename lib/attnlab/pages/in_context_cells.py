"""Part III's lab notes: 7-layer FULL's rate, length and schedule, the draw of the evaluation
prompts (``icl_eval_sets``), every miss of the CPU table (``icl_scoring``), ``icl_table_6k`` again;
and chapter 04's Table 1, held out and beside the paper's (:func:`results_table`).

Reads committed results only (:func:`attnlab.experiments.load_result`), trains nothing. Each function
takes the CPU table (``load_result("icl_mixed_noise", "cpu")``) and returns a namespace: ``table``
(the DataFrame shown), ``glue`` (the numbers the prose cites), the values the checks assert on."""

from functools import cache
from types import SimpleNamespace

import numpy as np
import pandas as pd

from attnlab import tails
from attnlab.experiments import load_result
from attnlab.experiments.in_context.lr_sweep import lr_choice
from attnlab.experiments.in_context.recipe import per_model
from attnlab.experiments.in_context.table1 import (
    NAMES,
    TABLE1,
    TABLE1_BASELINES,
    TABLE1_NOISE,
    cells,
    label,
    target_halfwidth,
    within,
)

KEY, LOSSES = ["param", "n_layers", "noise", "seed"], ["adjusted", "adjusted_trimmed"]
AGAIN = {  # the runs that kept the table's weights: the run its rows come from
    "icl_table_diag3": ("icl_table_rates", "diag", 3),
    "icl_table_full3": ("icl_table_long", "full", 3),
    "icl_table_full7_weights": ("icl_table_full7", "full", 7),
}
MODELS = ["DIAG 3L", "FULL 3L", "FULL 7L"]
PAPER7 = dict(zip(TABLE1_NOISE, TABLE1[("full", 7)], strict=True))  # Table 1's 7-layer FULL


@cache
def _result(name: str):
    return load_result(name, "cpu")


def _rows(name_or_result, **where) -> pd.DataFrame:
    res = _result(name_or_result) if isinstance(name_or_result, str) else name_or_result
    df = pd.DataFrame([r for r in res.rows if r["kind"] == "table"])
    for k, v in where.items():
        df = df[df[k] == v]
    return df.set_index(KEY).sort_index()


def _start(cpu_run):
    if not (hasattr(cpu_run, "rows") and hasattr(cpu_run, "config")):
        raise ValueError(f"cpu_run must be the icl_mixed_noise result, got {type(cpu_run).__name__}")
    return cells(cpu_run), per_model(cpu_run.config["lr"], "full", 7)


def _span(glue: dict, **values) -> None:
    for name, v in values.items():
        glue[f"{name}_lo"], glue[f"{name}_hi"] = np.min(v).item(), np.max(v).item()


def full7_rates(cpu_run) -> SimpleNamespace:
    """7-layer FULL by rate over Table 1: ``icl_full7_rates`` (6,000 steps, best of three seeds'
    trimmed mean) and ``icl_full7_sweep`` (48,000, cosine, seed 0's validation mean)."""
    _, rate7 = _start(cpu_run)
    fr, sw = (pd.DataFrame(_result(n).rows) for n in ("icl_full7_rates", "icl_full7_sweep"))
    fr["ratio"] = fr.adjusted_trimmed / fr.noise.map(PAPER7)
    sw["ratio"] = sw.adjusted_val / sw.noise.map(PAPER7)
    rows = {}
    for df, name in ((fr, "6,000"), (sw, "48,000, cosine")):
        for a, grp in df.groupby("lr"):
            row = grp.groupby("noise").ratio.min().rename(label).to_dict()
            rows[f"{name}, {a:.0e}"] = row | {"diverged": grp.diverged.sum()}
    table = pd.DataFrame.from_dict(rows, "index").rename_axis("steps, rate")
    ns = SimpleNamespace(table=table, glue=(g := {}))
    low, mid, fast = (fr[fr.lr == r] for r in sorted(fr.lr.unique()))
    ns.low, ns.mid = (d.groupby("noise").ratio.min() for d in (low, mid))
    best = fr.groupby(["noise", "lr"]).adjusted.min().reset_index()
    ns.fast_diverged, ns.met = fast.diverged, within(best.adjusted, best.noise.map(PAPER7))
    lr0 = _result("icl_full7_sweep").config["lr"]
    choice = lr_choice(sw, current=lr0, rerun_lr_factor=cpu_run.config["rerun_lr_factor"]).loc[("full", 7)]
    ns.chosen, ns.current, ns.rate = choice.chosen, choice.current, rate7
    ns.sweep_fast_diverged = sw[sw.lr == sw.lr.max()].diverged
    _span(g, f7_mid=ns.mid, f7_low=ns.low)
    g["f7_div_mid"], g["f7_out_mid"] = int(mid.diverged.sum()), int(mid.outliers.sum())
    g["f7sw_gain"] = float(choice[f"score@{rate7 / 3:.3g}"] / choice[f"score@{rate7:.3g}"])
    return ns


def full7_steps(cpu_run) -> SimpleNamespace:
    """7-layer FULL's best seed over Table 1 by length: ``icl_table_6k``, ``icl_full7_long``,
    ``icl_table_full7`` (the table's) and, where the table misses, ``icl_full7_float64``."""
    cpu, rate7 = _start(cpu_run)
    short, long_, t7 = (
        c[(c.param == "full") & (c.L == 7)].set_index("noise").reindex(TABLE1_NOISE)
        for c in (cells(_result("icl_table_6k")), cells(_result("icl_full7_long")), cpu)
    )
    lrows, t7rows = _rows("icl_full7_long"), _rows("icl_table_full7")
    f64 = pd.DataFrame(_result("icl_full7_float64").rows)
    f64t, curves = f64[f64.kind == "table"], f64[f64.kind == "curve"].astype({"train_loss": float})
    f64best = f64t[f64t.best.astype(bool)].set_index("noise").adjusted_trimmed
    seeds = t7rows[t7rows.index.get_level_values("seed").isin(set(f64t.seed))]
    seeds = seeds[seeds.index.get_level_values("noise").isin(f64best.index)]
    best32 = seeds.loc[seeds.groupby("noise").adjusted.idxmin()].droplevel([0, 1, 3]).adjusted_trimmed
    cols = ["6,000", "24,000", "48,000, cosine", "trimmed", "float64, trimmed"]
    vals = [short.ours, long_.ours, t7.ours, t7.trimmed, f64best]
    shown = pd.DataFrame({c: v / t7.paper for c, v in zip(cols, vals, strict=True)}).reindex(TABLE1_NOISE)
    shown.index = pd.Index([label(n) for n in shown.index], name="noise")
    shown["met"] = np.where(t7.met, "yes", "no")
    ns = SimpleNamespace(table=shown, short=short, long=long_, t7=t7, glue=(g := {}))
    ok64 = within(f64best, t7.paper.loc[f64best.index])
    ns.f64_diverged, ns.f64_peak = f64t.diverged, curves.groupby(["noise", "seed"]).train_loss.max()
    finite = np.isfinite(lrows.adjusted)
    _span(g, fl_miss=(long_.ours / long_.paper)[~long_.met], t7_miss=(t7.ours / t7.paper)[~t7.met])
    _span(g, fs=(short.ours / short.paper).drop("uniform:0"))
    g["fl_met"], g["t7_met"], g["fl_runs"] = int(long_.met.sum()), int(t7.met.sum()), len(lrows)
    g["fl_inf"], g["fl_out"] = int((~finite).sum()), int((lrows.outliers & finite).sum())
    g["t7_gain_hi"] = float((long_.ours / t7.ours).drop("uniform:0").max())
    g["t7_reruns"], g["fl_reruns"] = int((t7rows.lr < rate7).sum()), int((lrows.lr < rate7).sum())
    g["f7f_runs"], g["f7f_ok"], g["f7f_n"] = len(f64t), int(ok64.sum()), len(ok64)
    g["f7f_ok32"] = int(within(best32, t7.paper.loc[best32.index]).sum())
    g["f7f_rerun32"] = int((seeds.lr < rate7).sum())
    return ns


def full7_schedule(cpu_run) -> SimpleNamespace:
    """The trimmed mean of 7-layer FULL per cell missed at 24,000 steps and seed, by schedule and
    length: ``icl_full7_long``, ``icl_full7_longer``, ``icl_full7_schedule``."""
    _, rate7 = _start(cpu_run)
    fsd = pd.DataFrame(_result("icl_full7_schedule").rows)
    cos24, cos48 = (fsd[fsd.arm == a].set_index(["noise", "seed"]) for a in sorted(set(fsd.arm)))
    idx = cos48.index
    cos24, cos48 = cos24.adjusted_trimmed.reindex(idx), cos48.assign(t=cos48.adjusted_trimmed)
    lrows = _rows("icl_full7_long").droplevel(["param", "n_layers"]).reindex(idx)
    f8 = pd.DataFrame(_result("icl_full7_longer").rows).set_index("noise")
    wsd24 = lrows.adjusted_trimmed.where(lrows.lr == rate7)
    wsd48 = f8.adjusted_trimmed.reindex(idx, level="noise").where(idx.get_level_values("seed") == 1)
    cols = ["stable-decay, 24,000", "stable-decay, 48,000", "cosine, 24,000", "cosine, 48,000"]
    shown = pd.DataFrame(dict(zip(cols, [wsd24, wsd48, cos24, cos48.t], strict=True)))
    shown["paper"] = idx.get_level_values("noise").map(PAPER7)
    shown.index = pd.Index([f"{label(n)}, seed {s}" for n, s in idx], name="noise, seed")
    s1 = lrows.xs(1, level="seed").loc[f8.index]
    same = np.isfinite(s1.adjusted) & np.isfinite(f8.adjusted) & (s1.lr == rate7)
    pair, short = (np.isfinite(wsd24) & np.isfinite(c) for c in (cos48.t, cos24))
    ns = SimpleNamespace(table=shown, longer_diverged=f8.diverged, glue=(g := {}))
    ns.longer_change = (f8.adjusted / s1.adjusted)[same]
    ns.cos_diverged1, ns.cos_gain = cos48.xs(1, level="seed").diverged, (wsd24 / cos48.t)[pair]
    g["f8_div"], g["f8_cells"], g["f8_gain"] = int(f8.diverged.sum()), len(f8), float(ns.longer_change.min())
    g["fsch_div1"], g["fsch_pairs"] = int(ns.cos_diverged1.sum()), int(pair.sum())
    g["fsch_gain_lo"], g["fsch_short_pairs"] = float((ns.cos_gain - 1).min() * 100), int(short.sum())
    g["fsch_short_lower"] = int((cos24 < wsd24)[short].sum())
    return ns


def eval_sets(cpu_run) -> SimpleNamespace:
    """``icl_eval_sets``: the table's 3-layer DIAG and FULL and 7-layer FULL, best of five seeds
    on the table's prompts (set 0) and on fresh sets, over Table 1."""
    cpu, _ = _start(cpu_run)
    es = pd.DataFrame(_result("icl_eval_sets").rows)
    stored = {"icl_trained_models": _rows("icl_trained_models")}
    ns = SimpleNamespace(twin_diff=0, set0_rel=0.0, set0_skipped=0, glue=(g := {}))
    for name, (origin, p, L) in AGAIN.items():
        rows = _rows(name)
        first = _rows(origin, param=p).loc[rows.index]
        ns.twin_diff += int(((rows.adjusted != first.adjusted) | (rows.best != first.best)).sum())
        stored[name] = _rows(cpu_run, param=p, n_layers=L)
    for source, want in stored.items():
        got = es[(es.source == source) & (es.set == 0)].set_index(KEY).sort_index()
        want = want.loc[got.index]
        ok = ~want.diverged.astype(bool)  # a diverged model's stored loss is inf
        ns.set0_skipped = max(ns.set0_skipped, int((~ok).sum()))
        rel = (got.loc[ok, LOSSES] / want.loc[ok, LOSSES] - 1).abs().to_numpy().max()
        ns.set0_rel = max(ns.set0_rel, float(rel))
    t3 = es[es.source.isin(list(AGAIN))].copy()
    t3["model"] = [f"{NAMES[p]} {L}L" for p, L in zip(t3.param, t3.n_layers, strict=True)]
    t3["paper"] = [TABLE1[(p, L)][TABLE1_NOISE.index(n)] for p, L, n in t3[KEY[:3]].itertuples(False)]
    cell = ["model", "noise", "set"]
    pick = t3.loc[t3.groupby(cell).adjusted.idxmin()].set_index(cell)
    order = pd.MultiIndex.from_product([MODELS, TABLE1_NOISE], names=["model", "noise"])
    ratio = (pick.adjusted / pick.paper).unstack("set").loc[order]
    fresh, paper = ratio.drop(columns=0), pick.paper.unstack("set")[0].loc[order]
    met = pd.Series(within(pick.adjusted, pick.paper), pick.index).unstack("set").loc[order]
    ns.met_sets, ns.n_fresh = met.groupby(level="model").sum(), len(fresh.columns)
    stats = [paper, ratio[0], fresh.min(axis=1), fresh.median(axis=1), fresh.max(axis=1)]
    cols = ["Table 1", "set 0 (the table)", "fresh: lowest", "fresh: median", "fresh: highest"]
    shown = pd.DataFrame({c: v.to_numpy() for c, v in zip(cols, stats, strict=True)}, index=order)
    shown["fresh sets met"] = met[fresh.columns].sum(axis=1).to_numpy()
    shown.insert(0, "noise", [label(n) for n in order.get_level_values("noise")])
    ns.table = shown.droplevel("noise")
    f7_met, f7_paper = met.loc["FULL 7L"], paper.loc["FULL 7L"]
    f7_big = ratio.loc["FULL 7L"].loc[f7_paper.index[f7_paper >= 0.01]]
    ns.f7_fresh_in = f7_met.loc[~f7_met[0], fresh.columns].sum(axis=1)
    ns.f7_top0, ns.n_f7_big = int((f7_big.idxmax(axis=1) == 0).sum()), len(f7_big)
    worst = pick.reset_index()  # the best of five per model, noise and set
    ns.heavy = (worst.worst_share > 0.05).groupby(worst.set).sum()
    ns.common = worst.groupby("set").worst_index.agg(lambda v: v.value_counts().iloc[:3].sum())
    f0 = t3.query("model == 'FULL 3L' and noise == 'uniform:0' and set == 0")
    ns.f0_trimmed = f0.adjusted_trimmed / f0.paper
    ns.f0_miss = int((~met.loc[("FULL 3L", "uniform:0"), fresh.columns]).sum())
    ns.d3_picked, ns.d3_other = {}, {}  # |trimmed / paper - 1| of the picked seed, of the best
    for spec in ("uniform:6", "categorical:1,3,5"):
        on0 = t3[(t3.model == "DIAG 3L") & (t3.set == 0) & (t3.noise == spec)]
        dev = (on0.adjusted_trimmed / on0.paper - 1).abs()
        ns.d3_picked[spec], ns.d3_other[spec] = float(dev.loc[on0.adjusted.idxmin()]), float(dev.min())
    agg = es.assign(ok=np.isfinite(es.adjusted)).groupby(["source", *KEY])
    agg = agg.agg(ok=("ok", "sum"), m=("adjusted", "max"), t=("adjusted_trimmed", "max"))
    low = es.groupby(["source", *KEY])[LOSSES].min()
    keep = agg.ok == es.set.nunique()
    ns.spread = pd.DataFrame({"mean": agg.m / low.adjusted, "trimmed": agg.t / low.adjusted_trimmed})[keep]
    names = [f"{NAMES[p]} {L}L" for p, L in zip(cpu.param, cpu.L, strict=True)]
    ns.in_table = cpu.met.groupby(names).sum().loc[MODELS]
    g["es_sets"], g["es_models"] = ns.n_fresh, len(ns.spread)
    for m, tag in zip(MODELS, ("es", "es_f", "es_f7"), strict=True):
        g[f"{tag}_met0"] = int(ns.met_sets.loc[m, 0])
        _span(g, **{f"{tag}_met": ns.met_sets.loc[m].drop(0)})
    g["es_heavy0"], g["es_heavy_hi"] = int(ns.heavy[0]), int(ns.heavy.drop(0).max())
    g["es_trim_max"], g["es_mean_max"] = float(ns.spread.trimmed.max()), float(ns.spread["mean"].max())
    return ns


def every_miss(cpu_run) -> SimpleNamespace:
    """Every miss of the CPU table: its held-out verdict by chapter 04's rule (``icl_scoring``)
    and the cause shown; ``gdpp``: GD++'s best depth per noise, ``deep``: its 4, 5, 7 layers at
    σ_max = 1."""
    cpu, _ = _start(cpu_run)
    sc = pd.DataFrame(_result("icl_scoring").rows).set_index(["param", "n_layers", "noise"])
    sc = sc.assign(**{c: pd.to_numeric(sc[c], errors="coerce") for c in ("value", "value_se")})
    sc["met_table"] = sc["met_table"].astype(bool)
    d7f = _rows("icl_diag7_float64", arm="float64").xs(("diag", 7, "categorical:1,3"), level=[0, 1, 2])
    ratio13 = float(d7f.adjusted.min() / TABLE1[("diag", 7)][-2])  # Table 1 at {1, 3}
    d7t = _rows("icl_table_diag7_float64", best=True, noise="categorical:1,3").adjusted.item()
    g1 = _rows(cpu_run, param="gdpp", noise="uniform:1")
    deep = g1[g1.best.astype(bool)].droplevel(["param", "noise", "seed"]).adjusted.loc[[4, 5, 7]]
    rows, misses = [], cpu[~cpu.met]
    for r in misses.itertuples():
        s = sc.loc[(r.param, r.L, r.noise)]
        held = s.scored == "held-out"
        if held:
            why = f"{s.verdict} on held-out prompts"
        elif (r.param, r.L, r.noise) == ("diag", 7, "categorical:1,3") and not within(d7t, r.paper):
            why = f"too few steps; float32 overflows (float64, 4× steps: {ratio13:.2f})"
        elif r.param == "gdpp" and r.ours < r.paper and abs(r.ours / deep.mean() - 1) < 0.02:
            why = "below Table 1, at the deeper models' level"
        else:
            why = "not found"
        out = (s.value / r.paper, s.by) if held else (np.nan, "–")
        name, order = f"{NAMES[r.param]} {r.L}L", (r.param, r.L, TABLE1_NOISE.index(r.noise))
        rows.append((name, label(r.noise), r.ours / r.paper, r.trimmed / r.paper, *out, why, order))
    cols = ["model", "noise", "ours / paper", "trimmed / paper", "held out / paper", "statistic"]
    cols.append("shown cause")
    why = pd.DataFrame(rows, columns=[*cols, "order"]).sort_values("order").drop(columns="order")
    scored = sc[sc.scored == "held-out"]
    on = scored[scored.index.isin(list(zip(misses.param, misses.L, misses.noise, strict=True)))]
    cause = why["shown cause"]
    g47 = np.array([TABLE1[("gdpp", L)][2:8] for L in (4, 7)])  # Table 1's GD++, σ_max = 2..7
    ns = SimpleNamespace(table=why.set_index("model"), held=on, deep=deep, glue=(g := {}))
    ns.new_miss = scored[scored.met_table & (scored.verdict != "met")]
    ns.gdpp = cpu[cpu.param == "gdpp"].groupby("noise").ours.min()
    ns.g1_paper, ns.paper_gdpp = {L: TABLE1[("gdpp", L)][1] for L in (4, 7)}, g47.max(0) / g47.min(0)
    again = [
        tails.verdict(v, se, p, float(target_halfwidth(p)))
        for v, se, p in zip(on.value, on.value_se, on.paper, strict=True)
    ]
    ns.held_agrees = again == on.verdict.tolist()
    g["why_n"], g["why_n_test"] = len(why), int(_result("icl_scoring").config["n_test"])
    g["why_held"], g["why_new_miss"] = len(on), len(ns.new_miss)
    for key, start in (("held_met", "met on"), ("held_missed", "missed on"), ("undecided", "undecided"),
                       ("f32", "too"), ("below", "below")):  # fmt: skip
        g[f"why_{key}"] = int(cause.str.startswith(start).sum())
    g["g1_level"], g["g1_ratio4"] = float(deep.mean()), float(deep[4] / ns.g1_paper[4])
    return ns


def retraining(cpu_run) -> SimpleNamespace:
    """``icl_table_6k_again`` against ``icl_table_6k`` per model: each run's relative change,
    runs diverged or re-run once, and cells met by the best of five (models of Table 1)."""
    cpu, _ = _start(cpu_run)
    again, new = _result("icl_table_6k_again"), _rows("icl_table_6k_again")
    old = _rows("icl_table_6k").loc[new.index]
    a, b = new.adjusted.astype(float), old.adjusted.astype(float)
    change = (a / b - 1).abs().fillna(0.0)  # 0 where diverged both times, inf where once:
    change = change.where(np.isfinite(a) == np.isfinite(b), np.inf)
    rerun = pd.Series(~np.isclose(new.lr.astype(float), old.lr.astype(float)), new.index)
    once = new.diverged.astype(bool) != old.diverged.astype(bool)
    first, second = (df.groupby(level=KEY[:3]).adjusted.min() for df in (old, new))
    in_t1 = [k[:2] in TABLE1 for k in first.index]
    paper = [TABLE1.get(k[:2], [1.0] * 10)[TABLE1_NOISE.index(k[2])] for k in first.index]
    met1, met2 = (pd.Series(within(v, paper), v.index)[in_t1] for v in (first, second))
    sums = [s.groupby(level=KEY[:2]).sum() for s in (change > 1e-3, once, rerun, met1, met2)]
    stats = [change.groupby(level=KEY[:2]).median(), change.groupby(level=KEY[:2]).max(), *sums]
    cols = ["median change", "largest change", "runs > 0.1% apart", "diverged once", "re-run once"]
    redo = pd.DataFrame(dict(zip([*cols, "met, first", "met, again"], stats, strict=True)))
    redo.index = pd.Index([f"{NAMES[p]} {L}L" for p, L in redo.index], name="model")
    for c in ("met, first", "met, again"):  # "–": not in Table 1
        redo[c] = [f"{v:.0f}" if v == v else "–" for v in redo[c]]
    kept = [("diag", 7), ("gdpp", 7)]  # the table's cells from this run
    ours = pd.concat([cpu[(cpu.param == p) & (cpu.L == L)].ours for p, L in kept])
    firsts = pd.concat([first.loc[k] for k in kept])
    ns = SimpleNamespace(table=redo, n_noise=len(again.config["noise"]), glue=(g := {}))
    ns.shallow = [m for m in redo.index if m.endswith((" 1L", " 2L"))]
    ns.table_is_first = bool((np.sort(ours.to_numpy()) == np.sort(firsts.to_numpy())).all())
    d7 = (second.loc[("diag", 7)] / first.loc[("diag", 7)] - 1).abs()
    g["ag_shallow_max"] = float(redo.loc[ns.shallow, "largest change"].max())
    g["ag_runs"] = len(change) // len(redo)
    g["ag_d7_median"], g["ag_d7_best_max"] = float(redo.loc["DIAG 7L", "median change"]), float(d7.max())
    for m in ("DIAG 3L", "DIAG 7L", "GD++ 7L"):
        tag = "ag_" + m.replace("+", "p").replace(" ", "_")
        g[f"{tag}_n"] = int(redo.loc[m, "runs > 0.1% apart"])
        g[f"{tag}_met1"], g[f"{tag}_met2"] = int(redo.loc[m, "met, first"]), int(redo.loc[m, "met, again"])
    return ns


#: The mark after a model's cell in :func:`results_table`, by held-out verdict.
MARKS = {"met": "✓", "missed": "✗", "undecided": "?", "not scored": "·", "no model": ""}
BASELINES = {"const": "ConstRR", "ada": "AdaRR", "tuned": "TunedRR"}


def _num(x) -> str:
    """Three significant digits; "–" for none; "0" below 1e-15 (a baseline's rounding error)."""
    return "–" if x is None or x != x else ("0" if abs(x) < 1e-15 else f"{x:.3g}")


def results_table(cpu_run, base=None) -> SimpleNamespace:
    """Chapter 04's Table 1: a row per baseline (``base``: the ``icl_baselines`` result; ConstRR,
    AdaRR, TunedRR against Table 1, then the Bayes-optimal predictor, which Table 1 lacks) and per
    trained model and depth; a column per noise distribution. A model's cell is its held-out value
    beside the paper's and a mark (:data:`MARKS`), from ``icl_scoring``: the seed picked on the
    validation prompts and, where its weights are stored, scored on unseen prompts by chapter 04's
    rule (``ᵗ``: by the trimmed mean); where they are not, that seed's mean on the evaluation
    prompts, not scored. 7-layer DIAG and GD++ kept no validation losses: "no model".

    Returns ``table`` (the cells as text), ``value``, ``paper`` and ``verdict`` (one per model and
    noise: met, missed, undecided, not scored, no model), ``in_target`` (the value within the
    target, whatever the verdict) and ``glue``."""
    cpu, _ = _start(cpu_run)
    sc = pd.DataFrame(_result("icl_scoring").rows)
    if len(sc) != len(cpu):
        raise ValueError(f"icl_scoring has {len(sc)} cells, the CPU table {len(cpu)}")
    order = [(p, L) for p in NAMES for L in cpu_run.config["depths"][p] if (p, L) in TABLE1]
    sc["model"] = [f"{NAMES[p]} {L}L" for p, L in zip(sc.param, sc.n_layers, strict=True)]
    held = sc.scored == "held-out"
    num = {c: pd.to_numeric(sc[c], errors="coerce") for c in ("value", "evaluation")}
    sc["shown"] = np.where(held, num["value"], num["evaluation"])
    sc["verdict"] = np.where(sc.scored == "none", "no model", sc.verdict)
    sc["trim"] = held & (sc.by == "trimmed")
    rows = [f"{NAMES[p]} {L}L" for p, L in order]
    grid = {c: sc.pivot(index="model", columns="noise", values=c).loc[rows, TABLE1_NOISE]
            for c in ("shown", "paper", "verdict", "trim")}  # fmt: skip
    text = {}
    for m in rows:
        cols = (grid[c].loc[m] for c in ("shown", "paper", "verdict", "trim"))
        text[m] = [
            f"{_num(v)}{'ᵗ' if t else ''} / {_num(p)} {MARKS[k]}".rstrip()
            for v, p, k, t in zip(*cols, strict=True)
        ]
    head = {}
    if base is not None:
        by_noise = {r["noise"]: r for r in base.rows}
        if sorted(by_noise) != sorted(TABLE1_NOISE):
            raise ValueError(f"base must be the icl_baselines result, got noise {sorted(by_noise)}")
        for k, name in BASELINES.items():
            pairs = zip(TABLE1_NOISE, TABLE1_BASELINES[k], strict=True)
            head[name] = [f"{_num(by_noise[n][k])} / {_num(p)}" for n, p in pairs]
        head["Bayes"] = [f"{_num(by_noise[n]['bayes'])} / –" for n in TABLE1_NOISE]
    table = pd.DataFrame.from_dict(head | text, "index", columns=[label(n) for n in TABLE1_NOISE])
    table.index.name = "model"
    value, paper = grid["shown"].astype(float), grid["paper"].astype(float)
    verdict = grid["verdict"].astype(str)
    ok = within(value, paper) & np.isfinite(value)
    in_target = pd.DataFrame(ok, index=value.index, columns=value.columns)
    counts = verdict.stack().value_counts()
    ns = SimpleNamespace(table=table, value=value, paper=paper, verdict=verdict, in_target=in_target)
    ns.glue = g = {f"rt_{k.replace(' ', '_')}": int(counts.get(k, 0)) for k in MARKS}
    g["rt_models"], g["rt_cells"] = len(rows), int(verdict.size)
    g["rt_not_trained"] = len([k for k in TABLE1 if k not in order])
    return ns


def ratio_map(rt, ax):
    """Draw :func:`results_table`'s cells on ``ax`` as held-out value over the paper's, on a
    log colour scale clipped at 1/10 and 10: a solid box round every met cell, a dashed one round
    a cell not scored but within the target, ✗ / ? after a missed / undecided ratio, grey where
    there is no model. Returns the image (for a colour bar)."""
    import matplotlib.pyplot as plt

    ratio = (rt.value / rt.paper).to_numpy()
    verdict, near = rt.verdict.to_numpy(), rt.in_target.to_numpy()
    cmap = plt.get_cmap("PuOr_r").with_extremes(bad="0.8")
    im = ax.imshow(np.clip(np.log10(ratio), -1, 1), cmap=cmap, vmin=-1, vmax=1)
    for (i, j), r in np.ndenumerate(ratio):
        if verdict[i, j] == "no model":
            continue
        text = f"{r:.2f}" if 0.01 <= r < 10 else f"{r:.0e}".replace("+0", "")
        text += {"missed": "✗", "undecided": "?"}.get(verdict[i, j], "")
        color = "w" if abs(np.log10(r)) > 0.6 else "k"  # white text on the darker cells
        ax.text(j, i, text, ha="center", va="center", fontsize=7.5, color=color)
        met = verdict[i, j] == "met"
        if met or (near[i, j] and verdict[i, j] == "not scored"):
            box = plt.Rectangle((j - 0.44, i - 0.44), 0.88, 0.88, fill=False, ec="k")
            ax.add_patch(box)
            box.set(lw=1.8 if met else 1.0, ls="-" if met else "--")
    ax.set_xticks(range(ratio.shape[1]), [label(s) for s in rt.value.columns], rotation=45)
    ax.set_yticks(range(ratio.shape[0]), rt.value.index)
    ax.set_xlabel("noise distribution")
    ax.grid(False)  # the boxes, not a grid, mark the cells
    return im
