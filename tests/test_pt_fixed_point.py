"""Tests of the fixed-point solver of Part II (pt = phase transition): equations and fixed_point."""

import numpy as np
import pytest

from attnlab.theory import phase_transition as se

FAST = {"n_nodes": 8}  # coarse quadrature: fast, within ~1% of converged values


@pytest.fixture(scope="module")
def both_at_2():
    return se.solve_both(2.0, 0.3, **FAST)


def test_fixed_points_match_published_values(both_at_2):
    # Cui et al. (2024), omega = 0.3, alpha = 2 (values quoted in the paper spec)
    sem, pos = both_at_2["semantic"], both_at_2["positional"]
    assert sem.converged and pos.converged
    assert sem.eps_g == pytest.approx(0.00140, rel=0.02)
    assert sem.theta_over_sigma2 == pytest.approx(0.634, rel=0.02)
    assert sem.eps_t == pytest.approx(0.00360, rel=0.02)
    assert pos.eps_g == pytest.approx(0.00349, rel=0.02)
    assert pos.m == pytest.approx(0.259, rel=0.02)
    assert pos.eps_t == pytest.approx(0.00452, rel=0.02)


def test_branches_stay_in_their_invariant_subspace(both_at_2):
    assert both_at_2["positional"].theta == 0.0
    assert both_at_2["semantic"].m == 0.0
    assert both_at_2["global"].branch == "semantic"  # lower training loss at alpha = 2
    assert both_at_2["semantic"].as_dict()["branch"] == "semantic"


def test_positional_branch_wins_at_small_alpha():
    glob = se.global_minimum(0.5, 0.3, n_nodes=6)
    assert glob.branch == "positional" and glob.converged


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"alpha": -1.0}, "alpha"),
        ({"alpha": 0.0}, "alpha"),
        ({"omega": 1.5}, "omega"),
        ({"branch": "both"}, "branch"),
        ({"sigma": 0.0}, "sigma"),
        ({"lam": -0.1}, "lam"),
        ({"A": np.eye(3)}, "A"),
        ({"A": [[np.nan, 0], [0, 1]]}, "A"),
        ({"n_nodes": 1}, "n_nodes"),
        ({"damping": 1.0}, "damping"),
        ({"init": (0.1, 0.0, 1.0)}, "init"),
        ({"init": (0.01, 0.0, 1.0, 0.5)}, "init"),
        ({"tol": 0.0}, "tol"),
    ],
)
def test_solve_rejects_bad_input(kwargs, name):
    args = {"alpha": 1.0, "omega": 0.3, "branch": "semantic"} | kwargs
    with pytest.raises(ValueError, match=name):
        se.solve(**args)


def test_hat_variables_quadrature_vs_monte_carlo():
    gh = se.hat_variables(2.0, 0.3, 0.11, 0.0, 12.7, 0.158, n_nodes=8)
    mc = se.hat_variables(2.0, 0.3, 0.11, 0.0, 12.7, 0.158, monte_carlo=40_000, seed=0)
    assert set(gh) == {"q_hat", "m_hat", "V_hat", "theta_hat", "q", "m", "V", "theta"}
    assert abs(gh["m_hat"]) < 1e-12  # m = 0 is invariant
    for k in ("q_hat", "V_hat", "theta_hat"):
        assert mc[k] == pytest.approx(gh[k], rel=0.05)
    with pytest.raises(ValueError, match="theta"):
        se.hat_variables(2.0, 0.3, 0.01, 0.0, 12.7, 0.158)
    with pytest.raises(ValueError, match="monte_carlo"):
        se.hat_variables(2.0, 0.3, 0.11, 0.0, 12.7, 0.1, monte_carlo=5)


def _direct_hats(alpha, omega, q, m, V, theta, n, seed, sigma=0.5):
    """eq-pt-se-hats by Monte Carlo, written out: the draws of hat_variables, the public prox."""
    from attnlab.validation import make_rng

    xi, eta = make_rng(seed).standard_normal((2, 2, n))  # [2 tokens, n] each, as hat_variables draws
    rho, sq = sigma**2, np.sqrt(q)
    s_star = np.sqrt(rho - theta**2 / q)
    u = np.stack([sq * xi[0] + m, sq * xi[1] - m], axis=1)  # [n, 2]
    hs = np.stack([theta / sq * xi[0] + s_star * eta[0], theta / sq * xi[1] + s_star * eta[1]], axis=1)
    # the global prox: from u, 0 and the mirror image -u (given as an extra start, so that this
    # reference does not depend on which starts se.prox takes by default)
    g = (se.prox(u, hs, V, omega, start=-u)[0] - u) / V
    theta_hat = alpha * np.mean(g[:, 0] * eta[0] + g[:, 1] * eta[1]) / s_star
    V_hat = -alpha * np.mean(g[:, 0] * xi[0] + g[:, 1] * xi[1]) / sq + theta * theta_hat / q
    return {"q_hat": alpha * np.mean((g**2).sum(1)), "m_hat": alpha * np.mean(g[:, 0] - g[:, 1]),
            "V_hat": V_hat, "theta_hat": theta_hat}  # fmt: skip


def test_monte_carlo_step_uses_the_solvers_global_prox():
    # At the semantic fixed point of omega = 0.5, alpha = 1.19 (20 nodes) the prox's mirror valley
    # near -u is the lower one at many samples; a Monte-Carlo step whose prox starts only from u
    # and 0 misses it there and moves the fixed point by 4 standard errors (chapter 03). The step
    # must be the direct average over the global prox, sample by sample.
    q, V, theta = 0.0714930703, 28.6114732195, 0.25 * 0.1892769150
    mc = se.hat_variables(1.19, 0.5, q, 0.0, V, theta, monte_carlo=20_000, seed=3)
    ref = _direct_hats(1.19, 0.5, q, 0.0, V, theta, 20_000, 3)
    for k, v in ref.items():
        assert mc[k] == pytest.approx(v, rel=1e-9, abs=1e-12), k


def test_theta_zero_is_stable_at_small_alpha():
    # Below alpha ~ 0.6 (omega = 0.3) the semantic branch collapses to theta = 0: the map
    # theta -> G_theta contracts near theta = 0. At the authors' stored point for alpha = 0.345
    # (q = 0.0274, V = 29.59, theta = 0.0223), with theta scaled down to 0.1x, the slope
    # G_theta / theta is ~0.7 by the Stein quadrature and by plain Monte Carlo. The authors' rule
    # has nodes on the surface where the prox jumps, so its theta_new tends to a positive constant
    # as theta -> 0+ (test_authors_rule_jumps_at_theta_zero), which is why their stored branch keeps
    # theta > 0 down to alpha -> 0.
    q, V, theta, alpha = 0.0274166, 29.5904, 0.00222546, 0.345455
    for n in (8, 12):
        h = se.hat_variables(alpha, 0.3, q, 0.0, V, theta, n_nodes=n)
        assert 0.5 < h["theta"] / theta < 0.85
    mc = se.hat_variables(alpha, 0.3, q, 0.0, V, theta, monte_carlo=400_000, seed=0)
    assert 0.4 < mc["theta"] / theta < 0.9
    sem = se.solve(0.4, 0.3, "semantic", **FAST)
    assert sem.converged and abs(sem.theta) < 1e-3


@pytest.mark.parametrize("damping", [0.8, 0.35])
@pytest.mark.parametrize("branch", ["semantic", "positional"])
def test_one_plain_step_of_solve_moves_by_one_minus_the_damping(both_at_2, branch, damping):
    # solve's iteration x <- x + (1 - damping) (G(x) - x), written out from its documented meaning
    # ("damping is the weight of the old iterate"), near the fixed point where no step is clamped
    from attnlab.theory.phase_transition.equations import _Problem
    from attnlab.theory.phase_transition.fixed_point import _iterate, _residual
    from attnlab.theory.phase_transition.prox import _check_common

    fp = both_at_2[branch]
    free = [0, 1, 2] if branch == "positional" else [0, 2, 3]
    x0 = np.zeros(4)
    x0[free] = np.array([fp.q, fp.m, fp.V, fp.theta])[free] * np.array([1.013, 0.991, 1.007])

    def problem():
        return _Problem(*_check_common(2.0, 0.3, 0.5, 0.01, None), 8, 1e-10, branch)

    *hats, _ = problem().hats(*x0, all_starts=False, fresh=False)
    gx = problem().overlaps(*problem().restrict(hats))
    assert _residual(gx, x0) > 1e-4  # a real step, far above the tolerance
    x1, *_ = _iterate(problem(), x0.copy(), damping, 1e-12, 1, 0)
    want = x0 + (1 - damping) * (gx - x0)
    assert np.max(np.abs((1 - damping) * (gx - x0)) / (np.abs(x0) + 0.05)) < 0.2  # not clamped
    np.testing.assert_allclose(x1, want, rtol=1e-9, atol=1e-12)


def test_verify_min_damping_right_and_wrong_answers():
    # mu = -5.5: (1 - g)(-5.5) + g > -1  <=>  g > 4.5 / 6.5
    assert se.verify_min_damping(4.5 / 6.5, -5.5).startswith("Correct")
    with pytest.raises(ValueError, match="smallest damping"):
        se.verify_min_damping(0.5, -5.5)
    assert se.verify_min_damping(None, 1.4).startswith("Correct")  # no damping converges
    with pytest.raises(ValueError, match="mu >= 1"):
        se.verify_min_damping(0.9, 1.4)
    assert se.verify_min_damping(0.0, 0.5).startswith("Correct")
    with pytest.raises(ValueError, match="close enough to 1"):
        se.verify_min_damping(None, 0.5)
    # the criterion itself: just above the answer the damped step contracts, just below it does not
    g = 4.5 / 6.5
    assert abs((1 - (g + 1e-3)) * -5.5 + g + 1e-3) < 1 < abs((1 - (g - 1e-3)) * -5.5 + g - 1e-3)
