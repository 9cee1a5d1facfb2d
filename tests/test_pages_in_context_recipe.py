"""Tests of the lab notes' tables of the CPU recipe, on the committed results (issue 35)."""

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from attnlab.experiments import load_result, run
from attnlab.pages import in_context_recipe as recipe


@pytest.fixture(scope="module")
def runs():
    return {
        "cpu": load_result("icl_mixed_noise", "cpu"),
        "paper": load_result("icl_mixed_noise", "paper"),
        "stab": load_result("icl_stability", "cpu"),
        "six": load_result("icl_table_6k", "cpu"),
    }


def test_reduced_run_cells_and_figure(runs):
    red = recipe.best_cells(runs["paper"])
    assert len(red) == 120 and red.paper.isna().sum() == 10  # GD++ 5L is not in Table 1
    one = red[(red.param == "diag") & (red.L == 1) & (red.noise == "uniform:0")].iloc[0]
    assert one.paper == 1.767 and abs(one.ours / one.paper - 1) <= 0.05
    fig = recipe.reduced_figure(runs["paper"], run("icl_baselines", "book"))
    assert len(fig.axes) == 2
    plt.close(fig)
    with pytest.raises(ValueError, match="top"):
        recipe.reduced_figure(runs["paper"], run("icl_baselines", "book"), top=0)


def test_guards_and_reruns(runs):
    st = recipe.guards(runs["stab"])
    assert list(st.index) == ["plain", "guarded"]
    assert st.diverged.tolist() == [7, 2] and st["cells met"].tolist() == [3, 6]
    assert st.runs.tolist() == [27, 27]
    rr = recipe.reruns(runs["cpu"])
    assert set(rr.index[rr["beside in its run"] != ""]) == {
        "DIAG 5L",
        "DIAG 7L",
        "GD++ 7L",
        "FULL 7L",
    }
    assert rr.loc["FULL 7L", "runs flagged"] == 23
    assert rr.loc["FULL 7L", "distributions flagged"] == 10
    assert rr.loc["DIAG 7L", "re-runs"] == 18 and rr.loc["DIAG 4L", "runs flagged"] is None


def test_longer_models_seed_choice_closeness_and_spread(runs):
    six_long = recipe.longer(runs["cpu"], runs["six"])
    per = recipe.longer_table(six_long)
    assert list(per.index) == ["DIAG 5L", "FULL 3L", "FULL 4L", "FULL 7L"]
    assert per["met at 6,000 steps"].tolist() == [8, 5, 9, 0]
    assert per["met in the table"].tolist() == [10, 7, 10, 6]
    rest = six_long[~six_long.met & (six_long.L < 7)]
    assert recipe.cell_names(rest.iloc[:1]).startswith("FULL 3L at U(0, ")
    bv = recipe.seed_choice(runs["cpu"])
    assert (bv["cells"], bv["differ"], bv["met_e"], bv["met_v"]) == (80, 55, 65, 57)
    assert bv["n_models"] == 8
    assert bv["median"] == pytest.approx(1.00129, rel=1e-4)
    close = recipe.closeness(runs["cpu"], runs["paper"])
    assert close["met, CPU"].tolist() == [3, 29] and close["met, reduced"].tolist() == [0, 0]
    assert close.loc["DIAG 3L", "factor, CPU"] == pytest.approx(1.2797, rel=1e-3)
    sd = recipe.seed_spread(runs["cpu"])
    assert (sd["cells"], sd["over2"], sd["met_best"], sd["met_three"], sd["met_seed0"]) == (
        50,
        19,
        45,
        42,
        33,
    )


def test_bad_arguments_raise(runs):
    with pytest.raises(ValueError, match="result must be a result of icl_mixed_noise"):
        recipe.best_cells(runs["stab"])
    with pytest.raises(ValueError, match="paper_run must be a result of icl_mixed_noise"):
        recipe.closeness(runs["cpu"], runs["cpu"])  # the cpu scale, not the reduced run
    with pytest.raises(ValueError, match="stab"):
        recipe.guards(runs["cpu"])
    with pytest.raises(ValueError, match="six"):
        recipe.longer(runs["cpu"], runs["stab"])
    with pytest.raises(ValueError, match="cells_long"):
        recipe.longer_table(pd.DataFrame({"x": [1]}))
    with pytest.raises(ValueError, match="df"):
        recipe.cell_names("DIAG 5L")
    for fn in (recipe.reruns, recipe.seed_choice, recipe.seed_spread):
        with pytest.raises(ValueError, match="cpu_run"):
            fn(runs["paper"])
