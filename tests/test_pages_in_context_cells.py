"""The lab notes' cells of Part III, pinned on the committed results."""

from types import SimpleNamespace

import numpy as np
import pytest

from attnlab.experiments import load_result
from attnlab.pages import in_context_cells as nc


def plain(glue):
    """Glued values are Python numbers or strings: myst-nb formats a glued value from its repr,
    and a numpy scalar's repr (``np.float64(...)``) takes no format spec."""
    assert all(type(v) in (int, float, str) for v in glue.values()), glue
    return glue


@pytest.fixture(scope="module")
def cpu_run():
    return load_result("icl_mixed_noise", "cpu")


def test_full7_rates_and_steps(cpu_run):
    rates = nc.full7_rates(cpu_run)
    assert rates.chosen == rates.current == rates.rate == 3e-4
    assert plain(rates.glue)["f7_div_mid"] == 1 and rates.glue["f7_out_mid"] == 3
    assert np.isclose(rates.glue["f7_mid_hi"], 3.4733, rtol=1e-4)
    steps = nc.full7_steps(cpu_run)
    assert list(steps.table.index[:2]) == ["U(0, 0)", "U(0, 1)"]
    assert plain(steps.glue)["fl_met"] == 5 and steps.glue["t7_met"] == 6
    assert steps.glue["f7f_ok"] == 2 and steps.glue["f7f_n"] == 4


def test_full7_schedule(cpu_run):
    sched = nc.full7_schedule(cpu_run)
    assert plain(sched.glue)["f8_div"] == 3 and sched.glue["fsch_pairs"] == 7
    assert np.isclose(sched.glue["f8_gain"], 0.98744, rtol=1e-4)


def test_eval_sets_every_miss_retraining(cpu_run):
    sets = nc.eval_sets(cpu_run)
    assert sets.twin_diff == 0 and list(sets.met_sets[0]) == [3, 7, 6]
    assert plain(sets.glue)["es_heavy0"] == 11 and len(sets.table) == 30
    why = nc.every_miss(cpu_run)
    assert plain(why.glue)["why_n"] == 16 and why.glue["why_held_met"] == 11
    assert (why.glue["why_held_missed"], why.glue["why_undecided"], why.glue["why_new_miss"]) == (1, 2, 0)
    assert why.held_agrees
    assert np.isclose(why.glue["g1_ratio4"], 0.59901, rtol=1e-4)
    again = nc.retraining(cpu_run)
    assert plain(again.glue)["ag_DIAG_7L_n"] == 40 and again.table_is_first
    assert (again.glue["ag_DIAG_7L_met1"], again.glue["ag_DIAG_7L_met2"]) == (9, 7)


@pytest.mark.parametrize(
    "fn", [nc.full7_rates, nc.full7_steps, nc.full7_schedule, nc.eval_sets, nc.every_miss, nc.retraining]
)
def test_bad_cpu_run_raises(fn):
    with pytest.raises(ValueError, match="cpu_run"):
        fn("icl_mixed_noise")


def test_eval_sets_table_shows_the_median_of_the_fresh_sets(cpu_run):
    """The 'fresh: median' column is the median of the ten fresh sets' ratios, pinned (on DIAG 3L
    at sigma_max 0 their mean, pulled up by one set at 4.5x, is 1.56)."""
    table = nc.eval_sets(cpu_run).table
    got = table["fresh: median"].iloc[:3].to_numpy()
    np.testing.assert_allclose(got, [0.8994783827777131, 0.9535935329106386, 0.9527530565534795], rtol=1e-9)
    assert (table["fresh: lowest"] <= table["fresh: median"]).all()
    assert (table["fresh: median"] <= table["fresh: highest"]).all()


def test_results_table_is_table_1_held_out_beside_the_paper(cpu_run):
    """Chapter 04's headline table: baselines first, then the 15 trained models (Table 1's FULL 2L
    and 5L were not trained), a column per noise distribution, held-out value / paper and a mark."""
    from attnlab.experiments.in_context.table1 import TABLE1_NOISE

    fake = SimpleNamespace(
        rows=[{"noise": n, "const": 0.5, "ada": 0.25, "tuned": 0.125, "bayes": 0.1} for n in TABLE1_NOISE]
    )
    rt = nc.results_table(cpu_run, fake)
    assert rt.table.shape == (4 + 15, 10) and rt.verdict.shape == (15, 10)
    assert list(rt.table.index[:5]) == ["ConstRR", "AdaRR", "TunedRR", "Bayes", "GD++ 1L"]
    assert "FULL 2L" not in rt.table.index and "FULL 5L" not in rt.table.index
    assert rt.table.loc["TunedRR", "U(0, 7)"] == "0.125 / 0.068"
    assert rt.table.loc["Bayes", "U(0, 1)"] == "0.1 / –"
    # held-out cells: the value of the seed picked on validation prompts, on unseen prompts
    assert rt.table.loc["DIAG 3L", "U(0, 0)"] == "0.0101ᵗ / 0.013 ✗"
    assert rt.table.loc["FULL 7L", "U(0, 7)"] == "0.0583 / 0.057 ✓"
    assert rt.table.loc["FULL 7L", "{1, 3}"] == "0.00923ᵗ / 0.01 ?"
    assert rt.table.loc["GD++ 4L", "U(0, 1)"] == "0.00839 / 0.014 ·"  # not scored
    assert rt.table.loc["DIAG 7L", "U(0, 5)"] == "– / 0.047"  # no model
    np.testing.assert_allclose(rt.value.loc["FULL 3L", "uniform:3"], 0.0723, rtol=2e-3)
    assert plain(rt.glue) == {
        "rt_met": 57, "rt_missed": 1, "rt_undecided": 2, "rt_not_scored": 70, "rt_no_model": 20,
        "rt_models": 15, "rt_cells": 150, "rt_not_trained": 2,
    }  # fmt: skip
    assert (rt.in_target[rt.verdict == "met"].fillna(True)).all().all()
    assert rt.value[rt.verdict == "no model"].isna().all().all()


def test_results_table_refuses_other_results(cpu_run):
    with pytest.raises(ValueError, match="cpu_run"):
        nc.results_table("icl_mixed_noise")
    with pytest.raises(ValueError, match="icl_baselines"):
        nc.results_table(cpu_run, SimpleNamespace(rows=[{"noise": "uniform:0"}]))


def test_ratio_map_boxes_every_met_cell(cpu_run):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rt = nc.results_table(cpu_run)
    fig, ax = plt.subplots()
    nc.ratio_map(rt, ax)
    solid = [p for p in ax.patches if p.get_linestyle() == "-"]
    dashed = [p for p in ax.patches if p.get_linestyle() != "-"]
    assert len(solid) == rt.glue["rt_met"] == 57
    assert len(dashed) == int((rt.in_target & (rt.verdict == "not scored")).sum().sum()) > 0
    assert len(ax.texts) == 150 - rt.glue["rt_no_model"]
    assert sum(t.get_text().endswith(("✗", "?")) for t in ax.texts) == 3
    plt.close(fig)
