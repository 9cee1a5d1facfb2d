"""Part II's replicon (RS stability) diagnostic and the finite-d lowest loss at a fixed overlap."""

import numpy as np
import pytest

from attnlab.experiments.phase_transition.engine import lowest_risk_at_overlap
from attnlab.theory import phase_transition as se
from attnlab.theory.phase_transition.prox import _prox_batch, _target
from attnlab.theory.phase_transition.replicon import _jacobian


def test_jacobian_of_the_prox_matches_finite_differences():
    """∂h/∂u = (2/V) H⁻¹ (implicit function theorem) against central differences of the prox.

    Generic nodes, V, ω and a non-symmetric A; nodes where the prox jumps within the difference
    step are left out (there is no derivative there).
    """
    rng = np.random.default_rng(3)
    N, V, omega, s2 = 400, 3.7, 0.37, 0.3
    A = np.array([[0.3, 0.7], [0.8, 0.2]])
    u = rng.normal(0.0, 0.6, (2, N))
    hs = rng.normal(0.0, 0.7, (2, N))
    T = _target(hs[0], hs[1], omega, A)

    def h_of(u1, u2):
        zero = np.zeros_like(u1)
        return np.stack(_prox_batch(u1, u2, V, T, s2, [(u1, u2), (-u1, -u2), (zero, zero.copy())])[:2])

    h = h_of(*u)
    J11, J12, J22 = _jacobian(h[0], h[1], u[0], u[1], V, T, s2)
    # the prox stops where Newton's predicted decrease reaches rounding (gradient up to ~3e-8 at
    # some nodes): J there is exact to about 1e-5; a wrong factor or sign would be off by O(0.1)
    step = 1e-4
    cols = []
    for k in range(2):
        e = np.zeros((2, 1))
        e[k] = step
        plus, minus = h_of(*(u + e)), h_of(*(u - e))
        cols.append((plus - minus, plus - h, h - minus))
    smooth = np.all([np.abs(c[1] - c[2]).max(0) < 1e-5 for c in cols], axis=0)
    assert smooth.mean() > 0.9
    fd = [c[0] / (2 * step) for c in cols]  # fd[k][i] = ∂h_i/∂u_k
    np.testing.assert_allclose(J11[smooth], fd[0][0][smooth], atol=5e-5)
    np.testing.assert_allclose(J12[smooth], fd[1][0][smooth], atol=5e-5)
    np.testing.assert_allclose(J12[smooth], fd[0][1][smooth], atol=5e-5)
    np.testing.assert_allclose(J22[smooth], fd[1][1][smooth], atol=5e-5)


def test_where_the_prox_is_smooth_v_hat_is_its_smooth_part_and_r_is_pinned():
    """ω = 0.3, α = 2, semantic (the global minimum, GD agrees): no jumps, R = 0.2435 (20-40 nodes)."""
    fp = se.solve(2.0, 0.3, "semantic", n_nodes=8)
    r = se.replicon(fp)
    assert r.n_nodes == 8
    assert r.V_hat_smooth == pytest.approx(fp.V_hat, rel=1e-4)
    assert abs(r.jump_share) < 1e-3
    assert r.replicon == pytest.approx(0.2435, abs=0.004)
    assert r.stable


def test_at_the_metastable_point_the_jumps_outweigh_v_hat():
    """ω = 0.5, α = 1.19, semantic: V̂ < 0 although its smooth part is > 0 (8 nodes: computed once)."""
    fp = se.solve(1.19, 0.5, "semantic", n_nodes=8)
    r = se.replicon(fp)
    assert r.V_hat < 0 < r.V_hat_smooth
    assert r.jump_share == pytest.approx(1.43, abs=0.02)


def test_replicon_bad_arguments():
    with pytest.raises(ValueError, match="fp"):
        se.replicon("not a fixed point")
    fp = se.solve(1.79, 0.15, "positional", n_nodes=6)
    assert not fp.converged  # the agnostic point: the positional branch is not found there
    with pytest.raises(ValueError, match="fp"):
        se.replicon(fp)
    fp = se.solve(2.0, 0.3, "semantic", n_nodes=6)
    with pytest.raises(ValueError, match="n_nodes"):
        se.replicon(fp, n_nodes=1)


@pytest.mark.parametrize("branch", ["semantic", "positional"])
def test_lowest_risk_at_overlap_holds_the_overlap(branch):
    """The result has the held overlap at each value, the other one at 0, and a vanishing gradient."""
    values = [0.1, 0.3] if branch == "semantic" else [0.05, 0.2]
    rows = lowest_risk_at_overlap(alpha=1.3, omega=0.4, branch=branch, values=values, d=60, seed=1)
    assert [r["value"] for r in rows] == values
    held, other = ("theta_over_sigma2", "m") if branch == "semantic" else ("m", "theta_over_sigma2")
    for r in rows:
        assert r[held] == pytest.approx(r["value"], abs=1e-12)
        assert abs(r[other]) < 1e-12
        assert r["grad"] < 1e-6
        assert 0 < r["eps_t"] < 0.1


def test_lowest_risk_at_overlap_is_reproducible():
    """The same seed gives the same teacher, data, start and result, to the last bit."""
    kw = {"alpha": 1.3, "omega": 0.4, "branch": "semantic", "values": [0.3], "d": 40, "seed": 2}
    assert lowest_risk_at_overlap(**kw) == lowest_risk_at_overlap(**kw)
    assert lowest_risk_at_overlap(**kw) != lowest_risk_at_overlap(**(kw | {"seed": 3}))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"branch": "both"}, "branch"), ({"values": []}, "values"), ({"d": 1}, "d"), ({"alpha": -1}, "alpha")],
)
def test_lowest_risk_at_overlap_bad_arguments(kwargs, match):
    args = {"alpha": 1.0, "omega": 0.3, "branch": "semantic", "values": [0.2], "d": 20} | kwargs
    with pytest.raises(ValueError, match=match):
        lowest_risk_at_overlap(**args)


def test_pt_landscape_at_book_scale():
    """The experiment runs and gives finite-d rows, theory rows and one fixed point per point."""
    from attnlab.experiments import get

    exp = get("pt_landscape")
    config = exp.config("book") | {"n_jobs": 1, "ds": [60], "n_seeds": 1, "check_nodes": []}
    config["points"] = [
        p for p in config["points"] if p[:3] in ([0.5, 1.19, "semantic"], [0.3, 2.0, "semantic"])
    ]
    rows = exp.fn(config, "cpu")
    kinds = [r["kind"] for r in rows]
    assert kinds.count("fixed point") == 2
    assert kinds.count("theory") == kinds.count("finite d") == sum(len(p[3]) for p in config["points"])
    fixed = {r["omega"]: r for r in rows if r["kind"] == "fixed point"}
    assert fixed[0.3]["jump_share"] == pytest.approx(0.0, abs=1e-3)
    assert fixed[0.5]["V_hat"] < 0
