"""Part II's pages: committed results turned into the tables chapter 03 and its lab notes show.

:func:`metastable_runs` turns the rows of ``pt_metastable`` (the gradient-descent runs at the
metastable points of :mod:`attnlab.experiments.phase_transition.metastable`) into the table that
chapter 03 and the lab notes read, with the points named as in :data:`POINT_NAMES`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

# The points of pt_metastable, (ω, start) -> name, as chapter 03 shows them.
POINT_NAMES = {
    (0.5, "semantic"): "A: ω = 0.5, α = 1.19, from Q*",
    (0.5, "positional"): "control: ω = 0.5, α = 1.19, positional",
    (0.15, "positional"): "B: ω = 0.15, α = 1.79, positional",
    (0.3, "semantic"): "C: ω = 0.3, α = 0.8, from Q*",
}


def metastable_runs(rows) -> pd.DataFrame:
    """``pt_metastable``'s rows with the columns the pages use added.

    ``point`` (a name of :data:`POINT_NAMES`), ``order`` (the run's own order parameter: θ/σ²
    from Q*, m from the positional start), ``other`` (the other one), ``moved`` (the change of
    ``order`` over the last 10,000 steps, absolute) and ``on`` (the run is on its branch: its
    own order parameter is the larger one).
    """
    runs = pd.DataFrame(rows)
    if runs.empty or not {"omega", "init", "theta_over_sigma2", "m"} <= set(runs):
        raise ValueError("rows must be pt_metastable's rows (omega, init, theta_over_sigma2, m, ...)")
    sem = runs["init"] == "semantic"
    runs["point"] = [POINT_NAMES[p] for p in zip(runs["omega"], runs["init"], strict=True)]
    runs["order"] = np.where(sem, runs["theta_over_sigma2"], runs["m"])
    runs["other"] = np.where(sem, runs["m"], runs["theta_over_sigma2"])
    runs["moved"] = np.abs(np.where(sem, runs["dtheta_last"], runs["dm_last"]))
    runs["on"] = runs["order"] > runs["other"]
    return runs
