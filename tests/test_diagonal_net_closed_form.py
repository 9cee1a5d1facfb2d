"""Tests of attnlab.theory.diagonal_net.closed_form: the r-s (Riccati) closed form, the column closed form."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.tasks import histogram as th
from attnlab.theory import diagonal_net as dn

d = 4


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


def test_column_flow_matches_integration_with_an_orthogonal_part():
    rng = np.random.default_rng(3)
    M = th.class_matrix([0, 1, 1, 2])
    q0s, v0s = rng.standard_normal((d, d)), rng.standard_normal(d)  # O(1), q_perp != 0, unbalanced
    t = np.linspace(0, 40, 81)
    Q_num, v_num = dn.gradient_flow(q0s, v0s, M, t)
    for k in range(d):
        q_t, v_t = dn.column_flow(q0s[:, k], v0s[k], M[:, k], t)
        assert np.abs(q_t - Q_num[:, :, k]).max() < 1e-7 and np.abs(v_t - v_num[:, k]).max() < 1e-7


def test_column_flow_with_zero_delta_and_validation():
    q_t, v_t = dn.column_flow(np.array([0.3, 0.4]), 0.5, np.array([1.0, 0.0]), np.array([0.0, 1.0]))
    assert np.allclose(q_t[0], [0.3, 0.4]) and v_t[0] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="q0"):
        dn.column_flow(np.zeros(3), 0.1, np.ones(2), [0.0])


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: dn.closed_form_flow(np.ones((3, 3)), np.ones(3), np.eye(3), [1.0]), "Q0"),
        (lambda: dn.riccati_z(-1.0, 0.0, 1.0, [1.0]), "z0"),
        (lambda: dn.riccati_z(1.0, 0.0, 0.0, [1.0]), "m_norm"),
        (lambda: dn.rs_solution(1.0, -1.0, -1.0, [1.0]), "m_norm"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_half_escape_times_match_the_flow_and_eq_stage():
    M = th.class_matrix([0, 1, 1, 2, 2, 2])
    norms = np.linalg.norm(M, axis=0)
    sigma = 1e-3
    Q0, v0 = sigma * M / norms, sigma * np.ones(6)  # aligned, balanced: eq-stage
    T = dn.half_escape_times(Q0, v0, M)
    assert np.allclose(T, np.log((norms - sigma**2) / sigma**2) / (2 * norms), rtol=1e-12)
    rng = np.random.default_rng(0)  # aligned but unbalanced, O(1): against the integrated flow
    a0, b0 = 0.3 * rng.standard_normal(6), 0.3 * rng.standard_normal(6) + 0.05
    Q1 = M / norms * a0
    T1 = dn.half_escape_times(Q1, b0, M)
    t = np.linspace(0, 12, 24001)
    Q_t, v_t = dn.gradient_flow(Q1, b0, M, t)
    va = v_t * np.sum(Q_t * M / norms, axis=1)
    for k in range(6):
        if T1[k] > 0:
            assert abs(t[np.argmax(va[:, k] >= norms[k] / 2)] - T1[k]) < 1e-3
    with pytest.raises(ValueError, match="parallel"):
        dn.half_escape_times(np.ones((6, 6)), np.ones(6), M)


def test_verify_escape_times_on_a_right_and_a_wrong_answer():
    M = th.class_matrix([0, 1, 1, 2, 2, 2])
    norms = np.linalg.norm(M, axis=0)
    sigma = 1e-5
    Q0, v0 = sigma * M / norms, sigma * np.ones(6)
    right = np.log((norms - sigma**2) / sigma**2) / (2 * norms)
    assert "order [3, 4, 5, 1, 2, 0]" in dn.verify_escape_times(right, Q0, v0, M)
    with pytest.raises(AssertionError, match="gamma_k = 2"):  # gamma = 2 for every column
        dn.verify_escape_times(right * norms, Q0, v0, M)
    with pytest.raises(ValueError, match="T_answer"):
        dn.verify_escape_times(right[:3], Q0, v0, M)


def _riccati_with(mistake):
    """eq-riccati-sol with one of three plausible mistakes (gradient-flow's "How we checked this")."""

    def z(z0, delta_k, m_norm, t):
        t = np.asarray(t, dtype=float)
        g = {"gamma = 2m": 2 * m_norm, "4 delta^2": np.sqrt(4 * m_norm**2 + 4 * delta_k**2)}.get(
            mistake, np.sqrt(4 * m_norm**2 + delta_k**2)
        )
        zp, zm = 2 * m_norm + g, 2 * m_norm - g
        E = (z0 - zp) / (z0 - zm) * np.exp(-g * t)
        return zp / (1 - E) if mistake == "no z-" else (zp - E * zm) / (1 - E)

    return z


def test_the_chapter_check_of_thm_rs_catches_a_wrong_formula_only_from_a_start_of_scale_one(monkeypatch):
    # gradient-flow checks thm-rs to 1e-8 from an O(1), unbalanced, aligned start (class matrix):
    # each mistake fails that check by far, while from a small start one of them passes it
    from attnlab.theory.diagonal_net import closed_form

    M = th.class_matrix([0, 1, 1, 2, 2, 2])
    t = np.linspace(0, 15, 301)

    def errors(scale):
        rng = np.random.default_rng(0)
        a0, b0 = scale * rng.standard_normal(6), 1.5 * scale * rng.standard_normal(6)
        Q0 = M / np.linalg.norm(M, axis=0) * a0
        Q_num, v_num = dn.gradient_flow(Q0, b0, M, t)
        out = {}
        for mistake in ("none", "gamma = 2m", "4 delta^2", "no z-"):
            monkeypatch.setattr(closed_form, "riccati_z", _riccati_with(mistake))
            Q_cf, v_cf = dn.closed_form_flow(Q0, b0, M, t)
            out[mistake] = max(np.abs(Q_num - Q_cf).max(), np.abs(v_num - v_cf).max())
        return out

    big, small = errors(1.0), errors(1e-3)
    assert big.pop("none") < 1e-8 and small.pop("none") < 1e-8
    assert min(big.values()) > 1e-2  # at scale one every mistake is off by > 1e6 tolerances
    assert min(small.values()) < 1e-8  # from a small start one mistake hides below the tolerance
