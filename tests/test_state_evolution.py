"""Tests of attnlab.theory.state_evolution (Part II, chapter 02): quadrature, prox, fixed points."""

import numpy as np
import pytest

from attnlab.theory import state_evolution as se

FAST = {"n_nodes": 8}  # coarse quadrature: fast, within ~1% of converged values


# ------------------------------------------------------------------ quadrature


def test_product_rule_moments():
    X, W = se.product_rule(8, dim=4, prune=0.0)
    assert X.shape == (4, 8**4) and W.shape == (8**4,)
    assert np.isclose(W.sum(), 1.0)
    assert np.allclose(X @ W, 0.0, atol=1e-12)
    assert np.allclose((X**2) @ W, 1.0)
    assert np.allclose((X**4) @ W, 3.0)
    assert np.isclose(W @ (X[0] ** 2 * X[1] ** 2), 1.0)


def test_product_rule_pruning_keeps_mass():
    X, W = se.product_rule(12, dim=4, prune=1e-10)
    assert W.size < 12**4
    assert np.isclose(W.sum(), 1.0)
    assert np.allclose((X**2) @ W, 1.0, rtol=1e-6)


# ------------------------------------------------------------------ prox


def test_prox_matches_brute_force_global_minimum():
    # global minimum on a fine grid of h, for a few (u, h*) pairs
    rng = np.random.default_rng(0)
    u = rng.normal(0, 0.6, size=(6, 2))
    hs = rng.normal(0, 0.7, size=(6, 2))
    h, val = se.prox(u, hs, V=12.0, omega=0.3)
    grid = np.linspace(-4, 4, 801)
    H1, H2 = (g.ravel() for g in np.meshgrid(grid, grid, indexing="ij"))
    for i in range(len(u)):
        T = se._target(np.full(1, hs[i, 0]), np.full(1, hs[i, 1]), 0.3, se.DEFAULT_A)
        f = se._objective(H1, H2, u[i, 0], u[i, 1], 12.0, T, 0.25)
        assert val[i] <= f.min() + 1e-12
        assert f.min() - val[i] < 1e-4  # the grid minimum is close to the prox value
        assert np.hypot(*(h[i] - [H1[f.argmin()], H2[f.argmin()]])) < 0.05


def test_prox_is_stationary():
    rng = np.random.default_rng(1)
    u = rng.normal(0, 1.0, size=(500, 2))
    hs = rng.normal(0, 0.5, size=(500, 2))
    h, _ = se.prox(u, hs, V=10.0, omega=0.3)
    T = se._target(hs[:, 0], hs[:, 1], 0.3, se.DEFAULT_A)
    G1, G2, *_ = se._grad_hess(h[:, 0], h[:, 1], u[:, 0], u[:, 1], 10.0, T, 0.25)
    assert np.max(np.abs(G1) + np.abs(G2)) < 1e-7


# ------------------------------------------------------------------ baseline


def test_eps_lin_value_and_scaling():
    # the spec quotes eps_lin ≈ 0.00197 at omega = 0.3 (Cui et al. 2024)
    assert se.eps_lin(0.3) == pytest.approx(0.00197, rel=5e-3)
    assert se.eps_lin(0.0) / se.eps_lin(0.5) == pytest.approx(4.0)
    assert se.eps_lin(1.0) == 0.0
    assert se.check_eps_lin(se.eps_lin(0.2), 0.2) == pytest.approx(se.eps_lin(0.2))
    with pytest.raises(ValueError, match="answer"):
        se.check_eps_lin(0.01, 0.3)


# ------------------------------------------------------------------ fixed points


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


def test_branch_curves_shapes():
    out = se.branch_curves([1.5, 2.0], 0.3, n_nodes=6)
    assert out["semantic"]["eps_g"].shape == (2,)
    assert set(out["global"]["branch"]) <= {"semantic", "positional"}
    assert out["eps_lin"] == pytest.approx(se.eps_lin(0.3))


def test_alpha_c_root_finding():
    a = se.alpha_c(0.3, bracket=(1.1, 1.45), n_grid=2, xtol=1e-2, n_nodes=6)
    assert 1.15 < a < 1.40


# ------------------------------------------------------------------ bad input


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


def test_other_functions_reject_bad_input():
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
    with pytest.raises(ValueError, match="u"):
        se.prox(np.zeros((3, 3)), np.zeros((3, 2)), 1.0, 0.3)
    with pytest.raises(ValueError, match="h_star"):
        se.prox(np.zeros((3, 2)), np.zeros((2, 2)), 1.0, 0.3)
    with pytest.raises(ValueError, match="V"):
        se.prox(np.zeros((3, 2)), np.zeros((3, 2)), -1.0, 0.3)
    with pytest.raises(ValueError, match="n_nodes"):
        se.product_rule(0)


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


def test_phase_diagram_experiment_runs_at_tiny_size():
    from attnlab.experiments import run

    small = {"n_alpha": 2, "n_omega": 1, "n_nodes": 4, "n_jobs": 1, "alpha_min": 1.5, "alpha_max": 2.0}
    res = run("pt_phase_diagram", "book", overrides=small, cache=False)
    assert len(res.rows) == 2
    assert set(res.column("global")) <= {"semantic", "positional"}


def test_prox_escapes_the_symmetric_stationary_point():
    # at u = 0 the origin is a stationary point of the prox objective (h -> -h symmetry);
    # the prox must return the minimum, which is continuous in u
    t = np.linspace(-0.01, 0.01, 21)
    u = np.stack([t, -t], axis=1)
    _, val = se.prox(u, np.tile([1.0, -1.0], (t.size, 1)), 11.4, 0.3)
    assert np.max(np.abs(np.diff(val))) < 1e-3


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


# ------------------------------------------------------------------ the authors' procedure


def test_solve_authors_reproduces_their_stored_fixed_points():
    # Published (Cui et al. 2024, theory/repl_softmax_Mixed_sig0.5_lamb0.01_omega0.3*.csv, alpha = 2):
    # (q, V, theta or m, mse = 2 eps_g, Phi = -eps_t). NOT computed here.
    published = {
        "semantic": (0.11415017990617564, 12.327885683844869, 0.15856055220203275, 0.0027930868446673918,
                     -0.003599352337970492),
        "positional": (0.050012313500147836, 11.036146049061081, 0.25856717789921435, 0.006980917367439443,
                       -0.004515268863535892),
    }  # fmt: skip
    for b, (q, V, overlap, mse, phi) in published.items():
        r = se.solve_authors(2.0, 0.3, b)
        assert r.converged and r.rule == "authors"
        ours = (r.q, r.V, r.theta if b == "semantic" else r.m, 2 * r.eps_g, -r.eps_t)
        assert np.allclose(ours, (q, V, overlap, mse, phi), rtol=1e-3, atol=0)


def test_solve_authors_keeps_theta_where_the_converged_map_loses_it():
    # Published semantic point at alpha = 0.4573 (omega = 0.3): theta = 0.03312. NOT computed here.
    r = se.solve_authors(0.4572727272727273, 0.3, "semantic")
    assert r.theta == pytest.approx(0.033118791200089384, rel=1e-3)
    assert abs(se.solve(0.4572727272727273, 0.3, "semantic", **FAST).theta) < 1e-3


def test_eps_lin_authors_is_above_the_true_minimum():
    exact, theirs = se.eps_lin(0.3), se.eps_lin(0.3, method="authors")
    assert exact == pytest.approx(0.00197138, rel=1e-4)
    assert 1.005 < theirs / exact < 1.015  # their B is slightly off the best one


def test_thresholds_with_the_authors_method():
    a = se.alpha_l(0.3, bracket=(1.40, 1.50), n_grid=2, xtol=1e-3, method="authors")
    assert a == pytest.approx(1.4506, abs=5e-3)  # their table: 1.4506
    with pytest.raises(ValueError, match="n_nodes"):
        se.alpha_c(0.3, method="authors", n_nodes=8)
    with pytest.raises(ValueError, match="method"):
        se.alpha_l(0.3, method="exact")
    with pytest.raises(ValueError, match="method"):
        se.eps_lin(0.3, method="quadpy")


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [({"alpha": 0.0}, "alpha"), ({"branch": "both"}, "branch"), ({"tol": 0.0}, "tol"),
     ({"max_iter": 0}, "max_iter"), ({"damping": 1.0}, "damping")],
)  # fmt: skip
def test_solve_authors_rejects_bad_input(kwargs, name):
    args = {"alpha": 1.0, "omega": 0.3, "branch": "semantic"} | kwargs
    with pytest.raises(ValueError, match=name):
        se.solve_authors(**args)


def test_authors_rule_jumps_at_theta_zero():
    # same point as test_theta_zero_is_stable_at_small_alpha; theta_new does not vanish with theta
    q, V, alpha = 0.0274166, 29.5904, 0.345455
    new = [se.hat_variables(alpha, 0.3, q, 0.0, V, th, method="authors")["theta"] for th in (1e-4, 1e-6)]
    assert new[0] > 0.005 and new[1] == pytest.approx(new[0], rel=0.05)
    at_zero = se.hat_variables(alpha, 0.3, q, 0.0, V, 0.0, method="authors")["theta"]
    assert at_zero == pytest.approx(0, abs=1e-12)  # exactly zero at theta = 0: the map jumps at 0+
    with pytest.raises(ValueError, match="monte_carlo"):
        se.hat_variables(alpha, 0.3, q, 0.0, V, 1e-4, method="authors", monte_carlo=1000)
