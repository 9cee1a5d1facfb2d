"""The lab notes' tables of learning rates, seeds and basins, pinned on the committed results."""

from functools import cache
from math import comb

import numpy as np
import pytest

from attnlab.experiments import load_result
from attnlab.pages import in_context_basins as nb


@cache
def res(name):
    return load_result(name, "cpu")


def test_the_sweep_moves_five_models_to_three_times_the_pilots_rate():
    sw = nb.lr_sweep(res("icl_lr_sweep"), res("icl_lr_sweep_seeds"), res("icl_mixed_noise").config)
    moved = sw[sw.chosen != sw["pilot's rate"]]
    assert set(moved.index) == {"DIAG 3L", "DIAG 4L", "GD++ 3L", "GD++ 4L", "GD++ 5L"}
    assert sw.loc["DIAG 4L", "chosen"] == pytest.approx(0.003)
    assert sw.loc["FULL 7L", "pilot's rate"] == pytest.approx(3e-4)
    assert sw.loc["DIAG 4L", "rate"] == pytest.approx(0.050965, rel=1e-4)
    assert sw.loc["DIAG 7L", "rate"] == pytest.approx(0.027014, rel=1e-4)  # runs at a third diverged
    assert np.isinf(sw.loc["DIAG 7L", "rate / 3"])
    assert sw.loc["GD++ 4L", "seeds moving it (of 3)"] == 1
    assert sw.loc["DIAG 1L", "seeds moving it (of 3)"] is None
    assert sw.loc["DIAG 3L", "gain, 3 seeds"] == pytest.approx(1.0407, rel=1e-3)


def test_the_new_rate_closes_deep_diags_misses():
    sw = nb.lr_sweep(res("icl_lr_sweep"), res("icl_lr_sweep_seeds"), res("icl_mixed_noise").config)
    mc = nb.moved_cells(res("icl_table_6k"), res("icl_table_rates"), sw.index[sw.chosen > sw["pilot's rate"]])
    per = nb.met_by_model(mc)
    assert per.loc["DIAG 4L"].tolist() == [7, 10, 10]
    assert per.loc["DIAG 3L"].tolist() == [5, 3, 10]
    assert "GD++ 5L" not in per.index  # not in Table 1
    lost = mc[mc.met_pilot & ~mc.met]
    assert nb.listed(lost[lost.ours < lost.paper]) == "GD++ 4L, U(0, 1) (0.60 times Table 1)"


def test_seed_basins():
    sb = nb.seed_basins(res("icl_seed_basins"))
    rec = sb[sb.variant == "recipe"].loc["DIAG 3L, U(0, 3)"]
    assert rec["lowest / paper"] == pytest.approx(0.9786, rel=1e-3)
    assert rec["within (of 8)"] == 2
    assert rec["P(best of 5)"] == pytest.approx(1 - comb(6, 5) / comb(8, 5))


def test_paired_basins_and_seven_layer_diag():
    pb = nb.paired_basins(res("icl_full_basins"), res("icl_diag_deep_basins"))
    assert len(pb) == 12
    assert pb.loc["DIAG 7L, {1, 3}", "4x diverged (of 4)"] == 3
    assert pb.loc["FULL 3L, U(0, 5)", "4x lowest / paper"] == pytest.approx(0.99906, rel=1e-4)
    d7 = nb.diag7(
        res("icl_diag_deep_basins"),
        res("icl_diag7_rate"),
        res("icl_diag7_schedule"),
        res("icl_diag7_float64"),
        res("icl_table_diag7_float64"),
    )
    assert d7.loc["U(0, 4), cosine, 4x steps"].tolist()[:2] == [4, 4]
    assert np.isinf(d7.loc["U(0, 4), cosine, 4x steps", "lowest / paper"])
    assert d7.loc["{1, 3}, float64, recipe", "runs"] == 5
    curve = nb.float64_curves(res("icl_diag7_float64"))
    assert len(curve) == 8 and (curve.peak > np.finfo(np.float32).max).all()
    assert nb.float32_flips(res("icl_diag_deep_basins"), res("icl_diag7_float64")) == 3
    rec64 = nb.recipe_float64(res("icl_table_diag7_float64"), res("icl_mixed_noise"))
    assert rec64["diverged"] == 0 and rec64["met"] == rec64["met32"] == 9
    assert rec64["r13"] == pytest.approx(1.44277, rel=1e-4)


def test_gdpp_basins():
    gb = nb.gdpp_basins(res("icl_gdpp_basins"), res("icl_mixed_noise"))
    assert gb.loc["init 0.3", "skipped batches"] == 6065
    assert gb.loc["3 × rate (the table)", ["seeds", "within"]].tolist() == [5, 5]
    assert gb.loc["init 0.002/L", "lowest / paper"] == pytest.approx(1.2908, rel=1e-3)


def test_bad_arguments_raise():
    sweep, seeds = res("icl_lr_sweep"), res("icl_lr_sweep_seeds")
    with pytest.raises(ValueError, match="cfg"):
        nb.lr_sweep(sweep, seeds, {"lr": 1e-3})
    with pytest.raises(ValueError, match="seeds must be the committed result 'icl_lr_sweep_seeds'"):
        nb.lr_sweep(sweep, sweep, res("icl_mixed_noise").config)
    with pytest.raises(ValueError, match="models"):
        nb.moved_cells(res("icl_table_6k"), res("icl_table_rates"), ["DIAG three"])
    with pytest.raises(ValueError, match="six"):
        nb.moved_cells(sweep, res("icl_table_rates"), ["DIAG 3L"])
    with pytest.raises(ValueError, match="moved"):
        nb.met_by_model(None)
    with pytest.raises(ValueError, match="moved"):
        nb.listed([1.0])
    with pytest.raises(ValueError, match="basins"):
        nb.seed_basins(sweep)
    with pytest.raises(ValueError, match="results"):
        nb.paired_basins()
    with pytest.raises(ValueError, match="f64"):
        nb.float64_curves(sweep)
    with pytest.raises(ValueError, match="cpu_run"):
        nb.gdpp_basins(res("icl_gdpp_basins"), None)
