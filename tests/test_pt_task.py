"""Tests of attnlab.tasks.phase_transition: the positional/semantic task (pt = phase transition)."""

import numpy as np
import pytest
import torch

from attnlab.models import TiedLowRankAttention
from attnlab.tasks import phase_transition as ps


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


def test_linear_error_is_half_the_squared_residual_per_dimension():
    # one sample, d = 2, B = 0: the residual is -y, so the error is ||y||^2 / (2d) = 9 / 4
    y = torch.tensor([[[[1.0, 2.0], [0.0, 2.0]]]], dtype=torch.float64)  # [seeds, n, 2, d]
    z = torch.ones_like(y)
    B = torch.zeros(1, 2, 2, dtype=torch.float64)
    assert ps.linear_error(B, z, y).item() == pytest.approx(2.25, rel=1e-12)
    # the mean over samples, not the sum: two copies of the same sample give the same error
    assert ps.linear_error(B, z.repeat(1, 2, 1, 1), y.repeat(1, 2, 1, 1)).item() == pytest.approx(2.25)


def test_verify_overlaps_exercise():
    assert ps.verify_overlaps({"positional": (0, 0), "semantic": (0, 0.25)}) == "correct"
    with pytest.raises(ValueError, match="semantic"):
        ps.verify_overlaps({"positional": (0, 0), "semantic": (0, 1.0)})
    with pytest.raises(ValueError, match="answer"):
        ps.verify_overlaps({"semantic": (0, 0.25)})


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


def test_verify_encoding_term_right_and_wrong_answers():
    # Monte Carlo of E sum_l (S_l1 - S_l2)^2 / (2d) at the scores h_l = s_l m + sqrt(q) xi_l
    m, q, d = 0.26, 0.05, 100
    rng = np.random.default_rng(0)
    h = np.array([m, -m]) + np.sqrt(q) * rng.standard_normal((400_000, 2))
    logits = h[:, :, None] * h[:, None, :]
    S = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    mc = float(((S[:, :, 0] - S[:, :, 1]) ** 2).sum(1).mean()) / (2 * d)
    assert ps.verify_encoding_term(mc, m=m, q=q, d=d).startswith("Correct")
    with pytest.raises(ValueError, match="divide by 2d"):
        ps.verify_encoding_term(mc * 2 * d, m=m, q=q, d=d)
    with pytest.raises(ValueError, match="not the encodings"):
        ps.verify_encoding_term(mc * 1.5, m=m, q=q, d=d)
