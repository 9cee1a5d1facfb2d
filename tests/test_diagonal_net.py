"""Tests of attnlab.theory.diagonal_net: the reduction, the flow, the closed form, the bounds."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from attnlab.models import LinearSelfAttention
from attnlab.tasks import histogram as th
from attnlab.theory import diagonal_net as dn

d, N = 4, 5
M3 = np.eye(3)


def rand_point(scale, seed, size=d):
    rng = np.random.default_rng(seed)
    return scale * rng.standard_normal((size, size)), scale * rng.standard_normal(size)


def finite_diff(fun, Q, v, eps=1e-6):
    gQ, gv = np.zeros_like(Q), np.zeros_like(v)
    for idx in np.ndindex(Q.shape):
        E = np.zeros_like(Q)
        E[idx] = eps
        gQ[idx] = (fun(Q + E, v) - fun(Q - E, v)) / (2 * eps)
    for k in range(v.size):
        e = np.zeros_like(v)
        e[k] = eps
        gv[k] = (fun(Q, v + e) - fun(Q, v - e)) / (2 * eps)
    return gQ, gv


@pytest.mark.parametrize("task", ["histogram", "next_letter", "classes"])
def test_l_tf_is_the_exact_population_loss_of_the_attention_layer(task):
    M = th.task_matrix(task, 3)
    Q, v = rand_point(0.7, 1, 3)
    model = LinearSelfAttention(3, W0=Q, v0=v)
    tokens = torch.tensor(list(itertools.product(range(3), repeat=4)))  # every sequence, N = 4
    X = th.one_hot(tokens, 3)
    with torch.no_grad():
        exact = 0.5 * ((model(X) - th.targets(X, M)) ** 2).sum(-1).mean().item()
    assert abs(dn.l_tf(Q, v, M, 4) - exact) < 1e-10 * max(1.0, exact)


def test_gradients_match_finite_differences():
    M = th.task_matrix("histogram+next_letter", d)
    S = th.count_moments(N, d)
    Q, v = rand_point(0.5, 2)
    for grad, loss in [
        (dn.grad_df(Q, v, M), lambda Q, v: dn.l_df(Q, v, M)),
        (dn.grad_tf(Q, v, M, S), lambda Q, v: dn.l_tf(Q, v, M, S)),
    ]:
        gQ, gv = finite_diff(loss, Q, v)
        assert np.abs(grad[0] - gQ).max() < 1e-6 and np.abs(grad[1] - gv).max() < 1e-6


def test_flow_shapes_conservation_and_limit():
    M = th.task_matrix("classes", d)
    Q0, v0 = rand_point(0.3, 3)
    t = np.linspace(0, 40, 81)
    for Qt, vt in [dn.gradient_flow(Q0, v0, M, t), dn.gradient_flow_tf(Q0, v0, M, t / 10, N)]:
        assert Qt.shape == (81, d, d) and vt.shape == (81, d)
        assert np.abs(dn.delta(Qt, vt) - dn.delta(Q0, v0)).max() < 1e-6
        assert np.array_equal(Qt[0], Q0)
    Qt, vt = dn.gradient_flow(Q0, v0, M, t)
    Q_inf, v_inf = dn.limit_point(Q0, v0, M)
    assert np.abs(Qt[-1] - Q_inf).max() < 1e-6 and np.abs(vt[-1] - v_inf).max() < 1e-6
    Qs, vs = dn.gradient_flow_tf(Q0, v0, M, np.array([0.0, 20.0]), N)
    Q_inf, v_inf = dn.limit_point(Q0, v0, M, S=N)
    assert np.abs(Qs[-1] - Q_inf).max() < 1e-6 and np.abs(vs[-1] - v_inf).max() < 1e-6


def test_limit_point_for_a_zero_column_and_checker():
    M = np.diag([1.0, 2.0, 0.0])
    Q0, v0 = rand_point(0.5, 4, 3)
    Qt, vt = dn.gradient_flow(Q0, v0, M, np.array([0.0, 400.0]))
    Q_inf, v_inf = dn.limit_point(Q0, v0, M)
    assert np.abs(Qt[-1] - Q_inf).max() < 1e-4 and np.abs(vt[-1] - v_inf).max() < 1e-4
    assert dn.check_limit_point(Q_inf, v_inf, Q0, v0, M).startswith("Correct")
    with pytest.raises(AssertionError, match="global minimum"):
        dn.check_limit_point(Q0, v0, Q0, v0, M)
    with pytest.raises(AssertionError, match="delta"):
        dn.check_limit_point(np.diag(1 / np.array([1.0, 1, 1])) @ M, np.ones(3), Q0, v0, M)


def test_closed_form_and_gradient_descent_follow_the_flow():
    M = th.task_matrix("next_letter", d)
    rng = np.random.default_rng(5)
    a0, v0 = 0.05 * rng.standard_normal(d), 0.05 * rng.standard_normal(d)
    Q0 = M * a0  # column k is a0[k] m_k
    t = np.linspace(0, 12, 61)
    Qt, vt = dn.gradient_flow(Q0, v0, M, t)
    Qc, vc = dn.closed_form_flow(Q0, v0, M, t)
    assert max(np.abs(Qt - Qc).max(), np.abs(vt - vc).max()) < 1e-8
    steps, Qg, vg = dn.gradient_descent(Q0, v0, M, lr=1e-3, steps=12000, record_every=200)
    assert steps[-1] == 12000 and Qg.shape == (61, d, d)
    assert np.abs(Qg - Qt).max() < 1e-2  # GD with a small step follows the flow (O(lr))


def test_riccati_solution_solves_its_ode():
    z0, dk, m = 0.3, -0.2, 1.5
    t = np.linspace(0, 6, 6001)
    z = dn.riccati_z(z0, dk, m, t)
    dz = np.gradient(z, t, edge_order=2)
    assert np.abs(dz - (-(z**2) / 2 + 2 * m * z + dk**2 / 2)).max() < 1e-4
    assert abs(z[-1] - (2 * m + dn.gamma(dk, m))) < 1e-3
    # the stable manifold of the saddle at 0: a0 + v0 = 0 flows into the origin
    a, v = dn.rs_solution(0.4, -0.4, m, t)
    Qt, vt = dn.gradient_flow(np.array([[0.4]]), np.array([-0.4]), np.array([[m]]), t[::600])
    assert np.abs(a[::600] - Qt[:, 0, 0]).max() < 1e-8 and np.abs(v[::600] - vt[:, 0]).max() < 1e-8


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


def test_small_init_plateau_slope_and_saddle():
    M = th.task_matrix("histogram", d)
    Qd, vd = rand_point(1.0, 7)
    scales = np.array([1e-2, 1e-4, 1e-6])
    T = [dn.plateau_time(s * Qd, s * vd, M) for s in scales]
    slope = np.polyfit(np.log(1 / scales**2), T, 1)[0]
    assert abs(slope * 2.0 - 1) < 1e-2  # 1/gamma with gamma = 2 ||m|| = 2
    Q0 = np.eye(d)
    Q0[:, 0] = [0, 0.5, 0, 0]  # q_0 orthogonal to m_0 = e_0
    v0 = np.ones(d)
    v0[0] = 0.0
    Qt, vt = dn.gradient_flow(Q0, v0, M, np.array([0.0, 50.0]))
    assert vt[-1, 0] == 0.0 and np.array_equal(Qt[-1][:, 0], Q0[:, 0])
    v0[0] = 1e-6
    Qt, vt = dn.gradient_flow(Q0, v0, M, np.array([0.0, 60.0]))
    assert dn.l_df(Qt[-1], vt[-1], M) < 1e-10


def test_moments_helpers():
    S = th.count_moments(N, d)
    ev = dn.moment_spectrum(S)
    assert ev.shape == (d, d) and np.all(ev > 0)
    assert np.isclose(dn.isotropic_constant(S), np.trace(S, axis1=1, axis2=2).sum() / d**2)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: dn.l_df(np.eye(3), np.ones(3), np.eye(4)), "Q"),
        (lambda: dn.l_df(np.eye(3), np.ones(2), np.eye(3)), "v"),
        (lambda: dn.l_df(np.eye(3), np.ones(3), np.ones((3, 2))), "M"),
        (lambda: dn.l_tf(np.eye(3), np.ones(3), np.eye(3), np.ones((3, 3))), "S"),
        (lambda: dn.l_tf(np.eye(3), np.ones(3), np.eye(3), 0), "S"),
        (lambda: dn.gradient_flow(np.eye(3), np.ones(3), np.eye(3), [1.0, 0.5]), "t"),
        (lambda: dn.gradient_flow(np.eye(3), np.ones(3), np.eye(3), [-1.0]), "t"),
        (lambda: dn.gradient_flow(np.eye(3), np.ones(3), np.eye(3), [1.0], rtol=0), "rtol"),
        (lambda: dn.gradient_flow(np.full((3, 3), np.nan), np.ones(3), np.eye(3), [1.0]), "Q"),
        (lambda: dn.gradient_flow(np.ones((2, 3, 3)), np.ones((2, 3)), np.eye(3), [1.0]), "Q"),
        (lambda: dn.gradient_descent(np.eye(3), np.ones(3), np.eye(3), lr=-1, steps=3), "lr"),
        (lambda: dn.closed_form_flow(np.ones((3, 3)), np.ones(3), np.eye(3), [1.0]), "Q0"),
        (lambda: dn.riccati_z(-1.0, 0.0, 1.0, [1.0]), "z0"),
        (lambda: dn.riccati_z(1.0, 0.0, 0.0, [1.0]), "m_norm"),
        (lambda: dn.rs_solution(1.0, -1.0, -1.0, [1.0]), "m_norm"),
        (lambda: dn.bound_rate_df(np.zeros((3, 3)), np.zeros(3), np.eye(3)), "Q, v"),
        (lambda: dn.bound_rate_tf(np.zeros((3, 3)), np.zeros(3), np.eye(3), 5), "Q, v"),
        (lambda: dn.bound_rate_tf(np.eye(3), np.ones(3), np.eye(3), 1), "S"),
        (lambda: dn.limit_point(np.zeros((3, 3)), np.zeros(3), np.eye(3)), "saddle"),
        (lambda: dn.plateau_time(np.eye(3), np.ones(3), np.eye(3), fraction=2.0), "fraction"),
        (lambda: dn.moment_spectrum(np.ones((3, 3))), "S"),
        (
            lambda: dn.check_limit_point(np.eye(3), np.ones(3), np.eye(3), np.ones(3), np.eye(3), atol=0),
            "atol",
        ),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
