"""Tests of attnlab.pages.phase_transition: the tables and curves of chapter 03 and its lab notes,
on the committed results; and a cheap part of the committed pt_slices re-derived with today's code."""

import numpy as np
import pandas as pd
import pytest

from attnlab.experiments import load_result
from attnlab.experiments.phase_transition import summarize
from attnlab.pages import phase_transition as pages
from attnlab.theory import phase_transition as se


def test_theory_curves_blank_the_points_that_did_not_converge():
    theory = load_result("pt_theory", "paper")
    curves = pages.theory_curves(theory)
    for b, c in curves.items():
        raw = theory.column("eps_g", kind="curve", branch=b).astype(float)
        assert np.array_equal(np.isnan(c["eps_g"]), ~c["converged"])
        assert np.allclose(c["eps_g"][c["converged"]], raw[c["converged"]])
    (row,) = pages.theory_rows(theory, kind="transition", name="alpha_c")
    assert 1.2 < row["alpha"] < 1.3


def test_slices_join_both_branches_at_the_agnostic_point():
    rows = load_result("pt_slices", "paper").rows
    sl = pages.slices(rows)
    frame = pd.DataFrame(rows)
    for alpha, s in sl.items():
        assert np.all(np.diff(s["x"]) > 0) and s["x"].min() < 0 < s["x"].max()
        zero = frame[(frame["alpha"] == alpha) & (frame["value"] == 0.0) & (frame["kind"] == "slice")]
        assert np.allclose(zero["eps_t"], zero["eps_t"].iloc[0], rtol=1e-9)  # the same point
        assert s["minima"]["positional"][0] < 0 < s["minima"]["semantic"][0]
    with pytest.raises(ValueError, match="pt_slices"):
        pages.slices([{"alpha": 1.0}])


def test_the_committed_slices_are_todays_code():
    rows = load_result("pt_slices", "paper")
    cfg = rows.config
    row = next(
        r for r in rows.rows if r["kind"] == "slice" and r["branch"] == "semantic" and r["value"] > 0.2
    )
    c = se.constrained(row["alpha"], cfg["omega"], "semantic", row["value"], n_nodes=cfg["n_nodes"])
    assert c.eps_t == pytest.approx(row["eps_t"], rel=1e-6)
    assert c.slope == pytest.approx(row["slope"], rel=1e-4, abs=1e-9)


def test_against_theory_and_targets_pair_experiment_and_theory():
    theory = load_result("pt_theory", "paper")
    paper = summarize(load_result("pt_gd", "paper"))
    at2 = pages.against_theory(theory, {"d = 1000": paper})
    assert len(at2) == 4 and (at2["theory"] > 0).all()
    sem_m = "d = 1000 · semantic · theta_over_sigma2"
    assert at2.loc[sem_m, "theory"] == pytest.approx(
        float(theory.column("theta_over_sigma2", kind="curve", branch="semantic", alpha=2.0)[0])
    )
    tg = pages.targets(load_result("pt_targets", "paper").rows, theory)
    assert len(tg) == 8 and set(tg["branch"]) == {"semantic", "positional"}
    assert np.allclose(tg["difference"], tg["GD: order parameter"] - tg["theory"])
    with pytest.raises(ValueError, match="pt_targets"):
        pages.targets([{"alpha": 1.0}], theory)


def test_branch_paths_and_metastable_summary():
    paths = pages.branch_paths(load_result("pt_branches", "paper").rows)
    assert paths["alpha"].shape == paths["d_rel"].shape == paths["both"].shape
    assert set(paths["ends"]["branch"]) <= {"semantic", "positional"}
    summary, extrapolated = pages.metastable_summary(
        load_result("pt_metastable", "paper").rows, load_result("pt_constrained", "paper").rows
    )
    assert set(summary.index.get_level_values("point")) == set(pages.POINT_NAMES.values())
    assert set(extrapolated) == set(pages.POINT_NAMES.values())
    # the extrapolation is a straight line in 1/d through the three means, read at 0
    A = pages.POINT_NAMES[0.5, "semantic"]
    g = summary.loc[A]
    line = np.polyfit(1 / g.index.to_numpy(float), g["GD: order parameter"], 1)
    assert extrapolated[A] == pytest.approx(line[1])


def test_rule_orders_and_monte_carlo_steps():
    rows = load_result("pt_authors_rules", "paper").rows
    order = pages.rule_orders(rows)
    assert list(order.index) == list(range(3, 17))
    moves = pages.monte_carlo_steps(rows)
    assert set(moves.index) == {"A, θ/σ²: theirs", "A, θ/σ²: ours", "B, m: theirs", "B, m: ours"}
    assert np.allclose(moves["step"], moves["after one step"] - moves["start"])
    assert np.allclose(moves["step / se"], moves["step"] / moves["± se"])


def test_reproduce_lists_every_committed_part_ii_result():
    rep = pages.reproduce("pt_")
    assert "pt_theory (paper)" in rep.index and "pt_untied (book)" in rep.index
    assert rep["command"].str.startswith("python -m attnlab.experiments run").all()
    with pytest.raises(ValueError, match="prefix"):
        pages.reproduce("zz_")
