"""Tests of attnlab.theory.diagonal_net_init: escape from the origin, Hessian, rates, column closed form."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.tasks import histogram as th
from attnlab.theory import diagonal_net as dn
from attnlab.theory import diagonal_net_init as di

d, N = 4, 5


def flat_grad(Q, v, M, S):
    gQ, gv = dn.grad_df(Q, v, M) if S is None else dn.grad_tf(Q, v, M, S)
    return np.concatenate([gQ.ravel(), gv])


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
    H = di.hessian(Q, v, M, S)
    assert np.abs(H - np.array(cols)).max() < 1e-7 * np.abs(H).max()


def test_escape_matrix_is_minus_the_gradient_at_the_origin():
    M = th.task_matrix("classes", d)
    S = th.count_moments(N, d)
    Z = np.zeros((d, d))
    eps = 1e-6
    for S_ in (None, S):
        C = di.escape_matrix(M, S_)
        loss = (
            (lambda P, S_=S_: dn.l_df(P, np.ones(d), M))
            if S_ is None
            else (lambda P, S_=S_: dn.l_tf(P, np.ones(d), M, S_))
        )
        G = np.array([[(loss(eps * np.eye(d * d)[i * d + k].reshape(d, d)) - loss(Z)) / eps for k in range(d)]
                      for i in range(d)])  # fmt: skip
        assert np.abs(-G - C).max() < 1e-4 * np.abs(C).max()
    assert np.allclose(di.escape_matrix(M), M)


def test_sign_rule_is_exact_for_the_linearised_flow_and_right_on_l_tf_from_small_starts():
    M = th.histogram_matrix(d)
    S = th.count_moments(N, d)
    C = di.escape_matrix(M, S)
    rng = np.random.default_rng(1)
    Q0, v0 = 1e-3 * rng.standard_normal((d, d)), 1e-3 * rng.standard_normal(d)
    # linearised flow q' = v c, v' = c.q, integrated exactly with the matrix exponential per column
    T = 3.0
    for k in range(d):
        c = C[:, k]
        A = np.zeros((d + 1, d + 1))
        A[0, 1:], A[1:, 0] = c, c
        w, U = np.linalg.eigh(A)
        y = U @ (np.exp(w * T) * (U.T @ np.concatenate([[v0[k]], Q0[:, k]])))
        assert np.sign(y[0]) == di.sign_rule(Q0, v0, M, S)[k]
    _, v_inf = dn.limit_point(Q0, v0, M, S=S)
    assert np.array_equal(np.sign(v_inf), di.sign_rule(Q0, v0, M, S))


def test_asymptotic_rate_closed_form_equals_the_hessian_and_the_measured_decay():
    M = th.class_matrix([0, 1, 1, 2])
    rng = np.random.default_rng(2)
    Q0, v0 = 0.8 * rng.standard_normal((d, d)), 0.8 * rng.standard_normal(d)
    Q_inf, v_inf = dn.limit_point(Q0, v0, M)
    predicted = di.asymptotic_rate_df(dn.delta(Q0, v0), np.linalg.norm(M, axis=0))
    assert abs(di.asymptotic_rate(Q_inf, v_inf, M) - predicted) < 1e-9
    t = np.linspace(0, 60, 601)
    Q_t, v_t = dn.gradient_flow(Q0, v0, M, t)
    L = dn.l_df(Q_t, v_t, M)
    sel = (L < 1e-10) & (L > 1e-20)
    measured = -np.polyfit(t[sel], np.log(L[sel]), 1)[0]
    assert abs(measured / predicted - 1) < 0.02


def test_column_flow_matches_integration_with_an_orthogonal_part():
    rng = np.random.default_rng(3)
    M = th.class_matrix([0, 1, 1, 2])
    q0s, v0s = rng.standard_normal((d, d)), rng.standard_normal(d)  # O(1), q_perp != 0, unbalanced
    t = np.linspace(0, 40, 81)
    Q_num, v_num = dn.gradient_flow(q0s, v0s, M, t)
    for k in range(d):
        q_t, v_t = di.column_flow(q0s[:, k], v0s[k], M[:, k], t)
        assert np.abs(q_t - Q_num[:, :, k]).max() < 1e-7 and np.abs(v_t - v_num[:, k]).max() < 1e-7


def test_column_flow_with_zero_delta_and_validation():
    q_t, v_t = di.column_flow(np.array([0.3, 0.4]), 0.5, np.array([1.0, 0.0]), np.array([0.0, 1.0]))
    assert np.allclose(q_t[0], [0.3, 0.4]) and v_t[0] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="q0"):
        di.column_flow(np.zeros(3), 0.1, np.ones(2), [0.0])
    with pytest.raises(ValueError, match="minimum"):
        di.asymptotic_rate(np.eye(2), np.zeros(2), np.eye(2))
