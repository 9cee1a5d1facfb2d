"""Tests of attnlab.experiments.phase_transition.metastable (pt = phase transition)."""

import numpy as np
import pytest

from attnlab.experiments import load_result
from attnlab.experiments.phase_transition.metastable import POINT_NAMES, metastable_runs


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
