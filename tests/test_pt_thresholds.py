"""Tests of attnlab.theory.phase_transition.thresholds (pt = phase transition): eps_lin, alpha_c, alpha_l."""

import pytest

from attnlab.theory import phase_transition as se


def test_eps_lin_value_and_scaling():
    # the spec quotes eps_lin ≈ 0.00197 at omega = 0.3 (Cui et al. 2024)
    assert se.eps_lin(0.3) == pytest.approx(0.00197, rel=5e-3)
    assert se.eps_lin(0.0) / se.eps_lin(0.5) == pytest.approx(4.0)
    assert se.eps_lin(1.0) == 0.0
    assert se.verify_eps_lin(se.eps_lin(0.2), 0.2) == pytest.approx(se.eps_lin(0.2))
    with pytest.raises(ValueError, match="answer"):
        se.verify_eps_lin(0.01, 0.3)


def test_eps_lin_authors_is_above_the_true_minimum():
    exact, theirs = se.eps_lin(0.3), se.eps_lin(0.3, method="authors")
    assert exact == pytest.approx(0.00197138, rel=1e-4)
    assert 1.005 < theirs / exact < 1.015  # their B is slightly off the best one


def test_branch_curves_shapes():
    out = se.branch_curves([1.5, 2.0], 0.3, n_nodes=6)
    assert out["semantic"]["eps_g"].shape == (2,)
    assert set(out["global"]["branch"]) <= {"semantic", "positional"}
    assert out["eps_lin"] == pytest.approx(se.eps_lin(0.3))


def test_alpha_c_root_finding():
    a = se.alpha_c(0.3, bracket=(1.1, 1.45), n_grid=2, xtol=1e-2, n_nodes=6)
    assert 1.15 < a < 1.40


def test_thresholds_with_the_authors_method():
    a = se.alpha_l(0.3, bracket=(1.40, 1.50), n_grid=2, xtol=1e-3, method="authors")
    assert a == pytest.approx(1.4506, abs=5e-3)  # their table: 1.4506
    with pytest.raises(ValueError, match="n_nodes"):
        se.alpha_c(0.3, method="authors", n_nodes=8)
    with pytest.raises(ValueError, match="method"):
        se.alpha_l(0.3, method="exact")
    with pytest.raises(ValueError, match="method"):
        se.eps_lin(0.3, method="quadpy")


def test_thresholds_reject_bad_input():
    with pytest.raises(ValueError, match="omega"):
        se.eps_lin(-0.1)
    with pytest.raises(ValueError, match="alphas"):
        se.branch_curves([], 0.3)
    with pytest.raises(ValueError, match="alphas"):
        se.branch_curves([1.0, -1.0], 0.3)
    with pytest.raises(ValueError, match="bracket"):
        se.alpha_c(0.3, bracket=(2.0, 1.0))
    with pytest.raises(ValueError, match="bracket"):
        se.alpha_l(0.3, bracket=(0.0, 1.0))


def test_phase_diagram_experiment_runs_at_tiny_size():
    from attnlab.experiments import run

    small = {"n_alpha": 2, "n_omega": 1, "n_nodes": 4, "n_jobs": 1, "alpha_min": 1.5, "alpha_max": 2.0}
    res = run("pt_phase_diagram", "book", overrides=small, cache=False)
    assert len(res.rows) == 2
    assert set(res.column("global")) <= {"semantic", "positional"}


def test_quadrature_experiment_rows_are_the_solvers_fixed_points():
    """pt_quadrature (chapter 02's quadrature check): its base rows are the branches' fixed points,
    and the other node counts are warm-started solves that converge near them."""
    from attnlab.experiments import run

    small = {"base_nodes": 6, "nodes": [4, 8]}
    res = run("pt_quadrature", "book", overrides=small, cache=False)
    assert len(res.rows) == 6 and all(res.column("converged"))
    for branch in se.BRANCHES:
        fp = se.solve(2.0, 0.3, branch, n_nodes=6)
        assert res.column("eps_g", branch=branch, n_nodes=6)[0] == fp.eps_g
        assert res.column("n_points", branch=branch, n_nodes=8)[0] == se.product_rule(8)[1].size
        eps_g = res.column("eps_g", branch=branch).astype(float)
        assert max(abs(e / fp.eps_g - 1) for e in eps_g) < 0.05


def test_warm_started_thresholds_find_the_cold_scans_root():
    """alpha_c and alpha_l locate the root on 8 nodes and refine it on the full rule (here 10 nodes)
    with warm starts; they must land on the root that solving every alpha cold on the full rule
    finds (the plain scan + Brent, to 1e-5: 1.2522724 and 1.4909113 at omega = 0.3, 10 nodes)."""
    kw = {"n_nodes": 10, "bracket": (0.1, 3.0), "n_grid": 4, "xtol": 1e-4}
    assert se.alpha_c(0.3, **kw) == pytest.approx(1.2522724, abs=1e-4)
    assert se.alpha_l(0.3, **kw) == pytest.approx(1.4909113, abs=1e-4)


def test_guided_root_polishes_the_coarse_root_in_few_fine_evaluations():
    """The root finder of alpha_c and alpha_l: the coarse rule locates the root, secant steps on
    the fine one finish it. Where the two differ by a shift, the fine root comes to xtol in at most
    four fine evaluations; where the coarse rule has a spurious sign change that the fine one does
    not share (as 8 nodes have at omega = 0.1, alpha = 0.104), the fine root is still found."""
    from attnlab.theory.phase_transition.thresholds import _guided_root

    def g(x):
        return (x - 1.2345) * (1 + 0.7 * x) + 0.05 * (x - 1.2345) ** 2

    calls = []

    def fine(x):
        calls.append(x)
        return g(x)

    root = _guided_root(fine, lambda x: g(x + 0.0063), 0.1, 3.0, 4, 1e-4)
    assert abs(root - 1.2345) <= 1e-4
    assert len(calls) <= 4

    def spurious(x):  # g shifted, plus a sign change near 0.104 that fine does not have
        return g(x + 0.0063) + (4.0 if x > 0.104 else 0.0) - 3.0 * (x > 0.3)

    calls.clear()
    assert spurious(0.1) > 0 > spurious(0.105) or spurious(0.1) < 0 < spurious(0.105)
    assert abs(_guided_root(fine, spurious, 0.1, 3.0, 4, 1e-4) - 1.2345) <= 1e-4


def test_verify_alpha_c_accepts_the_root_and_rejects_answers_on_either_side():
    # the root at 8 nodes is 1.245 (omega = 0.3)
    right = se.alpha_c(0.3, n_nodes=8, xtol=1e-3, bracket=(1.0, 1.5))
    assert se.verify_alpha_c(right, 0.3).startswith("Correct")
    with pytest.raises(ValueError, match="too small"):
        se.verify_alpha_c(right - 0.05, 0.3)
    with pytest.raises(ValueError, match="too large"):
        se.verify_alpha_c(right + 0.05, 0.3)
    with pytest.raises(ValueError, match="answer"):
        se.verify_alpha_c(-1.0, 0.3)
