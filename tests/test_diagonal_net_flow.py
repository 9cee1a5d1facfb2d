"""Tests of attnlab.theory.diagonal_net.flow: gradient flow and descent integrated numerically, plateaus."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.tasks import histogram as th
from attnlab.theory import diagonal_net as dn

d, N = 4, 5


def rand_point(scale, seed, size=d):
    rng = np.random.default_rng(seed)
    return scale * rng.standard_normal((size, size)), scale * rng.standard_normal(size)


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


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: dn.gradient_flow(np.eye(3), np.ones(3), np.eye(3), [1.0, 0.5]), "t"),
        (lambda: dn.gradient_flow(np.eye(3), np.ones(3), np.eye(3), [-1.0]), "t"),
        (lambda: dn.gradient_flow(np.eye(3), np.ones(3), np.eye(3), [1.0], rtol=0), "rtol"),
        (lambda: dn.gradient_flow(np.full((3, 3), np.nan), np.ones(3), np.eye(3), [1.0]), "Q"),
        (lambda: dn.gradient_flow(np.ones((2, 3, 3)), np.ones((2, 3)), np.eye(3), [1.0]), "Q"),
        (lambda: dn.gradient_descent(np.eye(3), np.ones(3), np.eye(3), lr=-1, steps=3), "lr"),
        (lambda: dn.plateau_time(np.eye(3), np.ones(3), np.eye(3), fraction=2.0), "fraction"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_plateau_point_is_where_the_flow_is_at_the_plateau_time():
    M = th.task_matrix("histogram", 4)
    rng = np.random.default_rng(2)
    Q0, v0 = 1e-3 * rng.standard_normal((4, 4)), 1e-3 * rng.standard_normal(4)
    T, Q, v = dn.plateau_point(Q0, v0, M, fraction=0.9)
    assert T == dn.plateau_time(Q0, v0, M, fraction=0.9)
    Q_t, v_t = dn.gradient_flow(Q0, v0, M, [0.0, T])
    assert np.abs(Q_t[-1] - Q).max() < 1e-8 and np.abs(v_t[-1] - v).max() < 1e-8
    assert abs(dn.l_df(Q, v, M) / dn.l_df(Q0, v0, M) - 0.9) < 1e-8
