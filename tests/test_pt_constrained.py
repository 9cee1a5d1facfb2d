"""The training loss of Part II with the order parameter held fixed (theory.phase_transition.constrained)."""

import numpy as np
import pytest
from scipy.integrate import simpson

from attnlab.theory import phase_transition as se


def test_at_the_fixed_point_it_is_the_fixed_point():
    """Held at the semantic branch's own θ, the constrained problem is its fixed point (ε_t, zero slope)."""
    fp = se.solve(1.19, 0.5, "semantic", n_nodes=8)
    c = se.constrained(1.19, 0.5, "semantic", fp.theta_over_sigma2, n_nodes=8, init=(fp.q, fp.V))
    assert c.converged
    assert c.eps_t == pytest.approx(fp.eps_t, rel=1e-7)
    assert c.q == pytest.approx(fp.q, rel=1e-6)
    assert abs(c.slope) < 1e-8


@pytest.mark.parametrize(
    ("alpha", "omega", "branch", "lo", "hi"),
    [(1.19, 0.5, "semantic", 0.15, 0.45), (1.79, 0.15, "positional", 0.05, 0.3)],
)
def test_slope_integrates_to_the_change_of_eps_t(alpha, omega, branch, lo, hi):
    """The slope from the hats (envelope theorem) integrates to the change of ε_t between two values."""
    values = np.linspace(lo, hi, 7)
    pts, init = [], None
    for v in values:
        pts.append(se.constrained(alpha, omega, branch, float(v), n_nodes=8, init=init))
        init = (pts[-1].q, pts[-1].V)
    slopes = np.array([p.slope for p in pts])
    integral = float(simpson(slopes, x=values))
    change = pts[-1].eps_t - pts[0].eps_t
    assert change > 0
    assert integral == pytest.approx(change, rel=0.05)


def test_pinned_values_at_the_metastable_semantic_point():
    """ω = 0.5, α = 1.19, θ/σ² = 0.36 (where GD stops at d = 1000), 20 nodes: values computed once."""
    c = se.constrained(1.19, 0.5, "semantic", 0.36)
    assert c.eps_t == pytest.approx(0.0027658, rel=2e-5)
    assert c.slope == pytest.approx(3.07e-4, rel=0.02)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"branch": "both"}, "branch"),
        ({"value": 1.2}, "value"),
        ({"value": "x"}, "value"),
        ({"init": (0.0, 1.0)}, "init"),
        ({"n_nodes": 1}, "n_nodes"),
    ],
)
def test_bad_arguments(kwargs, match):
    args = {"alpha": 1.0, "omega": 0.3, "branch": "semantic", "value": 0.2} | kwargs
    with pytest.raises(ValueError, match=match):
        se.constrained(**({"n_nodes": 4} | args))


def test_pt_constrained_and_pt_metastable_at_book_scale():
    """The two experiments of chapter 03's metastable section run and give one row per point and value."""
    from attnlab.experiments import get

    rows = get("pt_constrained").fn(get("pt_constrained").config("book"), "cpu")
    fixed = [r for r in rows if r["kind"] == "fixed point"]
    assert len(rows) == 4 * 5 and len(fixed) == 4  # 3 values, the fixed point and one check of its nodes
    # the positional branch at omega = 0.15, alpha = 1.79 has no fixed point with m > 0
    assert [r["converged"] for r in fixed] == [True, True, False, True]
    top = [r for r in rows if r["kind"] == "constrained" and r["value"] in (0.3, 0.5)]
    assert all(r["slope"] > 0 for r in top)  # the loss rises at the top of each grid
    config = get("pt_metastable").config("book") | {"steps": 400, "record_every": 200}
    rows = get("pt_metastable").fn(config, "cpu")
    assert len(rows) == 4 * 2
    assert all(np.isfinite(r["dtheta_last"]) and np.isfinite(r["eps_t"]) for r in rows)


def test_a_warm_start_outside_the_basin_is_retried_from_the_default_start():
    """At omega = 0.3, alpha = 0.8, theta/sigma^2 = 0.5 cannot be held from q = 0.057 (the overlap of
    theta/sigma^2 = 0.25 there: theta^2 reaches sigma^2 q and the iteration overflows); from the
    default start it converges (q near 0.08). The warm-started call must give the same answer, quickly."""
    cold = se.constrained(0.8, 0.3, "semantic", 0.5, n_nodes=6)
    warm = se.constrained(0.8, 0.3, "semantic", 0.5, n_nodes=6, init=(0.0569, 2.0))
    assert cold.converged and warm.converged
    assert warm.eps_t == pytest.approx(cold.eps_t, rel=1e-6) and warm.q > 0.07
