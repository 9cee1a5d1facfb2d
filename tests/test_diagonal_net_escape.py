"""Tests of attnlab.theory.diagonal_net.escape: escape from a small initialisation and the sign rule."""

from __future__ import annotations

import numpy as np

from attnlab.tasks import histogram as th
from attnlab.theory import diagonal_net as dn

d, N = 4, 5


def test_escape_matrix_is_minus_the_gradient_at_the_origin():
    M = th.task_matrix("classes", d)
    S = th.count_moments(N, d)
    Z = np.zeros((d, d))
    eps = 1e-6
    for S_ in (None, S):
        C = dn.escape_matrix(M, S_)
        loss = (
            (lambda P, S_=S_: dn.l_df(P, np.ones(d), M))
            if S_ is None
            else (lambda P, S_=S_: dn.l_tf(P, np.ones(d), M, S_))
        )
        G = np.array([[(loss(eps * np.eye(d * d)[i * d + k].reshape(d, d)) - loss(Z)) / eps for k in range(d)]
                      for i in range(d)])  # fmt: skip
        assert np.abs(-G - C).max() < 1e-4 * np.abs(C).max()
    assert np.allclose(dn.escape_matrix(M), M)


def test_sign_rule_is_exact_for_the_linearised_flow_and_right_on_l_tf_from_small_starts():
    M = th.histogram_matrix(d)
    S = th.count_moments(N, d)
    C = dn.escape_matrix(M, S)
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
        assert np.sign(y[0]) == dn.sign_rule(Q0, v0, M, S)[k]
    _, v_inf = dn.limit_point(Q0, v0, M, S=S)
    assert np.array_equal(np.sign(v_inf), dn.sign_rule(Q0, v0, M, S))
