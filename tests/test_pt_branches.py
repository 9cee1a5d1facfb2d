"""Part II: a branch's fixed point does not depend on how the solver iterates (issue 14, item 6).

At alpha = 2, omega = 0.3 the positional fixed point has a Jacobian eigenvalue near -5.5 (a damped
iteration needs damping > 0.69 to converge to it) and the agnostic point m = 0 of the positional
subspace repels every damped iteration (an eigenvalue near 1.15) but can catch Anderson mixing.
Before the fix, damping 0.5 or 0.6 returned m = 0 (8 nodes) or the mirror m = -0.258 (20 nodes).
"""

import math

import numpy as np
import pytest

from attnlab.experiments._core import Result
from attnlab.experiments.phase_transition import summarize
from attnlab.theory import phase_transition as se

# The positional fixed point at alpha = 2, omega = 0.3 (this solver at 20 nodes, chapter 02; the
# authors' stored theory has eps_g = 0.00349, m = 0.259, and their GD at d = 1000 m = 0.262).
POSITIONAL_AT_2 = {"m": 0.2582, "eps_g": 0.003469}


@pytest.mark.parametrize("n_nodes", [8, 20])
def test_positional_branch_does_not_depend_on_damping(n_nodes):
    runs = {d: se.solve(2.0, 0.3, "positional", n_nodes=n_nodes, damping=d) for d in (0.5, 0.8)}
    for r in runs.values():
        assert r.converged and r.mu_max < 1
        assert r.m == pytest.approx(POSITIONAL_AT_2["m"], abs=2e-3)  # not 0, not the mirror -0.258
        assert r.eps_g == pytest.approx(POSITIONAL_AT_2["eps_g"], rel=5e-3)
    a, b = runs[0.5], runs[0.8]
    for field in ("q", "m", "V", "eps_g", "eps_t"):
        assert getattr(a, field) == pytest.approx(getattr(b, field), rel=1e-5), field


def test_plain_damped_iteration_reaches_the_same_point():
    """Without Anderson, damping 0.5 oscillates off the fixed point; the step is then halved."""
    a = se.solve(2.0, 0.3, "positional", n_nodes=8, damping=0.5, anderson=0)
    b = se.solve(2.0, 0.3, "positional", n_nodes=8)
    assert a.converged and a.m == pytest.approx(b.m, rel=1e-5)


def test_agnostic_point_is_not_a_converged_positional_solution():
    """Started at m = 0 the positional iteration stays at the agnostic point (m = 0 is invariant):
    that point repels the damped iteration (mu_max > 1), so it is never reported as converged."""
    agn = se.solve(2.0, 0.3, "positional", n_nodes=8, init=(0.105, 0.0, 23.5, 0.0), max_escapes=0)
    assert abs(agn.m) < se.fixed_point.M_MIN and agn.mu_max > 1.05
    assert not agn.converged
    # with the escape (default), the same start finds the positional fixed point
    esc = se.solve(2.0, 0.3, "positional", n_nodes=8, init=(0.105, 0.0, 23.5, 0.0))
    assert esc.converged and esc.m == pytest.approx(0.2591, abs=2e-3)


def test_positional_branch_absent_is_reported_not_found():
    """omega = 0.15, alpha = 1.79: the converged map has no positional point with m > 0 (its
    one-step map sends m to at most 0.78 m), so the positional solve ends at m = 0, where
    mu_max < 1; it must say that the branch was not found."""
    r = se.solve(1.79, 0.15, "positional", n_nodes=12)
    assert abs(r.m) < se.fixed_point.M_MIN and r.residual < 1e-7
    assert not r.converged


def test_semantic_order_parameter_reported_nonnegative():
    """Q -> -Q flips (m, theta): a start at -theta gives the same point with theta >= 0."""
    plus = se.solve(2.0, 0.3, "semantic", n_nodes=8)
    minus = se.solve(2.0, 0.3, "semantic", n_nodes=8, init=(0.906838209589, 0.0, 14.575, -0.3472))
    assert plus.converged and minus.converged and plus.theta > 0
    assert minus.theta == pytest.approx(plus.theta, rel=1e-5)
    assert minus.eps_t == pytest.approx(plus.eps_t, rel=1e-6)


def test_summarize_standard_errors_by_hand():
    """Mean and standard error (sample std with ddof = 1, over sqrt(n)) on a hand-made result."""
    values = {"semantic": [1.0, 2.0, 4.0], "positional": [3.0, 5.0]}
    rows = []
    for init, vs in values.items():
        for k, v in enumerate(vs):
            rows.append(
                {
                    "alpha": 1.5,
                    "init": init,
                    "eps_g": v,
                    "eps_t": 2 * v,
                    "m": -v,
                    "theta_over_sigma2": v**2,
                    "eps_lin": 10.0 + k,
                }  # fmt: skip
            )
    rows.append({"alpha": 2.0, "init": "semantic", "eps_g": 7.0, "eps_t": 7.0, "m": 0.0,
                 "theta_over_sigma2": 0.0, "eps_lin": 1.0})  # fmt: skip
    out = {(r["alpha"], r["init"]): r for r in summarize(Result("x", "test", {}, rows))}
    sem = out[1.5, "semantic"]
    # semantic eps_g: mean 7/3, deviations (-4/3, -1/3, 5/3), sum of squares 42/9, var 7/3
    assert sem["eps_g"] == pytest.approx(7 / 3, rel=1e-12)
    assert sem["eps_g_se"] == pytest.approx(math.sqrt(7 / 3) / math.sqrt(3), rel=1e-12)
    assert sem["eps_t_se"] == pytest.approx(2 * math.sqrt(7 / 9), rel=1e-12)
    assert sem["m"] == pytest.approx(-7 / 3, rel=1e-12) and sem["m_se"] == pytest.approx(math.sqrt(7 / 9))
    # theta_over_sigma2 = (1, 4, 16): mean 7, var ((-6)^2 + (-3)^2 + 9^2)/2 = 63
    assert sem["theta_over_sigma2_se"] == pytest.approx(math.sqrt(63 / 3), rel=1e-12)
    assert sem["eps_lin_se"] == pytest.approx(1 / math.sqrt(3), rel=1e-12)  # (10, 11, 12)
    pos = out[1.5, "positional"]
    assert pos["eps_g"] == 4.0 and pos["eps_g_se"] == pytest.approx(1.0, rel=1e-12)  # sqrt(2)/sqrt(2)
    assert np.isnan(out[2.0, "semantic"]["eps_g_se"])  # one run: no standard error


def test_m_zero_is_invariant_for_the_alternative_A():
    """m = 0 is invariant for any A (content reflection z -> -z, S(-h) = S(h)), including the
    appendix's A, which is not swap-symmetric: m_hat(0) = 0 and m_hat is odd in m, while theta_hat
    is not zero (a generic point)."""
    A_alt = [[0.3, 0.7], [0.8, 0.2]]
    at = {m: se.hat_variables(1.5, 0.3, 0.08, m, 20.0, 0.05, A=A_alt, n_nodes=12) for m in (0.0, 0.1, -0.1)}
    assert abs(at[0.0]["m_hat"]) < 1e-12 * abs(at[0.1]["m_hat"]) + 1e-15
    assert at[0.1]["m_hat"] == pytest.approx(-at[-0.1]["m_hat"], rel=1e-9) and abs(at[0.1]["m_hat"]) > 1e-3
    assert at[0.0]["theta_hat"] > 1e-3
    mc = se.hat_variables(1.5, 0.3, 0.08, 0.0, 20.0, 0.05, A=A_alt, monte_carlo=100_000, seed=3)
    assert abs(mc["m_hat"]) < 0.05 * abs(at[0.1]["m_hat"])  # sampling noise only


def test_continuation_follows_the_semantic_branch_to_its_end():
    """omega = 0.3: the semantic branch, followed down in alpha, loses theta continuously between
    alpha = 0.70 and 0.65 (8 nodes); mu_max rises towards 1 there (a pitchfork: theta = 0 takes
    over), and the continued point at alpha = 0.8 is the one a fresh solve finds."""
    alphas = [0.8, 0.7, 0.65, 0.6]
    path = se.continue_branch(alphas, 0.3, "semantic", n_nodes=8)
    th = np.array([p.theta_over_sigma2 for p in path])
    mu = np.array([p.mu_max for p in path])
    assert all(p.converged for p in path)
    assert th[0] == pytest.approx(0.2173, abs=2e-3) and th[1] == pytest.approx(0.0907, abs=2e-3)
    assert np.all(th[2:] < 1e-3)  # collapsed onto theta = 0
    assert mu[1] > 0.95 and mu[2] > 0.95 and mu[0] < mu[1]  # near-marginal at the end of the branch
    fresh = se.solve(0.8, 0.3, "semantic", n_nodes=8)
    assert fresh.theta == pytest.approx(path[0].theta, rel=1e-4)


def test_continue_branch_rejects_bad_alphas():
    with pytest.raises(ValueError, match="alphas"):
        se.continue_branch([1.0, -0.5], 0.3, "semantic")
    with pytest.raises(ValueError, match="branch"):
        se.continue_branch([1.0], 0.3, "mixed")


@pytest.fixture(scope="module")
def branches():
    """pt_branches at omega = 0.3 on a small grid (8 nodes): both branches, both directions."""
    from attnlab.experiments.phase_transition.theory import pt_branches

    config = {"omega": 0.3, "sigma": 0.5, "lam": 0.01, "alpha_min": 0.5, "alpha_max": 1.1, "n_alpha": 3,
              "n_nodes": 8, "width": 0.01}  # fmt: skip
    return pt_branches(config, "cpu")


def _select(rows, kind, branch, direction=None):
    return [
        r for r in rows if r["kind"] == kind and r["branch"] == branch and direction in (None, r["direction"])
    ]


def test_semantic_branch_is_stable_where_found_and_ends_where_theta_collapses(branches):
    """Followed down from alpha = 1.1, the semantic branch is stable (mu_max < 1) while found, loses
    theta and ends between 0.65 and 0.67 (8 nodes; 0.65-0.70 in the continuation test above), with
    mu_max above 0.9 at its last point; one step past the end a fresh solve does not find it.

    Where in that interval the bisection stops depends on the CPU: at alpha = 0.659375 (one of its
    midpoints) the iteration converged on the machine this test was first written on (its bracket
    was [0.65625, 0.6625]); on an AMD EPYC, warm-started from alpha = 0.66875 (theta/sigma^2 =
    0.05, converged in 17 iterations) it cycles for 500 iterations (residual 2e-3, theta/sigma^2
    still 0.04), and so does a fresh solve, so the bracket is [0.659375, 0.66875]; at 0.6547 theta
    has collapsed. On an Intel Xeon the bracket is [0.65, 0.659375] (mu_max 0.995 at its last point):
    0.65 is itself one of the bisection's points, so the interval is closed at 0.65."""
    curve = _select(branches, "curve", "semantic", "down")
    on = [r for r in curve if r["on_branch"]]
    assert [r["alpha"] for r in on] == [1.1, 0.8]  # not at 0.5
    assert all(r["mu_max"] < 1 for r in on) and on[0]["mu_max"] < on[1]["mu_max"]
    assert on[0]["theta_over_sigma2"] > on[1]["theta_over_sigma2"] > 0.1
    (end,) = _select(branches, "end", "semantic", "down")
    assert 0.65 <= end["alpha_off"] < end["alpha_on"] < 0.67
    assert end["alpha_on"] - end["alpha_off"] <= 0.01
    assert 0.9 < end["mu_max"] < 1 and end["theta_over_sigma2"] < 0.1  # marginal, theta nearly gone
    past = se.solve(end["alpha_off"], 0.3, "semantic", n_nodes=8)
    assert not past.converged or past.theta_over_sigma2 < 1e-3  # not found there (see above)


def test_branches_agree_in_both_directions_and_positional_does_not_end(branches):
    """Up and down sweeps land on the same points where the branch is found (no hysteresis at a
    pitchfork), and the positional branch is found on the whole grid (it has no end there)."""
    for branch in ("semantic", "positional"):
        by = {(r["direction"], r["alpha"]): r for r in _select(branches, "curve", branch)}
        for a in (0.5, 0.8, 1.1):
            up, down = by["up", a], by["down", a]
            assert up["on_branch"] == down["on_branch"]
            assert up["eps_t"] == pytest.approx(down["eps_t"], rel=1e-5)
    pos = _select(branches, "curve", "positional")
    assert all(r["on_branch"] and r["m"] > 0.2 for r in pos)
    assert not _select(branches, "end", "positional")
