"""Tests of attnlab.experiments.phase_transition.metastable (pt = phase transition)."""

import numpy as np
import pytest

from attnlab.experiments import load_result
from attnlab.pages.phase_transition import POINT_NAMES, metastable_runs


def test_metastable_runs_names_every_run_and_takes_its_own_order_parameter():
    runs = metastable_runs(load_result("pt_metastable", "paper").rows)
    assert set(runs["point"]) == set(POINT_NAMES.values())
    sem = runs["init"] == "semantic"
    assert np.array_equal(runs.loc[sem, "order"], runs.loc[sem, "theta_over_sigma2"])
    assert np.array_equal(runs.loc[~sem, "order"], runs.loc[~sem, "m"])
    assert np.array_equal(runs["on"], runs["order"] > runs["other"])
    assert (runs["moved"] >= 0).all()


def test_metastable_runs_rejects_other_rows():
    with pytest.raises(ValueError, match="rows"):
        metastable_runs([{"alpha": 1.0}])


def test_the_metastable_experiments_run_at_tiny_size():
    from attnlab.experiments import run

    long = run("pt_long_gd", "book", overrides={"d": 12, "n_seeds": 2, "steps": 4, "record_every": 2,
                                                 "n_test": 40}, cache=False)  # fmt: skip
    assert sorted({r["step"] for r in long.rows}) == [0, 2, 4] and len(long.rows) == 6
    rules = run("pt_authors_rules", "book", overrides={"orders": [3], "mc_samples": 200, "mc_seeds": 1,
                                                       "node_orders": [4], "n_nodes": 4, "n_jobs": 1},
                cache=False)  # fmt: skip
    kinds = [r["kind"] for r in rules.rows]
    assert kinds.count("rule") == 1 and kinds.count("nodes") == 1 and kinds.count("monte carlo") == 4
    assert kinds.count("hold") == 2
    assert all(np.isfinite(r["value"]) for r in rules.rows)
