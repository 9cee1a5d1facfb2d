"""Tests of attnlab.theory.diagonal_net.limit: the limit point and the exercise checker."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.tasks import histogram as th
from attnlab.theory import diagonal_net as dn

d = 4


def rand_point(scale, seed, size=d):
    rng = np.random.default_rng(seed)
    return scale * rng.standard_normal((size, size)), scale * rng.standard_normal(size)


def test_limit_point_for_a_zero_column_and_checker():
    M = np.diag([1.0, 2.0, 0.0])
    Q0, v0 = rand_point(0.5, 4, 3)
    Qt, vt = dn.gradient_flow(Q0, v0, M, np.array([0.0, 400.0]))
    Q_inf, v_inf = dn.limit_point(Q0, v0, M)
    assert np.abs(Qt[-1] - Q_inf).max() < 1e-4 and np.abs(vt[-1] - v_inf).max() < 1e-4
    assert dn.verify_limit_point(Q_inf, v_inf, Q0, v0, M).startswith("Correct")
    with pytest.raises(AssertionError, match="global minimum"):
        dn.verify_limit_point(Q0, v0, Q0, v0, M)
    with pytest.raises(AssertionError, match="delta"):
        dn.verify_limit_point(np.diag(1 / np.array([1.0, 1, 1])) @ M, np.ones(3), Q0, v0, M)


def test_limit_point_from_aligned_starts_takes_the_sign_of_r():
    # q_k = a_k m_hat_k; r_k = a_k + v_k and a_k - v_k have opposite signs in every column
    M = th.class_matrix([0, 1, 1, 2])  # ||m_k|| = 1, sqrt 2, sqrt 2, 1
    a0, v0 = np.array([0.8, -0.8, 0.3, -0.3]), np.array([-0.5, 0.5, 0.9, -0.9])
    Q0 = M / np.linalg.norm(M, axis=0) * a0
    signs = np.array([1.0, -1.0, 1.0, -1.0])  # sign(a0 + v0), by hand
    dk = v0**2 - a0**2
    v_hand = signs * np.sqrt((dk + np.sqrt(dk**2 + 4 * np.array([1.0, 2, 2, 1]))) / 2)
    Q_inf, v_inf = dn.limit_point(Q0, v0, M)
    assert np.abs(v_inf - v_hand).max() < 1e-12
    assert np.abs(Q_inf - M / v_hand).max() < 1e-12
    _, vt = dn.gradient_flow(Q0, v0, M, np.array([0.0, 60.0]))
    assert np.abs(vt[-1] - v_hand).max() < 1e-6


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: dn.limit_point(np.zeros((3, 3)), np.zeros(3), np.eye(3)), "saddle"),
        (
            lambda: dn.verify_limit_point(np.eye(3), np.ones(3), np.eye(3), np.ones(3), np.eye(3), atol=0),
            "atol",
        ),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_verify_signs_on_a_right_and_a_wrong_answer():
    d, N = 4, 5
    S, M = th.count_moments(N, d), th.histogram_matrix(d)
    rng = np.random.default_rng(0)  # a small start whose l_tf signs differ from those along m_k
    Q0, v0 = 1e-2 * rng.standard_normal((d, d)), 1e-2 * rng.standard_normal(d)
    right = dn.sign_rule(Q0, v0, M, S)
    assert "Correct" in dn.verify_signs(right, Q0, v0, M, S)
    with pytest.raises(AssertionError, match="along m_k"):
        dn.verify_signs(dn.sign_rule(Q0, v0, M), Q0, v0, M, S)
    with pytest.raises(AssertionError, match="columns \\[0\\]"):
        dn.verify_signs(right * np.array([-1, 1, 1, 1]), Q0, v0, M, S)
    with pytest.raises(ValueError, match="answer"):
        dn.verify_signs(right[:2], Q0, v0, M, S)
