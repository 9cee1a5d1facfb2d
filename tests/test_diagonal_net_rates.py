"""Tests of attnlab.theory.diagonal_net.rates: the exponential bounds, the Hessian and the asymptotic rate."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.tasks import histogram as th
from attnlab.theory import diagonal_net as dn

d, N = 4, 5


def rand_point(scale, seed, size=d):
    rng = np.random.default_rng(seed)
    return scale * rng.standard_normal((size, size)), scale * rng.standard_normal(size)


def flat_grad(Q, v, M, S):
    gQ, gv = dn.grad_df(Q, v, M) if S is None else dn.grad_tf(Q, v, M, S)
    return np.concatenate([gQ.ravel(), gv])


def test_exponential_bounds_hold_along_trajectories():
    M = th.task_matrix("histogram", d)
    S = th.count_moments(N, d)
    Q0, v0 = rand_point(0.5, 6)
    t = np.linspace(0, 40, 401)
    Qt, vt = dn.gradient_flow(Q0, v0, M, t)
    L = dn.l_df(Qt, vt, M)
    i = int(np.argmax(L < 0.25))
    assert L[i] < 0.25 and L[-1] < 1e-8
    B = dn.exponential_bound_df(Qt[i], vt[i], M, t[i:] - t[i])
    assert np.all(L[i:] <= B * (1 + 1e-8) + 1e-20)
    t = np.linspace(0, 20, 401)
    Qt, vt = dn.gradient_flow_tf(Q0, v0, M, t, S)
    L = dn.l_tf(Qt, vt, M, S)
    lam = dn.moment_spectrum(S)[:, 0].min()
    i = int(np.argmax(L < lam / 4))
    assert L[i] < lam / 4 and L[-1] < 1e-8
    B = dn.exponential_bound_tf(Qt[i], vt[i], M, S, t[i:] - t[i])
    assert np.all(L[i:] <= B * (1 + 1e-8) + 1e-20)


def test_bound_rate_tf_by_hand_where_its_error_radius_is_tight():
    # Delta = eps e_a u^T with u the bottom eigenvector of S_a, a the row with the smallest
    # eigenvalue lambda: then l_tf = lambda/2 ||Delta||^2, so sqrt(2 l_tf / lambda) = eps exactly
    M = th.task_matrix("histogram+next_letter", d)
    S = th.count_moments(N, d)
    w, U = np.linalg.eigh(S)  # [d, d], [d, d, d]
    a = int(np.argmin(w[:, 0]))
    lam, eps = w[a, 0], 0.3
    Delta = np.zeros((d, d))
    Delta[a] = eps * U[a][:, 0]
    v = np.array([1.3, -0.7, 0.9, 1.6])
    Q = (M + Delta) / v
    assert abs(0.5 * Delta[a] @ S[a] @ Delta[a] - lam / 2 * eps**2) < 1e-12
    rho = np.linalg.norm(M, axis=0) - eps
    dk = v**2 - np.sum(Q**2, axis=0)
    mu = np.min((dk + np.sqrt(dk**2 + 4 * rho**2)) / 2)
    assert abs(dn.bound_rate_tf(Q, v, M, S) - lam * mu) < 1e-12 * lam * mu


@pytest.mark.parametrize("with_S", [False, True])
def test_hessian_matches_finite_differences_of_the_gradient(with_S):
    M = th.task_matrix("histogram+next_letter", d)
    S = th.count_moments(N, d) if with_S else None
    rng = np.random.default_rng(0)
    Q, v = rng.standard_normal((d, d)), rng.standard_normal(d)  # generic point, not a minimum
    x, eps = np.concatenate([Q.ravel(), v]), 1e-6
    cols = []
    for e in np.eye(x.size):
        xp, xm = x + eps * e, x - eps * e
        cols.append(
            (
                flat_grad(xp[: d * d].reshape(d, d), xp[d * d :], M, S)
                - flat_grad(xm[: d * d].reshape(d, d), xm[d * d :], M, S)
            )
            / (2 * eps)
        )
    H = dn.hessian(Q, v, M, S)
    assert np.abs(H - np.array(cols)).max() < 1e-7 * np.abs(H).max()


def test_asymptotic_rate_closed_form_equals_the_hessian_and_the_measured_decay():
    M = th.class_matrix([0, 1, 1, 2])
    rng = np.random.default_rng(2)
    Q0, v0 = 0.8 * rng.standard_normal((d, d)), 0.8 * rng.standard_normal(d)
    Q_inf, v_inf = dn.limit_point(Q0, v0, M)
    predicted = dn.asymptotic_rate_df(Q0, v0, M)
    assert abs(dn.asymptotic_rate(Q_inf, v_inf, M) - predicted) < 1e-9
    t = np.linspace(0, 60, 601)
    Q_t, v_t = dn.gradient_flow(Q0, v0, M, t)
    L = dn.l_df(Q_t, v_t, M)
    sel = (L < 1e-10) & (L > 1e-20)
    measured = -np.polyfit(t[sel], np.log(L[sel]), 1)[0]
    assert abs(measured / predicted - 1) < 0.02


def measured_rate(Q0, v0, M, t_end):
    t = np.linspace(0, t_end, 2001)
    Q_t, v_t = dn.gradient_flow(Q0, v0, M, t, rtol=1e-13, atol=1e-16)
    L = dn.l_df(Q_t, v_t, M)
    sel = (L < 1e-9) & (L > 1e-16)
    return -np.polyfit(t[sel], np.log(L[sel]), 1)[0]


def test_a_column_parallel_to_its_target_decays_at_its_own_rate():
    # prop-rate: the first column is parallel to m_1 and has the most negative delta; its slow
    # direction (rate 2 v_1(inf)^2 = 0.220) is never excited, so the second column sets the rate
    M = np.eye(2)
    Q0, v0 = np.array([[3.0, 0.3], [0.0, 0.5]]), np.array([0.1, 0.5])
    dk = dn.delta(Q0, v0)
    v_inf2 = (dk + np.sqrt(dk**2 + 4)) / 2
    assert abs(2 * v_inf2.min() - 0.2198) < 1e-4  # the Hessian's slowest rate: not what happens
    predicted = dn.asymptotic_rate_df(Q0, v0, M)
    assert abs(predicted - 2 * v_inf2[1]) < 1e-12 and abs(predicted - 1.912) < 1e-3
    assert abs(measured_rate(Q0, v0, M, 25.0) / predicted - 1) < 0.02
    rates = dn.column_rates_df(dk, 1.0, [True, False])
    assert abs(rates[0] - 2 * np.sqrt(dk[0] ** 2 + 4)) < 1e-12  # the parallel column: 2 gamma_1
    # with any orthogonal part in the first column, its slow direction takes over
    Q1 = Q0.copy()
    Q1[1, 0] = 1e-3
    dk1 = dn.delta(Q1, v0)[0]
    slow = dn.asymptotic_rate_df(Q1, v0, M)
    assert abs(slow - (dk1 + np.sqrt(dk1**2 + 4))) < 1e-12
    assert abs(measured_rate(Q1, v0, M, 150.0) / slow - 1) < 0.02


def test_a_zero_target_column_decays_at_twice_its_imbalance():
    M = np.diag([1.0, 0.0])
    Q0, v0 = np.array([[0.4, 0.3], [0.2, -0.5]]), np.array([0.7, 0.9])  # delta_2 = 0.81 - 0.34
    predicted = dn.asymptotic_rate_df(Q0, v0, M)
    assert abs(predicted - 2 * dn.delta(Q0, v0)[1]) < 1e-12
    assert abs(measured_rate(Q0, v0, M, 40.0) / predicted - 1) < 0.02


def test_rate_constant_is_the_rate_of_gaussian_starts_and_creeps_towards_one():
    d, sigma, n = 6, 1.0, 3000
    drawn = dn.rate_constant(d, sigma, n_draws=n, seed=0)
    rng = np.random.default_rng(1)
    starts = [(sigma * rng.standard_normal((d, d)), sigma * rng.standard_normal(d)) for _ in range(n)]
    direct = np.array([dn.asymptotic_rate_df(Q0, v0, np.eye(d)) for Q0, v0 in starts])
    direct *= (d - 1) * sigma**2 / 2
    for q in (0.1, 0.5, 0.9):  # the same distribution: quantiles agree within sampling error
        assert abs(np.quantile(drawn, q) - np.quantile(direct, q)) < 0.03
    assert np.array_equal(drawn, dn.rate_constant(d, sigma, n_draws=n, seed=0))
    med, spread = [], []
    for dd in (6, 26, 100, 1000):
        r = dn.rate_constant(dd, sigma, n_draws=2000, seed=2)
        med.append(np.median(r))
        spread.append(np.quantile(r, 0.9) - np.quantile(r, 0.1))
    assert np.all(np.diff(med) > 0) and np.all(np.diff(spread) < 0) and med[-1] < 1
    # roughly 0.52, 0.61, 0.72 and 0.87 at d = 6, 26, 100, 1000
    assert np.all(np.abs(np.array(med) - [0.52, 0.61, 0.72, 0.87]) < [0.03, 0.02, 0.02, 0.01])
    # the constant is a distribution, not the range "0.55-0.58" of two draws: few draws fall in it
    assert np.mean((drawn > 0.55) & (drawn < 0.58)) < 0.1


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: dn.bound_rate_df(np.zeros((3, 3)), np.zeros(3), np.eye(3)), "Q, v"),
        (lambda: dn.bound_rate_tf(np.zeros((3, 3)), np.zeros(3), np.eye(3), 5), "Q, v"),
        (lambda: dn.bound_rate_tf(np.eye(3), np.ones(3), np.eye(3), 1), "S"),
        (lambda: dn.asymptotic_rate(np.eye(2), np.zeros(2), np.eye(2)), "minimum"),
        (lambda: dn.asymptotic_rate_df(np.zeros((2, 2)), np.zeros(2), np.eye(2)), "saddle"),
        (lambda: dn.asymptotic_rate_df(np.eye(2), np.ones(2), np.eye(2), rtol=-1.0), "rtol"),
        (lambda: dn.column_rates_df([0.0], [-1.0], [False]), "m_norm"),
        (lambda: dn.rate_constant(1, 1.0, n_draws=10), "d"),
        (lambda: dn.rate_constant(3, 0.0, n_draws=10), "sigma"),
        (lambda: dn.rate_constant(3, 1.0, n_draws=0), "n_draws"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_verify_asymptotic_rate_on_a_right_and_a_wrong_answer():
    M = np.eye(2)
    Q0, v0 = np.array([[3.0, 0.3], [0.0, 0.5]]), np.array([0.1, 0.5])
    dk = dn.delta(Q0, v0)
    assert "Correct" in dn.verify_asymptotic_rate(dk[1] + np.sqrt(dk[1] ** 2 + 4), Q0, v0, M)
    with pytest.raises(AssertionError, match="excites every direction"):
        dn.verify_asymptotic_rate(dk[0] + np.sqrt(dk[0] ** 2 + 4), Q0, v0, M)
    with pytest.raises(AssertionError, match="slowest"):
        dn.verify_asymptotic_rate(1.0, Q0, v0, M)
