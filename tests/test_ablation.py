"""Tests of attnlab.ablation: trained DIAG / GD++ models with chosen omegas set to zero."""

import pytest
import torch

from attnlab.ablation import BLOCKS, ablated, ablation_loss, term_sizes, top2_outside_share
from attnlab.models import LinearTransformer
from attnlab.tasks.icl_regression import sample_regression

D, N = 4, 9


@pytest.fixture
def batch():
    return sample_regression(32, d=D, n=N, noise="uniform:1", generator=0, dtype="float64")


@pytest.fixture
def model():
    return LinearTransformer(D, 3, 2, "diag", init_scale=0.2, seed=3, dtype="float64")


def test_nothing_removed_is_the_model(model, batch):
    copy = ablated(model, ())
    assert copy.diag_mode == "omega" and not any(p.requires_grad for p in copy.parameters())
    torch.testing.assert_close(copy.predict(*batch[:3]), model.predict(*batch[:3]), rtol=1e-12, atol=1e-12)


def test_the_chosen_blocks_are_zero_and_the_model_is_untouched(model):
    before = model.omegas().detach().clone()
    om = ablated(model, [(0, "xy"), (2, "yy")]).omegas()
    assert om[0, BLOCKS.index("xy")] == 0 and om[2, BLOCKS.index("yy")] == 0
    mask = torch.ones_like(om, dtype=torch.bool)
    mask[0, 1] = mask[2, 3] = False
    assert torch.equal(om[mask], before[mask])
    assert torch.equal(model.omegas().detach(), before)


def test_one_layer_gradient_step_by_hand(batch):
    """One layer with only omega_yx = c predicts -c <alpha, x_t>; without it, 0."""
    m = LinearTransformer(D, 1, 1, "diag", diag_mode="omega", init_scale=0.0, dtype="float64")
    with torch.no_grad():
        m.omega.copy_(torch.tensor([[0.3, -0.2, -0.05, 0.1]], dtype=torch.float64))
    X, y, xq, target = batch[:4]
    alpha = (X * y[..., None]).sum(1)
    pred = 0.05 * (alpha * xq).sum(-1)
    assert ablation_loss(m, (), X, y, xq, target) == pytest.approx(
        0.5 * float(((pred - target) ** 2).mean()), rel=1e-12
    )
    assert ablation_loss(m, [(0, "yx")], X, y, xq, target) == pytest.approx(
        0.5 * float((target**2).mean()), rel=1e-12
    )


def test_last_layer_x_blocks_do_not_reach_the_prediction(model, batch):
    last = model.n_layers - 1
    intact = ablation_loss(model, (), *batch[:4])
    assert ablation_loss(model, [(last, "xx"), (last, "xy")], *batch[:4]) == pytest.approx(intact, rel=1e-12)
    assert ablation_loss(model, [(last, "yy")], *batch[:4]) != pytest.approx(intact, rel=1e-6)


def test_gdpp_keeps_its_mask(batch):
    gdpp = LinearTransformer(D, 2, 1, "gdpp", init_scale=0.2, seed=1, dtype="float64")
    copy = ablated(gdpp, ())
    assert copy.param == "gdpp"
    torch.testing.assert_close(copy.predict(*batch[:3]), gdpp.predict(*batch[:3]), rtol=1e-12, atol=1e-12)


def test_bad_input(model, batch):
    with pytest.raises(ValueError, match="model"):
        ablated(LinearTransformer(D, 1, 1, "full"), ())
    with pytest.raises(ValueError, match="block"):
        ablated(model, [(0, "xz")])
    with pytest.raises(ValueError, match="layer"):
        ablated(model, [(3, "xx")])
    with pytest.raises(ValueError, match="zero"):
        ablated(model, [0])
    batched = LinearTransformer(D, 1, 1, "diag", batch_shape=(2,), dtype="float64")
    with pytest.raises(ValueError, match="one model"):
        ablation_loss(batched, (), *batch[:4])
    with pytest.raises(ValueError, match="target"):
        ablation_loss(model, (), *batch[:3], batch[3][:5])


def test_term_sizes_of_one_layer_by_hand(batch):
    """One layer with only omega_xy = b: |b y_i alpha| over |x|, the other terms 0."""
    m = LinearTransformer(D, 1, 1, "diag", diag_mode="omega", init_scale=0.0, dtype="float64")
    with torch.no_grad():
        m.omega.copy_(torch.tensor([[0.0, -0.07, 0.0, 0.0]], dtype=torch.float64))
    X, y, xq = batch[:3]
    sizes = term_sizes(m, X, y, xq)
    alpha = (X * y[..., None]).sum(1)  # [B, d]
    by_hand = 0.07 * y.pow(2).sum(1).sqrt() * alpha.norm(dim=-1) / X.pow(2).sum((1, 2)).sqrt()
    assert sizes.shape == (1, 4) and torch.equal(sizes[0, [0, 2, 3]], torch.zeros(3, dtype=torch.float64))
    assert float(sizes[0, 1]) == pytest.approx(float(by_hand.median()), rel=1e-12)


def test_top2_outside_share():
    g = torch.Generator().manual_seed(0)
    u, v = torch.randn(2, 6, 2, generator=g, dtype=torch.float64)
    u[3:, 0] = v[:3, 0] = u[:3, 1] = v[3:, 1] = 0  # disjoint supports: u v^T has a zero diagonal
    rank2 = 2 * torch.eye(6, dtype=torch.float64) + u @ v.T  # diag(2 I_5, 2) plus rank two
    assert float(top2_outside_share(rank2)) == pytest.approx(1.0, rel=1e-12)
    noise = top2_outside_share(torch.randn(200, 11, 11, generator=g, dtype=torch.float64))
    assert noise.shape == (200,) and 0.3 < float(noise.mean()) < 0.7


def test_term_sizes_and_top2_bad_input(model, batch):
    with pytest.raises(ValueError, match="model"):
        term_sizes(LinearTransformer(D, 1, 1, "full"), *batch[:3])
    with pytest.raises(ValueError, match="X"):
        term_sizes(model, batch[0][..., :2], *batch[1:3])
    with pytest.raises(ValueError, match="M must"):
        top2_outside_share(torch.zeros(3, 4))
