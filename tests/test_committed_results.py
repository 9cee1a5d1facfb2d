"""Every committed result stays true to the code: a cheap part of each is re-derived here.

``SPECS`` maps every committed result (``NAME-SCALE`` in ``lib/attnlab/results``) to the checks that
re-derive part of it with today's code (:mod:`committed`: ``Rerun``, ``FirstWindow``,
``StoredModel``, ``Oracle``, ``Check``), each saying what it re-derives and why its tolerance; a
result that cannot be re-derived cheaply at all gets a ``NotCheap`` entry that says why.
``NOT_REDERIVED`` names what the checks of a result leave out, and why; the lab notes list it
(:func:`test_the_lab_notes_list_what_is_not_rederived`). A committed result without a spec fails.

Adding a spec for a new result is two lines, e.g. a run of the table's recipe::

    "icl_table_new-cpu": [FirstWindow(ICL, param="diag", n_layers=1, seed=0)],

or an experiment whose one row (one grid point, one seed) is cheap::

    "pt_new-paper": [Rerun("one grid point", overrides={"n_alpha": 1}, keys=("alpha",), columns=("eps_t",))],
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from committed import (
    FLOAT32_RTOL,
    FLOAT64_RTOL,
    Check,
    Elsewhere,
    FirstWindow,
    NotCheap,
    Oracle,
    Rerun,
    StoredModel,
    committed,
    committed_stems,
)
from committed_checks import (
    authors_rules_cheap,
    authors_rules_monte_carlo,
    bayes_floor_oracle,
    beyond_baselines,
    beyond_construction,
    beyond_gated,
    beyond_gdpp,
    spliced_table,
)

# Part II's fixed point (tol 1e-7 to 1e-9 from the same start): the same iterates up to the last
# bits of numpy's and the compiled prox's sums, which the iteration contracts
SOLVER = 1e-7
# ... except where the loss is flat along the branch: pt_constrained's fixed point at (0.3, 0.8) moves
# its theta by up to 1.3e-6 relative and eps_g by 2.9e-7 with one thread or two and with the CPU's
# BLAS and torch kernels (measured on one machine; the committing machine's run lies among them)
FLAT = 1e-5
# Part II's finite-d runs are float32: runs of older code on other machines agree with today's to
# 4e-6 relative after 5000 GD steps (pt_gd at alpha = 0.01, measured), bit for bit otherwise
GD32 = 1e-5
# ... and where m crosses zero a relative tolerance means nothing: the same runs on torch's AVX2 and
# default kernels (one AMD machine) move m by at most 5.4e-8 in absolute terms after 250 steps
GD32_ABS = 1e-6
# 800 Adam steps in float32 amplify the kernels' last bits: on torch's AVX2 and default kernels of
# one machine pt_histogram's final loss moves by up to 1.8%, its test accuracy by 0.7% (measured)
ADAM32 = 5e-2
# scipy's adaptive integrators at their tight tolerances: the same steps on any machine up to
# libm's last bits, which the step-size control can amplify; far below a change of the flow
ODE = 1e-7
# points of committed grids: pt_theory's alpha_l (1.49) lies between the first two; pt_phase_diagram
# at omega 0.275, alpha 1.1; pt_crossing_scan at omega 0, alpha 0.4 (both methods converge there)
ALPHA_L_BRACKET = tuple(float(a) for a in np.linspace(0.1, 2.5, 25)[13:15])
PD_OMEGA, PD_ALPHA = float(np.linspace(0.0, 0.475, 20)[11]), float(np.linspace(0.1, 2.0, 20)[10])
CROSS_ALPHA = float(np.linspace(0.35, 0.95, 25)[2])
# the first point (and seed) of pt_metastable and of pt_targets, pt_targets_scaling
POINT_A, POINT_T = [[0.5, 1.19, "semantic"]], [[0.3, 0.8, "semantic"]]
GD_KEYS = ("variant", "alpha", "d", "init", "seed_index")
TRAINED = ("eps_g", "eps_t", "m", "theta_over_sigma2", "q", "eps_lin")
ICL = "one Part III model's first window of training (its schedule over the run's steps), float32"
STORED = "a stored model evaluated again on the run's evaluation and validation prompts (float64)"
ORACLE = "the oracle column on the run's 100,000 evaluation prompts (float64)"
AT_START = "eps_lin and n of every row at 0 steps: teachers, training sets, positional baseline, test sets"
ROWS = ("kind", "group", "model", "n_layers", "noise", "seed")


def _columns(stem, *keys):
    return tuple(c for c in committed(stem).columns if c not in keys)


# fmt: off
SPECS: dict[str, list] = {
    # ---- Part I ------------------------------------------------------------------------------------
    "hist_overshoot-paper": [Rerun("the symmetric start and seed 0's random start, every time (ODE)",
        overrides={"n_seeds": 1}, keys=("seed", "t"), columns=("mean_tf", "diag_tf", "mean_df"), rtol=ODE,
        atol=1e-15, min_rows=402)],
    "hist_plateau-paper": [Rerun("seed 0's plateau at two of the scales (ODE)",
        overrides={"n_seeds": 1, "scales": [0.1, 1e-4]}, keys=("seed", "scale"), columns=("T",), rtol=ODE,
        min_rows=2)],
    "hist_rates-paper": [Elsewhere("an l_df row and an l_tf row at d = 6, recomputed",
        "tests/test_histogram.py::test_hist_rates_committed_result_is_what_todays_code_computes")],
    "hist_sign_df-paper": [Elsewhere("a slice of the columns recomputed",
        "tests/test_histogram.py::test_hist_sign_df_and_hist_finite_committed_results_are_what_todays_code_computes")],
    "hist_finite-paper": [Elsewhere("a slice of the runs recomputed",
        "tests/test_histogram.py::test_hist_sign_df_and_hist_finite_committed_results_are_what_todays_code_computes")],
    "hist_sign_rule-paper": [Elsewhere("a slice of the columns recomputed",
        "tests/test_histogram.py::test_hist_sign_rule_committed_result_is_what_todays_code_computes")],
    "icl_tail_cause-paper": [Elsewhere("the book scale's summaries and per-prompt rows, rtol 1e-9",
        "tests/test_icl_tail_cause.py::test_committed_tail_cause_is_reproduced_and_pinned")],
    "hist_saddle-paper": [Rerun("every row (ODE; the whole run is half a second)", keys=("eps",),
        columns=("moved", "loss_end", "T"), rtol=ODE, atol=1e-15, min_rows=5)],
    "hist_sgd-paper": [Rerun("the first 100 SGD steps (constant rate, float64), recorded at steps 0 and 100",
        overrides={"steps": 100}, keys=("step",), columns=("loss", "test_err"), min_rows=2)],
    # ---- Part II: theory ---------------------------------------------------------------------------
    "pt_theory-paper": [Rerun("the two grid points that bracket alpha_l (both branches), alpha_l by root "
        "finding in that bracket and both branches at alpha_l -+ delta (20 nodes, as committed)",
        overrides={"alpha_min": ALPHA_L_BRACKET[0], "alpha_max": ALPHA_L_BRACKET[1], "n_alpha": 2},
        keys=("kind", "name", "side", "alpha", "branch"), columns=_columns("pt_theory-paper", "kind", "name",
        "side", "branch"), where=lambda r: r["kind"] != "transition" or r["name"] == "alpha_l",
        rtol=SOLVER, atol=1e-12, min_rows=10)],
    "pt_phase_diagram-paper": [Rerun("one grid point (omega 0.275, alpha 1.1): both branches, the minimum",
        overrides={"omega_min": PD_OMEGA, "omega_max": PD_OMEGA, "n_omega": 1, "alpha_min": PD_ALPHA,
        "alpha_max": PD_ALPHA, "n_alpha": 1}, keys=("omega", "alpha"),
        columns=_columns("pt_phase_diagram-paper", "omega", "alpha"), rtol=SOLVER, atol=1e-12)],
    "pt_transition_lines-paper": [Rerun("omega = 0.3: alpha_c, alpha_l by both methods (root finding)",
        overrides={"omegas": [0.3], "n_jobs": 1}, keys=("omega",),
        columns=_columns("pt_transition_lines-paper", "omega"), rtol=SOLVER)],
    "pt_crossing_scan-paper": [Rerun("one point (omega 0, alpha 0.4): both branches by both methods",
        overrides={"omegas": [0.0], "alpha_min": CROSS_ALPHA, "alpha_max": CROSS_ALPHA, "n_alpha": 1,
        "n_jobs": 1}, keys=("omega", "alpha"), columns=_columns("pt_crossing_scan-paper", "omega", "alpha"),
        rtol=SOLVER, atol=1e-12)],
    "pt_branches-paper": [Rerun("both branches solved fresh at alpha = 2.5, where the downward sweeps start",
        overrides={"alpha_min": 2.5, "n_alpha": 1}, keys=("kind", "alpha", "branch", "direction"),
        columns=("eps_t", "eps_g", "m", "theta_over_sigma2", "mu_max", "converged", "on_branch"),
        where={"direction": "down"}, rtol=SOLVER, atol=1e-12, min_rows=2)],
    "pt_constrained-paper": [
        Rerun("point (0.3, 0.8): the loss at theta = 0 (the continuation's fresh start)",
            overrides={"points": POINT_T, "n_values": 1, "check_nodes": []},
            keys=("omega", "alpha", "branch", "kind", "value"), columns=("eps_t", "slope", "q", "converged"),
            where={"kind": "constrained"}, rtol=SOLVER, atol=1e-12),
        Rerun("point (0.3, 0.8): the fixed point at 20 nodes, where the loss is flat in theta",
            overrides={"points": POINT_T, "n_values": 1, "check_nodes": []},
            keys=("omega", "alpha", "branch", "kind"), columns=("value", "eps_t", "q", "converged", "eps_g"),
            where={"kind": "fixed point"}, rtol=FLAT, atol=1e-12),
    ],
    "pt_quadrature-book": [Rerun("both branches at the base quadrature (20 nodes)", overrides={"nodes": []},
        keys=("branch", "n_nodes"), columns=_columns("pt_quadrature-book", "branch", "n_nodes"),
        rtol=SOLVER, atol=1e-12, min_rows=2)],
    "pt_authors_rules-paper": [
        Check("the authors' procedure with the order-3 rule, the solver at 12 nodes (the run's row builders)",
            fn=authors_rules_cheap, keys=("kind", "omega", "alpha", "branch", "n_nodes"),
            columns=("value", "q", "V", "iterations", "converged", "mu_max"), rtol=SOLVER, atol=1e-12,
            min_rows=2),
        Check("the Monte-Carlo step of seed 0 from the authors' semantic start at A (1e6 samples)",
            fn=authors_rules_monte_carlo("semantic", "theirs"), keys=("kind", "branch", "start", "seed"),
            columns=("q", "V", "value")),
        Check("the Monte-Carlo step of seed 0 from our positional fixed point at B",
            fn=authors_rules_monte_carlo("positional", "ours"), keys=("kind", "branch", "start", "seed"),
            columns=("q", "V", "value")),
    ],
    "pt_landscape-paper": [Rerun("the theory at the control point's first overlap (fresh start), its fixed "
        "point and replicon at 20 nodes", overrides={"points": [[0.3, 2.0, "semantic", [0.45]]], "ds": [],
        "check_nodes": [], "n_jobs": 1}, keys=("omega", "alpha", "branch", "kind", "value"),
        columns=("eps_t", "q", "V_hat", "converged", "V_hat_smooth", "jump_share", "replicon"),
        rtol=SOLVER, atol=1e-12, min_rows=2)],
    "pt_slices-paper": [Rerun("alpha = 1.6: both slices' first value (the agnostic point, fresh) and "
        "both fixed points (20 nodes)", overrides={"alphas": [1.6], "n_values": 1},
        keys=("kind", "alpha", "branch", "value"), columns=("eps_t", "slope", "converged"), rtol=SOLVER,
        atol=1e-12, min_rows=4)],
    # ---- Part II: finite d -------------------------------------------------------------------------
    "pt_curves-book": [Rerun("the first 250 GD steps of every run: the curves at steps 0 and 250",
        overrides={"steps": 250}, keys=("step", "init", "seed_index"),
        columns=("eps_t", "m", "theta_over_sigma2"), rtol=GD32, atol=GD32_ABS, min_rows=32)],
    "pt_finite_d-book": [Rerun("every run at the first d (25): 2000 GD steps, all columns",
        overrides={"ds": "25"}, keys=GD_KEYS, columns=TRAINED, rtol=GD32, min_rows=12)],
    "pt_histogram-book": [Rerun("the whole run: both models, 800 Adam steps each (float32, one thread)",
        keys=("model", "seed_index"), columns=_columns("pt_histogram-book", "model", "seed_index"),
        rtol=ADAM32, min_rows=2)],
    "pt_long_gd-paper": [Rerun("every run's start (step 0: the teachers)", overrides={"steps": 0},
        keys=("step", "seed"), columns=("theta_over_sigma2", "m"), rtol=GD32, min_rows=4)],
    "pt_gd-paper": [Rerun(AT_START + "; the first alpha (0.01)", overrides={"alpha_min": 0.01,
        "alpha_max": 0.01, "n_alpha": 1, "steps": 0}, keys=GD_KEYS, columns=("eps_lin", "n"), rtol=GD32,
        min_rows=8)],
    "pt_gd-book": [Rerun(AT_START + " (a grid point run alone is not the batch's run: eps_t moves by 1%, "
        "measured)", overrides={"steps": 0}, keys=GD_KEYS, columns=("eps_lin", "n"), rtol=GD32, min_rows=16)],
    "pt_adam_random-book": [Rerun(AT_START, overrides={"steps": 0, "steps_gd": 0}, keys=GD_KEYS,
        columns=("eps_lin",), rtol=GD32, min_rows=12)],
    "pt_untied-book": [Rerun(AT_START, overrides={"steps": 0}, keys=GD_KEYS, columns=("eps_lin", "n"),
        rtol=GD32, min_rows=144)],
    "pt_value-book": [Rerun(AT_START, overrides={"steps": 0}, keys=GD_KEYS, columns=("eps_lin", "n"),
        rtol=GD32, min_rows=48)],
    "pt_correlated-book": [Rerun(AT_START, overrides={"steps": 0}, keys=GD_KEYS, columns=("eps_lin", "n"),
        rtol=GD32, min_rows=96)],
    "pt_metastable-paper": [Rerun(AT_START + "; point A at d = 250", overrides={"points": POINT_A,
        "ds": [250], "steps": 1, "record_every": 1}, keys=GD_KEYS, columns=("eps_lin",), rtol=GD32,
        min_rows=4)],
    "pt_targets-paper": [Rerun(AT_START + "; the first point", overrides={"points": POINT_T, "steps": 1,
        "record_every": 1}, keys=GD_KEYS, columns=("eps_lin",), rtol=GD32, min_rows=4)],
    "pt_targets_scaling-paper": [Rerun(AT_START + "; the first point at d = 250", overrides={
        "points": POINT_T, "ds": [250], "steps": 1, "record_every": 1}, keys=GD_KEYS, columns=("eps_lin",),
        rtol=GD32, min_rows=4)],
    # ---- Part III: runs of the table's recipe --------------------------------------------------------
    "icl_mixed_noise-paper": [FirstWindow(ICL, param="gdpp", n_layers=1, seed=0)],
    "icl_mixed_noise-cpu": [Check("the table spliced again from its committed runs by today's splice, "
        "lr_choice and recipe (exact)", fn=spliced_table, keys=("kind", "param", "n_layers", "noise", "seed",
        "sigma"), columns=_columns("icl_mixed_noise-cpu", "kind", "param", "n_layers", "noise", "seed",
        "sigma"), rtol=0.0, min_rows=928)],
    "icl_table_6k-cpu": [FirstWindow(ICL, param="diag", n_layers=1, seed=0)],
    "icl_table_6k_again-cpu": [FirstWindow(ICL, param="full", n_layers=1, seed=0)],
    "icl_table_long-cpu": [FirstWindow(ICL, param="full", n_layers=3, seed=0)],
    "icl_table_rates-cpu": [FirstWindow(ICL, param="diag", n_layers=3, seed=0)],
    "icl_table_full7-cpu": [FirstWindow(ICL, param="full", n_layers=7, seed=0)],
    "icl_table_diag7_float64-cpu": [FirstWindow(ICL, param="diag", n_layers=7, seed=0)],
    "icl_table_diag3-cpu": [FirstWindow(ICL, param="diag", n_layers=2, seed=1),
                            StoredModel(STORED, param="diag", n_layers=3, noise="uniform:3", seed=1)],
    "icl_table_full3-cpu": [FirstWindow(ICL, param="full", n_layers=1, seed=2),
                            StoredModel(STORED, param="full", n_layers=3, noise="categorical:1,3", seed=0)],
    "icl_table_full7_weights-cpu": [StoredModel(STORED, param="full", n_layers=7, noise="uniform:5", seed=4)],
    "icl_trained_models-cpu": [FirstWindow(ICL, param="diag", n_layers=3, seed=0),
                               StoredModel(STORED, param="full", n_layers=4, noise="uniform:7", seed=2)],
    "icl_diag7_float64-cpu": [FirstWindow(ICL, param="diag", n_layers=7, seed=0, arm="float64")],
    "icl_full7_float64-cpu": [FirstWindow(ICL, param="full", n_layers=7, seed=1, arm="float64")],
    "icl_scoring-cpu": [Rerun("two cells at sigma_max 3: DIAG 1L scored on 400,000 held-out prompts, "
        "GD++ 1L on the table's (all but twin_rel, a maximum over every noise setting of the run)",
        overrides={"models": [["gdpp", 1], ["diag", 1]], "noise": ["uniform:3"]},
        keys=("param", "n_layers", "noise"), min_rows=2,
        columns=_columns("icl_scoring-cpu", "param", "n_layers", "noise", "twin_rel"))],
    "icl_eval_sets-cpu": [Rerun("a stored model (DIAG 3L, sigma_max 0, seed 0) on the table's prompts and "
        "the first fresh set", overrides={"sources": {"icl_trained_models": {"models": {"diag": [3]},
        "noise": ["uniform:0"], "seeds": [0]}}, "n_sets": 1}, keys=("source", "param", "n_layers", "noise",
        "seed", "set"), columns=_columns("icl_eval_sets-cpu", "source", "param", "n_layers", "noise", "seed",
        "set"), min_rows=2)],
    # side studies that keep table rows only (four prompt sets between them: one is drawn once)
    **{stem: [Oracle(ORACLE, noise=(noise,))] for stem, noise in {
        "icl_stability-cpu": "uniform:3", "icl_seed_basins-cpu": "uniform:3",
        "icl_full_basins-cpu": "categorical:1,3", "icl_diag_deep_basins-cpu": "uniform:4",
        "icl_gdpp_basins-cpu": "uniform:2", "icl_full7_rates-cpu": "uniform:3",
        "icl_full7_long-cpu": "uniform:3", "icl_full7_longer-cpu": "uniform:4",
        "icl_full7_schedule-cpu": "uniform:4", "icl_full7_sweep-cpu": "uniform:3",
        "icl_diag7_rate-cpu": "uniform:4", "icl_diag7_schedule-cpu": "categorical:1,3",
        "icl_lr_sweep-cpu": "uniform:3", "icl_lr_sweep_seeds-cpu": "uniform:3"}.items()},
    # ---- Part III: beyond the paper ----------------------------------------------------------------
    "icl_beyond-paper": [
        Check("the baselines at sigma_max 1 (Bayes-optimal on 64 nodes, ConstRR tuned on its prompts)",
            fn=beyond_baselines("uniform:1"), keys=("kind", "model", "noise"),
            columns=("adjusted", "adjusted_se", "oracle_loss"), min_rows=2),
        Check("Thm 5.1's construction with 2 layers, its worst-case and Marchenko-Pastur bounds (the "
            "tuned bounds search a grid on 20,000 more prompts)", fn=beyond_construction(2),
            keys=("kind", "bounds", "n_layers"), columns=("mu", "nu", "loss", "eps", "eta"), min_rows=2),
        Check("trained GD++ with 2 layers rebuilt from its stored omegas and evaluated again (the omegas are "
            "float32 products: 1e-6; the oracle's loss on noiseless prompts is rounding, ~1e-30)",
            fn=beyond_gdpp(2, 0), keys=ROWS, columns=("adjusted", "loss", "oracle_loss"), rtol=1e-6,
            atol=1e-20),
    ],
    "icl_bayes_floor-paper": [Check("the oracle column of every block: icl_beyond's prompts drawn again "
        "(float64)", fn=bayes_floor_oracle, keys=("start",), columns=("oracle_loss",), min_rows=10)],
    "icl_beyond_gate_lr-paper": [Check("the ConstRR baseline on per-token noise",
        fn=beyond_baselines("token:0.5,5@0.8,0.2"), keys=("kind", "model", "noise"),
        columns=("adjusted", "adjusted_se", "oracle_loss"))],
    "icl_beyond_gated_long-paper": [Check("a gated model rebuilt from its gate and omega rows (float32: "
        "1e-6) and evaluated again", fn=beyond_gated("token:0.5,5@0.8,0.2", 0), keys=ROWS,
        columns=("adjusted", "loss", "oracle_loss"), rtol=1e-6)],
    "icl_beyond_gated_normalised-paper": [Check("a gated model (gate features relative to the prompt) "
        "rebuilt from its rows and evaluated again", fn=beyond_gated("token:0.5,5@0.8,0.2", 1), keys=ROWS,
        columns=("adjusted", "loss", "oracle_loss"), rtol=1e-6)],
}

# What the checks above leave out of a result, and why (the lab notes of its part list them).
_GD = "GD's trained columns: every run of the batch for all its steps"
_ICL = "the trained models' columns: the whole runs, thousands of steps of a batch of models"
NOT_REDERIVED: dict[str, str] = {
    "pt_gd-paper": _GD + " (5000 steps at d = 1000)",
    "pt_gd-book": _GD + " (2000 steps at d = 400)",
    "pt_adam_random-book": _GD + " (2500 Adam steps and 2000 GD steps, twelve teachers)",
    "pt_untied-book": _GD + " (2000 steps, three variants)", "pt_value-book": _GD + " (2000 steps)",
    "pt_correlated-book": _GD + " (2000 steps, two variants)",
    "pt_metastable-paper": _GD + " (30,000 steps at d up to 1000)",
    "pt_targets-paper": _GD + " (30,000 steps at d = 1000)",
    "pt_targets_scaling-paper": _GD + " (30,000 steps at d = 250 and 500)",
    "icl_bayes_floor-paper": "the Bayes floor's columns: Gibbs chains over 50,000 prompts on a GPU",
    "pt_long_gd-paper": "the records after the start: 20,000 GD steps at d = 400",
    "pt_landscape-paper": "the finite-d minimisations: L-BFGS continued through every overlap of a point",
    **{s: _ICL for s in SPECS if any(isinstance(c, Oracle) for c in SPECS[s])},
    **{s: "the trained models' rows: 3000-9000 Adam steps of every group" for s in SPECS if "beyond" in s},
    "icl_beyond-paper": "the trained models' rows (3000 Adam steps of every group) and Thm 5.1's "
    "construction with tuned bounds (a grid of 36 bounds on 20,000 more prompts)",
}
# fmt: on


def _cases():
    for stem in committed_stems():
        for k, spec in enumerate(SPECS.get(stem, [])):
            yield pytest.param(stem, spec, id=f"{stem}-{k}-{type(spec).__name__}")


@pytest.fixture(autouse=True)
def _one_thread():
    """One torch thread per test, as the runs behind the results: the tests run on both cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_every_committed_result_has_a_spec():
    """A committed result without a spec (or a NotCheap entry) fails; a spec without a result too."""
    stems = set(committed_stems())
    assert not stems - set(SPECS), f"committed results without a spec: {sorted(stems - set(SPECS))}"
    assert not set(SPECS) - stems, f"specs without a committed result: {sorted(set(SPECS) - stems)}"
    assert all(SPECS[s] for s in stems), "every result needs at least one spec"
    assert set(NOT_REDERIVED) <= stems


@pytest.mark.parametrize(("stem", "spec"), list(_cases()))
def test_committed_result_is_rederived(stem, spec):
    spec.check(stem)


def test_the_lab_notes_list_what_is_not_rederived():
    """Every result that cannot be re-derived cheaply, or whose checks leave a part out, is named
    in the lab notes of its part (in their list of what the tests do not re-derive)."""
    notes = {"hist": "linear-nn", "pt": "phase-transition", "icl": "in-context"}
    book = Path(__file__).resolve().parents[1] / "book" / "lab-notes"
    missing = []
    for stem in sorted(
        {*NOT_REDERIVED, *(s for s, v in SPECS.items() if any(isinstance(c, NotCheap) for c in v))}
    ):
        text = (book / f"{notes[stem.split('_')[0]]}.md").read_text()
        listed = re.search(r"not\s+re-derived\s+by\s+the\s+tests(.*?)(\n#|\Z)", text, re.S)
        if listed is None or f"`{stem.rsplit('-', 1)[0]}`" not in listed.group(1):
            missing.append(stem)
    assert not missing, f"the lab notes do not list these results as not re-derived: {missing}"


def test_tolerances_are_tighter_than_the_bugs_they_must_catch():
    """GD++'s seed offset moves the first window of a model by 4e-6 to 1e-4 (measured); float64
    re-evaluations agree to 1e-12."""
    assert FLOAT32_RTOL < 4e-6 and FLOAT64_RTOL <= 1e-9
