"""The lab notes' cells of Part III, pinned on the committed results."""

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
    assert plain(why.glue)["why_n"] == 16 and why.glue["why_held_met"] == 9
    assert why.glue["why_undecided"] == 5
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
