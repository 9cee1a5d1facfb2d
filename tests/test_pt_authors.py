"""Tests of attnlab.theory.phase_transition.authors (pt = phase transition): the authors' procedure."""

import numpy as np
import pytest

from attnlab.theory import phase_transition as se

FAST = {"n_nodes": 8}  # coarse quadrature: fast, within ~1% of converged values


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


def test_solve_authors_holds_the_branch_and_gives_their_metastable_values():
    # Their procedure (nested 12-point degree-7 rule, prox from 0, damping 0.8, stop at 1e-4)
    # with the branch held gives theta/sigma^2 = 0.3826 at omega = 0.5, alpha = 1.1875 (their
    # stored theory 0.394) and m = 0.2272 at omega = 0.15, alpha = 1.79 (standard A). Their own
    # BFGS prox, unheld, gives 0.3825 with m < 1e-9 (committed in pt_authors_rules, 30 s); our
    # Newton prox unheld drifts (test_the_newton_prox_makes_m_zero_repel_where_bfgs_keeps_it).
    # The tolerances leave room for the stopping rule (a damping of 0.7 to 0.9 moves both values
    # by less than 6e-5) and are 40x smaller than the gap to their stored 0.394.
    sem = se.solve_authors(1.1875, 0.5, "semantic")
    assert sem.converged and sem.m == 0.0
    assert sem.theta_over_sigma2 == pytest.approx(0.3826, abs=3e-4)
    assert sem.V == pytest.approx(22.6, abs=0.05)
    pos = se.solve_authors(1.79, 0.15, "positional")
    assert pos.converged and pos.theta == 0.0
    assert pos.m == pytest.approx(0.2272, abs=2e-4)


def test_solve_authors_damps_with_their_weight_of_the_old_value():
    # one step from their positional start is 0.8 * start + 0.2 * (the map's value there)
    alpha, omega = 1.79, 0.15
    start = np.array(se.STARTS["positional"])
    new = se.hat_variables(alpha, omega, *start, method="authors")
    new = np.array([new[k] for k in ("q", "m", "V", "theta")])
    one = se.solve_authors(alpha, omega, "positional", max_iter=1)
    assert not one.converged and one.iterations == 1
    expected = 0.8 * start + 0.2 * new
    assert np.allclose([one.q, one.m, one.V, one.theta], expected, rtol=1e-12, atol=1e-15)
    assert not np.allclose(expected, 0.7 * start + 0.3 * new, rtol=1e-3)  # the test can fail


def test_solve_authors_on_gauss_hermite_rules_moves_with_the_order():
    # Issue 36: at omega = 0.5, alpha = 1.19 (semantic) the authors' procedure with the hats on
    # Gauss-Hermite rules gives 0.045 (3 points per dimension) and 0.313 (4), against 0.384 with
    # their degree-7 rule: the value is a property of the rule (chapter 03, pt_authors_rules).
    values = {n: se.solve_authors(1.19, 0.5, "semantic", n_nodes=n) for n in (3, 4)}
    assert all(r.converged and r.rule == "authors, gauss-hermite" for r in values.values())
    assert values[3].n_nodes == 3 and values[3].m == 0.0
    assert values[3].theta_over_sigma2 == pytest.approx(0.0452, abs=2e-3)
    assert values[4].theta_over_sigma2 == pytest.approx(0.3125, abs=2e-3)
    assert se.solve_authors(1.19, 0.5, "semantic").theta_over_sigma2 == pytest.approx(0.3836, abs=3e-4)
    with pytest.raises(ValueError, match="n_nodes"):
        se.solve_authors(1.19, 0.5, "semantic", n_nodes=1)


def test_the_newton_prox_makes_m_zero_repel_where_bfgs_keeps_it():
    # Why solve_authors holds the branch: at their held semantic fixed point (omega = 0.5,
    # alpha = 1.1875) one step of their map, unheld, from a small m. With BFGS from 0 (theirs) m
    # halves: m = 0 attracts, and their procedure stays on the semantic branch by itself. With our
    # Newton prox from 0 it nearly doubles: m = 0 repels, and the unheld iteration drifts to the
    # positional side (m = -0.28, theta ~ 0).
    from attnlab.theory.phase_transition.authors import _AuthorsProblem

    fp = se.solve_authors(1.1875, 0.5, "semantic")
    m = 1e-6
    ratio = {}
    for prox in ("newton", "bfgs"):
        prob = _AuthorsProblem(1.1875, 0.5, 0.5, 0.01, se.DEFAULT_A, None, None, prox)
        ratio[prox] = prob.overlaps(*prob.hats(fp.q, m, fp.V, fp.theta))[1] / m
    assert ratio["bfgs"] == pytest.approx(0.49, abs=0.05)
    assert ratio["newton"] == pytest.approx(1.84, abs=0.05)
    drift = se.solve_authors(1.1875, 0.5, "semantic", hold=False)
    assert drift.converged and drift.m < -0.2 and abs(drift.theta_over_sigma2) < 0.01


def test_solve_authors_rejects_a_bad_prox_or_hold():
    with pytest.raises(ValueError, match="prox"):
        se.solve_authors(1.0, 0.3, "semantic", prox="lbfgs")
    with pytest.raises(ValueError, match="hold"):
        se.solve_authors(1.0, 0.3, "semantic", hold="yes")


def test_the_committed_authors_rules_are_todays_code():
    # pt_authors_rules (committed, paper scale): re-derive its cheap rows with today's code: the
    # hold rows with the Newton prox, a rule row, and the first Monte-Carlo step of the converged
    # semantic point (one seed of 10^6 samples, the global prox)
    from attnlab.experiments import load_result

    res = load_result("pt_authors_rules", "paper")
    rows = res.rows
    for r in (r for r in rows if r["kind"] == "hold" and r["prox"] == "newton"):
        fp = se.solve_authors(r["alpha"], r["omega"], "semantic", hold=r["hold"] in (True, "True"))
        assert fp.theta_over_sigma2 == pytest.approx(r["value"], abs=1e-9)
        assert fp.m == pytest.approx(r["m"], abs=1e-9)
    bfgs = next(r for r in rows if r["kind"] == "hold" and r["prox"] == "bfgs")
    assert abs(bfgs["m"]) < 1e-6 and bfgs["value"] == pytest.approx(0.3825, abs=3e-4)
    rule = next(r for r in rows if r["kind"] == "rule" and r["n_nodes"] == 4)
    fp = se.solve_authors(rule["alpha"], rule["omega"], "semantic", n_nodes=4)
    assert fp.theta_over_sigma2 == pytest.approx(rule["value"], abs=1e-9)
    mc = next(r for r in rows if r["kind"] == "monte carlo" and r["start"] == "ours" and r["seed"] == 0
              and r["branch"] == "semantic")  # fmt: skip
    cfg = res.config
    fp = se.solve(mc["alpha"], mc["omega"], "semantic", n_nodes=cfg["n_nodes"])
    assert fp.theta_over_sigma2 == pytest.approx(mc["value_start"], abs=1e-7)
    args = (mc["alpha"], mc["omega"], fp.q, fp.m, fp.V, fp.theta)
    new = se.hat_variables(*args, monte_carlo=cfg["mc_samples"], seed=0)
    assert new["theta"] / 0.25 == pytest.approx(mc["value"], abs=1e-7)
