"""Tests of attnlab.models.softmax_attention (Part II): token form, fast form, hand-written gradient."""

import pytest
import torch

from attnlab.models import (
    HistogramTransformer,
    PositionalLinear,
    TiedLowRankAttention,
    TiedLowRankAttentionWithValue,
    UntiedLowRankAttention,
)
from attnlab.tasks import phase_transition as ps
from attnlab.train import train


def _problem(d=16, n=30, n_seeds=3, omega=0.3, seed=0):
    teacher = ps.make_teacher(d, omega, n_seeds=n_seeds, seed=seed)
    x, y, z = ps.sample(n, teacher, seed=seed + 1)
    return teacher, x, y, z


def _token_risk(model, x, y):
    """The plain form: sum_mu ||f(x^mu) - y^mu||^2 / (2d) of one model, by autograd."""
    return ((model(x) - y) ** 2).sum() / (2 * x.shape[-1])


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
    B = torch.tensor([[0.7, 0.3], [0.2, 0.8]])  # not symmetric: B x, not Bᵀ x
    model = PositionalLinear(2, init=B)
    x = torch.randn(5, 2, 7, generator=torch.Generator().manual_seed(0))
    # The parameter's product and the plain one may differ by an ulp of the O(1) terms, which is
    # far above atol=1e-8 where the two terms cancel (about 1% of random draws failed so).
    assert torch.allclose(model(x), B @ x, rtol=1e-6, atol=1e-6)
    assert not torch.allclose(model(x), B.T @ x, atol=1e-3)
    assert torch.equal(PositionalLinear(3).B, torch.eye(3))
    with pytest.raises(ValueError, match="init"):
        PositionalLinear(2, init=torch.ones(3, 3))
    with pytest.raises(ValueError, match="init"):
        PositionalLinear(2, init="random")
    with pytest.raises(ValueError, match="x"):
        model(torch.ones(5, 3, 7))


def test_quadratic_coefficients_match_the_trace_form():
    _, x, y, _ = _problem(n_seeds=2)
    G, P, c = TiedLowRankAttention.gram(x, y)
    a, b = torch.rand(2, *c.shape, dtype=c.dtype, generator=torch.Generator().manual_seed(0))
    S = torch.stack([torch.stack([a, 1 - a], -1), torch.stack([1 - b, b], -1)], -2)
    k2, ka, kb, k0 = TiedLowRankAttention.quadratic_coefficients(G, P, c)
    quad = 0.5 * (k2 * (a * a + b * b) + ka * a + kb * b + k0)
    assert torch.allclose(quad, TiedLowRankAttention.reduced_risk(S, G, P, c), atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("fast", [True, False])
def test_fast_risk_and_gradient_match_the_token_form(seed, fast):
    """Runs [2, S]: the reduced risk of every run, and its gradient (hand-written for fast=True,
    autograd of the reduced form otherwise), equal the token form's risk and autograd gradient."""
    teacher, x, y, _ = _problem(seed=seed)
    S_, n, _, d = x.shape
    Q0 = torch.randn(2, S_, d, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(5 + seed))
    batched = TiedLowRankAttention(d, 1, init=Q0, runs=(2, S_), dtype="float64")
    data = TiedLowRankAttention.reduce(x, y)
    risk = batched.risk(data, fast=fast)  # [2, S]
    assert risk.shape == (2, S_)
    risk.sum().backward()
    for i in range(2):
        for s in range(S_):
            one = TiedLowRankAttention(d, 1, init=Q0[i, s], dtype="float64")
            ref = _token_risk(one, x[s], y[s])
            assert torch.allclose(risk[i, s].detach(), ref, rtol=1e-12, atol=0)
            ref.backward()
            assert torch.allclose(batched.Q.grad[i, s], one.Q.grad, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("cls", [UntiedLowRankAttention, TiedLowRankAttentionWithValue])
def test_variants_fast_form_matches_their_token_form(cls):
    teacher, x, y, _ = _problem(d=10, n=12, n_seeds=2, seed=3)
    S_, n, _, d = x.shape
    gen = torch.Generator().manual_seed(7)
    model = cls(d, 1, init="random", seed=1, runs=(S_,), dtype="float64")
    with torch.no_grad():  # leave the start, where the variant is the tied model
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    risk = model.risk(TiedLowRankAttention.reduce(x, y))  # [S]
    token = ((model(x) - y) ** 2).sum((-1, -2, -3)) / (2 * d)  # token form on [S, n, 2, d]
    assert torch.allclose(risk, token, rtol=1e-12, atol=0)
    (g_fast,) = torch.autograd.grad(risk.sum(), [model.Q])
    (g_token,) = torch.autograd.grad(token.sum(), [model.Q])
    assert torch.allclose(g_fast, g_token, rtol=1e-9, atol=1e-12)


def test_variants_start_as_the_tied_model():
    _, x, y, _ = _problem(d=10, n=8, n_seeds=2)
    data = TiedLowRankAttention.reduce(x, y)
    tied = TiedLowRankAttention(10, 1, init="random", seed=2, runs=(2,), dtype="float64")
    for cls in (UntiedLowRankAttention, TiedLowRankAttentionWithValue):
        other = cls(10, 1, init="random", seed=2, runs=(2,), dtype="float64")
        assert torch.allclose(other.risk(data), tied.risk(data), rtol=1e-12, atol=0)


def test_batched_gd_equals_one_model_trained_alone():
    """GD (attnlab.train) on the stacked seeds is GD on each seed: compare with torch.optim.SGD
    on one model in the token form."""
    teacher, x, y, _ = _problem(n_seeds=2)
    d = x.shape[-1]
    batched = TiedLowRankAttention(d, 1, init=teacher.Q_star[None, :, :, None], runs=(1, 2), dtype="float64")
    data = TiedLowRankAttention.reduce(x, y)
    train(batched, lambda m, *b: m.risk(type(data)(*b)), tuple(data), lr=0.15, steps=20, weight_decay=0.01,
          dtype="float64")  # fmt: skip
    model = TiedLowRankAttention(d, 1, init=teacher.Q_star[1], dtype="float64")
    opt1 = torch.optim.SGD(model.parameters(), lr=0.15, weight_decay=0.01)
    for _ in range(20):
        opt1.zero_grad()
        _token_risk(model, x[1], y[1]).backward()
        opt1.step()
    assert torch.allclose(batched.Q.detach()[0, 1], model.Q.detach(), atol=1e-10)


def test_padding_is_exact():
    """Zero-weight padding samples change nothing: the padded risk equals the risk on the n kept."""
    teacher, x, y, _ = _problem(n=30, n_seeds=1)
    mask = (torch.arange(30) < 12).to(x.dtype)[None]
    for fast in (True, False):
        model = TiedLowRankAttention(16, 1, init=teacher.Q_star[..., None], runs=(1,), dtype="float64")
        padded = model.risk(TiedLowRankAttention.reduce(x, y, mask), fast=fast).sum()
        (grad_pad,) = torch.autograd.grad(padded, [model.Q])
        kept = model.risk(TiedLowRankAttention.reduce(x[:, :12], y[:, :12]), fast=fast).sum()
        (grad_kept,) = torch.autograd.grad(kept, [model.Q])
        assert torch.allclose(padded, kept, atol=1e-12)
        assert torch.allclose(grad_pad, grad_kept, atol=1e-12)


def test_fast_form_rejects_bad_input():
    _, x, y, _ = _problem(d=8, n=5, n_seeds=2)
    model = TiedLowRankAttention(8, 1, runs=(3,))
    with pytest.raises(ValueError, match="data"):
        model.risk(TiedLowRankAttention.reduce(x, y))  # 2 data sets for 3 runs
    with pytest.raises(ValueError, match="data"):
        model.risk((x, y))
    with pytest.raises(ValueError, match="x"):
        TiedLowRankAttention.reduce(x[0], y[0])
    with pytest.raises(ValueError, match="weights"):
        TiedLowRankAttention.reduce(x, y, torch.ones(2, 4))
    with pytest.raises(ValueError, match="runs"):
        TiedLowRankAttention(8, 1, runs=3)


def test_histogram_transformer():
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(15, (4, 10), generator=gen)
    for kind in ("semantic", "positional"):
        model = HistogramTransformer(10, 15, 16, 8, kind, gen)
        A, e = model.attention(x)
        assert A.shape == (4, 10, 10) and e.shape == (4, 10, 16)
        assert torch.allclose(A.sum(-1), torch.ones(4, 10))
        assert model(x).shape == (4, 10, 11)
    # positional attention does not depend on the tokens
    A1, _ = model.attention(x)
    A2, _ = model.attention(torch.randint(15, (4, 10), generator=gen))
    assert torch.allclose(A1, A2)
    with pytest.raises(ValueError, match="attention_input"):
        HistogramTransformer(10, 15, 16, 8, "both", gen)
