"""Tests of Part II's library: the positional/semantic task, its models and the batched GD."""

import math

import numpy as np
import pytest
import torch

from attnlab.experiments.phase_transition import engine as pt
from attnlab.experiments.phase_transition.histogram import histogram_data
from attnlab.models import PositionalLinear, TiedLowRankAttention
from attnlab.tasks import phase_transition as ps

# --- the task -----------------------------------------------------------------------------------


def test_positional_encodings_are_opposite_unit_vectors():
    p = ps.positional_encodings(16)
    assert p.shape == (2, 16)
    assert torch.allclose(p[0], -p[1])
    assert torch.allclose(p.norm(dim=-1), torch.ones(2, dtype=p.dtype))
    assert torch.allclose(p[0], torch.full((16,), 0.25, dtype=p.dtype))


def test_make_A_default_and_validation():
    assert torch.allclose(ps.make_A(), torch.tensor([[0.6, 0.4], [0.4, 0.6]], dtype=torch.float64))
    assert torch.allclose(ps.make_A(ps.OTHER_A).sum(-1), torch.ones(2, dtype=torch.float64))
    with pytest.raises(ValueError, match="A"):
        ps.make_A([[0.5, 0.6], [0.4, 0.6]])  # a row does not sum to one
    with pytest.raises(ValueError, match="A"):
        ps.make_A(np.ones((3, 3)) / 3)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"d": 0, "omega": 0.3}, "d"),
        ({"d": 4, "omega": 1.5}, "omega"),
        ({"d": 4, "omega": 0.3, "sigma": -1}, "sigma"),
    ],
)
def test_make_teacher_rejects_bad_input(kwargs, name):
    with pytest.raises(ValueError, match=name):
        ps.make_teacher(**kwargs)


def test_sample_shapes_and_target():
    teacher = ps.make_teacher(8, 0.3, n_seeds=3, seed=1)
    x, y, z = ps.sample(5, teacher, seed=2)
    assert x.shape == y.shape == z.shape == (3, 5, 2, 8)
    assert torch.allclose(x - z, ps.positional_encodings(8).expand(3, 5, 2, 8))
    T = teacher.attention(z)  # [3, 5, 2, 2]
    assert torch.allclose(T.sum(-1), torch.ones(3, 5, 2, dtype=T.dtype))
    assert torch.allclose(y, T @ z)
    # omega = 1: the target is the purely positional A z
    t1 = ps.make_teacher(8, 1.0, seed=1)
    x1, y1, z1 = ps.sample(4, t1, seed=3)
    assert torch.allclose(y1, ps.make_A() @ z1)


def test_sample_correlation_and_bad_input():
    teacher = ps.make_teacher(400, 0.3, sigma=1.0, seed=0)
    _, _, z = ps.sample(200, teacher, seed=1, correlation=0.8)
    corr = (z[:, 0] * z[:, 1]).mean() / (z[:, 0] * z[:, 0]).mean()
    assert abs(float(corr) - 0.8) < 0.02
    assert abs(float(z[:, 1].var()) - 1.0) < 0.02
    with pytest.raises(ValueError, match="correlation"):
        ps.sample(3, teacher, correlation=1.5)
    with pytest.raises(ValueError, match="n"):
        ps.sample(0, teacher)
    with pytest.raises(ValueError, match="teacher"):
        ps.sample(3, "not a teacher")


def test_overlaps_conventions():
    d, sigma = 100, 0.5
    Q_star = torch.randn(d, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    ov = ps.overlaps(torch.ones(d, 1), Q_star, sigma=sigma)  # [d, 1] accepted
    assert ov["m"] == pytest.approx(1.0)
    assert ov["q"] == pytest.approx(sigma**2)
    assert ov["theta"] == pytest.approx(sigma**2 * float(Q_star.sum()) / d)
    ov = ps.overlaps(Q_star, Q_star, sigma=sigma)
    assert ov["theta"] == pytest.approx(ov["q"])
    batched = ps.overlaps(torch.stack([Q_star, -Q_star]), Q_star)
    assert batched["theta"].shape == (2,)
    with pytest.raises(ValueError, match="Q"):
        ps.overlaps(torch.ones(d + 1), Q_star)
    with pytest.raises(ValueError, match="sigma"):
        ps.overlaps(torch.ones(d), Q_star, sigma=0)


def test_fit_positional_linear_recovers_a_positional_target():
    teacher = ps.make_teacher(20, 1.0, n_seeds=2, seed=0)  # omega = 1: y = A z exactly
    _, y, z = ps.sample(50, teacher, seed=1)
    B = ps.fit_positional_linear(z, y, lam=0.0)
    assert torch.allclose(B, ps.make_A().expand(2, 2, 2), atol=1e-10)
    assert torch.allclose(ps.linear_error(B, z, y), torch.zeros(2, dtype=z.dtype), atol=1e-12)
    with pytest.raises(ValueError, match="z and y"):
        ps.fit_positional_linear(z, y[..., :3])
    with pytest.raises(ValueError, match="lam"):
        ps.fit_positional_linear(z, y, lam=-1.0)


def test_check_overlaps_exercise():
    assert ps.check_overlaps({"positional": (0, 0), "semantic": (0, 0.25)}) == "correct"
    with pytest.raises(ValueError, match="semantic"):
        ps.check_overlaps({"positional": (0, 0), "semantic": (0, 1.0)})
    with pytest.raises(ValueError, match="answer"):
        ps.check_overlaps({"semantic": (0, 0.25)})


# --- the models ---------------------------------------------------------------------------------


def test_tied_attention_matches_the_task_formula():
    d = 12
    teacher = ps.make_teacher(d, 0.0, seed=0)
    x, y, z = ps.sample(7, teacher, seed=1)
    model = TiedLowRankAttention(d, 1, init=teacher.Q_star, dtype="float64")
    A = model.attention(z)
    assert A.shape == (7, 2, 2)
    assert torch.allclose(A.sum(-1), torch.ones(7, 2, dtype=A.dtype))
    # omega = 0 and the student at Q = Q*, fed the content z, reproduces the target exactly
    assert torch.allclose(model(z), y)
    assert model(x).shape == x.shape


def test_tied_attention_inits_and_bad_input():
    m = TiedLowRankAttention(9, 2, init="positional")
    assert m.Q.shape == (9, 2)
    assert torch.allclose(m.Q, torch.full((9, 2), 1 / 3))
    r1 = TiedLowRankAttention(9, 1, init="random", seed=3)
    r2 = TiedLowRankAttention(9, 1, init="random", seed=3)
    assert torch.equal(r1.Q, r2.Q)
    with pytest.raises(ValueError, match="init"):
        TiedLowRankAttention(9, 1, init="semantic")
    with pytest.raises(ValueError, match="init"):
        TiedLowRankAttention(9, 1, init=torch.ones(8, 1))
    with pytest.raises(ValueError, match="d"):
        TiedLowRankAttention(0)
    with pytest.raises(ValueError, match="r"):
        TiedLowRankAttention(9, r=0)
    with pytest.raises(ValueError, match="x"):
        m(torch.ones(3, 2, 8))


def test_positional_linear():
    B = torch.tensor([[0.6, 0.4], [0.4, 0.6]])
    model = PositionalLinear(2, init=B)
    x = torch.randn(5, 2, 7)
    assert torch.allclose(model(x), B @ x)
    assert torch.equal(PositionalLinear(3).B, torch.eye(3))
    with pytest.raises(ValueError, match="init"):
        PositionalLinear(2, init=torch.ones(3, 3))
    with pytest.raises(ValueError, match="init"):
        PositionalLinear(2, init="random")
    with pytest.raises(ValueError, match="x"):
        model(torch.ones(5, 3, 7))


# --- the batched trainer ------------------------------------------------------------------------


def _problem(d=16, n=30, n_seeds=3, omega=0.3, seed=0):
    teacher = ps.make_teacher(d, omega, n_seeds=n_seeds, seed=seed)
    x, y, z = ps.sample(n, teacher, seed=seed + 1)
    return teacher, x, y, z


def test_reduced_risk_and_its_gradient_match_the_model():
    teacher, x, y, _ = _problem()
    S_, n, _, d = x.shape
    Q0 = torch.randn(S_, 2, d, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    students = pt._Students(Q0.clone().requires_grad_(True), n_inits=2)
    k = pt.quadratic_coefficients(*pt.gram(x, y))
    err = students.errors(pt._layout(x), k)  # [2, S, n]
    err.sum().backward()
    for s in range(S_):
        for i in range(2):
            model = TiedLowRankAttention(d, 1, init=Q0[s, i], dtype="float64")
            ref = ((model(x[s]) - y[s]) ** 2).sum((-1, -2)) / (2 * d)
            assert torch.allclose(err[i, s].detach(), ref, atol=1e-12)
            ref.sum().backward()
            assert torch.allclose(students.Qp.grad[s, i], model.Q.grad[:, 0], atol=1e-10)


def test_quadratic_coefficients_match_the_trace_form():
    _, x, y, _ = _problem(n_seeds=2)
    G, P, c = pt.gram(x, y)
    a, b = torch.rand(2, *c.shape, dtype=c.dtype, generator=torch.Generator().manual_seed(0))
    S = torch.stack([torch.stack([a, 1 - a], -1), torch.stack([1 - b, b], -1)], -2)
    k2, ka, kb, k0 = pt.quadratic_coefficients(G, P, c)
    quad = 0.5 * (k2 * (a * a + b * b) + ka * a + kb * b + k0)
    assert torch.allclose(quad, pt.reduced_risk(S, G, P, c), atol=1e-12)


def test_batched_gd_equals_one_model_trained_alone():
    """GD on the stacked seeds is GD on each seed: compare with torch.optim.SGD on one model."""
    teacher, x, y, _ = _problem(n_seeds=2)
    d = x.shape[-1]
    Qp = teacher.Q_star[:, None, :].clone().requires_grad_(True)  # semantic start, [S, 1, d]
    students = pt._Students(Qp, n_inits=1)
    k = pt.quadratic_coefficients(*pt.gram(x, y))
    Xt = pt._layout(x)
    opt = torch.optim.SGD([Qp], lr=0.15, weight_decay=0.01)
    model = TiedLowRankAttention(d, 1, init=teacher.Q_star[1], dtype="float64")
    opt1 = torch.optim.SGD(model.parameters(), lr=0.15, weight_decay=0.01)
    for _ in range(20):
        opt.zero_grad()
        students.errors(Xt, k).sum().backward()
        opt.step()
        opt1.zero_grad()
        (((model(x[1]) - y[1]) ** 2).sum() / (2 * d)).backward()
        opt1.step()
    assert torch.allclose(Qp.detach()[1, 0], model.Q.detach()[:, 0], atol=1e-10)


def test_train_batched_small_run():
    out = pt.train_batched(alpha=1.0, d=20, n_seeds=2, steps=30, n_test=200, record_every=10, seed=1)
    assert out["eps_g"].shape == out["eps_t"].shape == out["m"].shape == (2, 2)
    assert out["eps_lin"].shape == (2,)
    assert out["curve_eps_t"].shape == (4, 2, 2)
    assert np.all(np.isfinite(out["eps_g"])) and np.all(out["eps_g"] > 0)
    # GD decreases the training risk from both starts
    assert np.all(out["curve_eps_t"][-1] < out["curve_eps_t"][0])
    # the semantic start keeps a large theta, the positional one a large m
    assert np.all(out["theta_over_sigma2"][0] > 0.3) and np.all(out["m"][1] > 0.1)
    rows = pt.rows_from(out, ("semantic", "positional"), alpha=1.0)
    assert len(rows) == 4 and rows[0]["init"] == "semantic"


def test_train_batched_variants_run():
    for kwargs in ({"tied": False}, {"value": "learned"}, {"optimizer": "adam", "lr": 0.01}, {"r": 2}):
        out = pt.train_batched(alpha=1.0, d=10, n_seeds=2, steps=5, n_test=50, **kwargs)
        assert np.all(np.isfinite(out["eps_t"])), kwargs


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"alpha": 0.0}, "alpha"),
        ({"d": 1}, "d"),
        ({"omega": -0.1}, "omega"),
        ({"inits": ("semantic", "clever")}, "inits"),
        ({"inits": "semantic"}, "inits"),
        ({"n_seeds": 0}, "n_seeds"),
        ({"lr": 0.0}, "lr"),
        ({"optimizer": "lbfgs"}, "optimizer"),
        ({"value": "random"}, "value"),
    ],
)
def test_train_batched_rejects_bad_input(kwargs, name):
    base = {"alpha": 1.0, "d": 10, "n_seeds": 1, "steps": 1, "n_test": 10}
    with pytest.raises(ValueError, match=name):
        pt.train_batched(**{**base, **kwargs})


def test_pt_gd_is_registered_at_both_scales():
    from attnlab.experiments import get

    exp = get("pt_gd")
    assert exp.paper["d"] == 1000 and exp.paper["n_seeds"] == 24
    assert len(pt.alpha_grid(exp.paper)) == 25
    assert pt.alpha_grid({**exp.paper, "alpha_every": 3})[-1] == pytest.approx(2.0)
    assert math.isclose(pt.alpha_grid(exp.paper)[0], 0.01)


def test_fast_gradient_matches_autograd():
    common = {
        "alpha": [0.5, 1.0],
        "d": 16,
        "n_seeds": 2,
        "steps": 40,
        "n_test": 100,
        "seed": 4,
        "dtype": "float64",
    }
    fast = pt.train_batched(fast=True, **common)
    slow = pt.train_batched(fast=False, **common)
    assert fast["eps_t"].shape == (2, 2, 2)
    for key in ("eps_t", "eps_g", "m", "theta_over_sigma2"):
        np.testing.assert_allclose(fast[key], slow[key], rtol=1e-9, atol=1e-12)


def test_padding_over_alpha_is_exact():
    """Zero-weight padding samples change nothing: the padded risk equals the risk on the n kept."""
    teacher, x, y, _ = _problem(n=30, n_seeds=1)
    k = pt.quadratic_coefficients(*pt.gram(x, y))
    mask = (torch.arange(30) < 12).to(x.dtype)
    Qp = teacher.Q_star[:, None, :].clone()
    padded = pt._Students(Qp, 1).errors(pt._layout(x), tuple(t * mask for t in k)).sum()
    k12 = pt.quadratic_coefficients(*pt.gram(x[:, :12], y[:, :12]))
    kept = pt._Students(Qp, 1).errors(pt._layout(x[:, :12]), k12).sum()
    assert torch.allclose(padded, kept, atol=1e-12)
    grad_pad = pt._tied_gradient(pt._layout(x), Qp, tuple(t * mask for t in k), 1)
    grad_kept = pt._tied_gradient(pt._layout(x[:, :12]), Qp, k12, 1)
    assert torch.allclose(grad_pad, grad_kept, atol=1e-12)


def test_error_from_overlaps():
    # the student equal to the teacher (m = 0, theta = q = rho) at omega = 0 makes no error
    assert ps.error_from_overlaps(0.0, 0.25, 0.25, 0.0) == pytest.approx(0.0, abs=1e-12)
    # broadcasting, and the quadrature is converged at the default node count
    e = ps.error_from_overlaps([0.0, 0.26], [0.16, 0.0], [0.11, 0.05], 0.3)
    assert e.shape == (2,) and np.all(e > 0)
    np.testing.assert_allclose(
        e, ps.error_from_overlaps([0.0, 0.26], [0.16, 0.0], [0.11, 0.05], 0.3, n_nodes=24), rtol=1e-6
    )
    with pytest.raises(ValueError, match="theta"):
        ps.error_from_overlaps(0.0, 0.5, 0.1, 0.3)
    with pytest.raises(ValueError, match="n_nodes"):
        ps.error_from_overlaps(0.0, 0.1, 0.1, 0.3, n_nodes=1)


def test_error_from_overlaps_matches_monte_carlo():
    """eps_g measured on fresh data equals the overlap formula, once the O(1/d) term that the
    positional encodings add through the value path (``S p``) is left out."""
    d = 400
    teacher = ps.make_teacher(d, 0.3, seed=0)
    noise = torch.randn(d, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    Q = 0.7 * teacher.Q_star + 0.3 * noise
    x, y, z = ps.sample(10000, teacher, seed=2)
    model = TiedLowRankAttention(d, 1, init=Q, dtype="float64")
    with torch.no_grad():
        mc = float((((model.attention(x) @ z - y) ** 2).sum((-1, -2)) / (2 * d)).mean())
    ov = ps.overlaps(Q, teacher.Q_star)
    rho = 0.25 * float(teacher.Q_star.square().mean())
    theory = float(ps.error_from_overlaps(ov["m"], ov["theta"], ov["q"], 0.3, rho=rho))
    assert abs(mc - theory) / theory < 0.04


def test_histogram_data_counts():
    x, y = histogram_data(50, 10, 15, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (50, 10)
    for i in range(5):
        seq = x[i].tolist()
        assert y[i].tolist() == [seq.count(t) for t in seq]


def test_chapter_experiments_are_registered():
    from attnlab.experiments import names

    for name in ("pt_gd", "pt_curves", "pt_finite_d", "pt_adam_random", "pt_untied", "pt_value",
                 "pt_correlated", "pt_histogram", "pt_theory"):  # fmt: skip
        assert name in names()


@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        ("pt_gd", {"d": 12, "n_alpha": 2, "steps": 3}),
        ("pt_curves", {"d": 12, "steps": 4, "record_every": 2}),
        ("pt_finite_d", {"ds": "8,12", "steps": 3}),
        ("pt_adam_random", {"d": 12, "steps": 3, "steps_gd": 3}),
        ("pt_untied", {"d": 12, "n_alpha": 2, "steps": 3}),
        ("pt_value", {"d": 8, "n_alpha": 2, "steps": 3}),
        ("pt_correlated", {"d": 12, "n_alpha": 2, "steps": 3}),
        ("pt_histogram", {"n_train": 60, "n_test": 30, "batch": 30, "epochs": 1, "dim": 8, "hidden": 8}),
    ],
)
def test_experiments_run_at_tiny_size(name, overrides):
    from attnlab.experiments import run

    small = {"n_seeds": 2, "n_test": 40} if name != "pt_histogram" else {}
    result = run(name, "book", overrides={**small, **overrides}, cache=False)
    assert result.rows and all(
        np.isfinite(v) for r in result.rows for v in r.values() if isinstance(v, float)
    )
