"""Tests of attnlab.models.GatedLinearTransformer (chapter 06): gated keys on DIAG layers."""

import pytest
import torch

from attnlab.models import GatedLinearTransformer, LinearTransformer
from attnlab.tasks.icl_regression import build_tokens, sample_regression

D, N = 4, 9


@pytest.fixture
def batch():
    return sample_regression(7, d=D, n=N, noise="token:0.5,3@0.7,0.3", generator=3, dtype="float64")


def gated(L=3, *, batch_shape=(), gate_scale=0.3, seed=1, **kw):
    model = GatedLinearTransformer(
        D, L, 2, batch_shape=batch_shape, init_scale=0.2, seed=seed, dtype="float64", **kw
    )
    with torch.no_grad():
        g = torch.Generator().manual_seed(10)
        model.gate.copy_(gate_scale * torch.randn(model.gate.shape, generator=g, dtype=torch.float64))
    return model


def naive_gated_forward(model, Z):
    """One token and one layer at a time: S = sum_j g_j z_j z_j^T, z_i <- z_i + (Omega ∘ S) z_i."""
    om = model.omegas()  # [L, 4]
    n = Z.shape[-1] - 1
    Z = Z.clone()
    for layer in range(model.n_layers):
        xx, xy, yx, yy = om[layer].tolist()
        Omega = torch.full((D + 1, D + 1), xx, dtype=Z.dtype)
        Omega[:D, D], Omega[D, :D], Omega[D, D] = xy, yx, yy
        a, b, c = model.gate[layer].tolist()
        out = Z.clone()
        for s in range(Z.shape[0]):
            S = torch.zeros(D + 1, D + 1, dtype=Z.dtype)
            for j in range(n):
                z = Z[s, :, j]
                g = 2 / (1 + torch.exp(-(a + b * z[D] ** 2 + c * (z[:D] ** 2).sum() / D)))
                S += g * torch.outer(z, z)
            out[s] = Z[s] + (Omega * S) @ Z[s]
        Z = out
    return Z


def test_forward_matches_the_token_by_token_form(batch):
    model = gated()
    Z = build_tokens(batch.X, batch.y, batch.x_query)
    torch.testing.assert_close(model(Z), naive_gated_forward(model, Z), rtol=1e-12, atol=1e-12)
    assert model.predict(batch.X, batch.y, batch.x_query).shape == (7,)


def test_zero_gate_coefficients_are_diag_exactly(batch):
    for batch_shape in ((), (2, 3)):
        model = GatedLinearTransformer(
            D, 3, 2, batch_shape=batch_shape, init_scale=0.3, seed=4, dtype="float64"
        )
        diag = LinearTransformer(
            D, 3, 2, "diag", batch_shape=batch_shape, init_scale=0.3, seed=4, dtype="float64"
        )
        torch.testing.assert_close(model.omegas(), diag.omegas(), rtol=0, atol=0)
        got = model.predict(batch.X, batch.y, batch.x_query)
        assert got.shape == (*batch_shape, 7)
        assert torch.equal(got, diag.predict(batch.X, batch.y, batch.x_query))
        assert torch.equal(model.predict_fast(batch.X, batch.y, batch.x_query), got)
    # ... and a nonzero gate changes the prediction.
    g = gated()
    d0 = GatedLinearTransformer(D, 3, 2, init_scale=0.2, seed=1, dtype="float64")
    gap = (g.predict(batch.X, batch.y, batch.x_query) - d0.predict(batch.X, batch.y, batch.x_query)).abs()
    assert gap.max() > 1e-3


def test_batched_models_are_the_models_one_by_one(batch):
    model = gated(batch_shape=(2, 3), seed=[5, 6, 7])
    pred = model.predict(batch.X, batch.y, batch.x_query)  # [2, 3, B]
    for i in range(2):
        for r, seed in enumerate((5, 6, 7)):
            one = GatedLinearTransformer(D, 3, 2, init_scale=0.2, seed=seed, dtype="float64")
            with torch.no_grad():
                one.gate.copy_(model.gate[i, r])
                one.p.copy_(model.p[i, r])
                one.q.copy_(model.q[i, r])
            torch.testing.assert_close(
                pred[i, r], one.predict(batch.X, batch.y, batch.x_query), rtol=1e-12, atol=1e-12
            )


def test_gates_are_in_0_2_and_follow_the_residual(batch):
    model = gated(L=1)
    with torch.no_grad():
        model.gate.copy_(
            torch.tensor([[0.0, -2.0, 0.0]], dtype=torch.float64)
        )  # b < 0: large |y_j| gated down
    Z = build_tokens(batch.X, batch.y, batch.x_query)
    g = model.gates(Z[..., :N], 0)  # [B, n]
    assert g.shape == (7, N) and bool(((g > 0) & (g < 2)).all())
    order = torch.argsort(batch.y.abs(), dim=-1)
    assert bool((torch.diff(torch.gather(g, -1, order), dim=-1) <= 0).all())


def test_fixed_gates_get_no_gradient(batch):
    model = gated(batch_shape=(2,), learn_gate=[True, False])
    loss = ((model.predict(batch.X, batch.y, batch.x_query) - batch.target) ** 2).sum()
    loss.backward()
    assert model.gate.grad[0].abs().max() > 0
    assert torch.equal(model.gate.grad[1], torch.zeros_like(model.gate.grad[1]))
    assert model.p.grad[1].abs().max() > 0


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="learn_gate"):
        GatedLinearTransformer(D, 2, batch_shape=(3,), learn_gate=[True, False])
    with pytest.raises(ValueError, match="n_layers"):
        GatedLinearTransformer(D, 0)
    with pytest.raises(ValueError, match="Gram form"):
        gated().gram_forward(torch.zeros(2, D + 1, D + 1), torch.zeros(2, D + 1))
    with pytest.raises(ValueError, match="Z"):
        gated()(torch.zeros(2, D, N + 1, dtype=torch.float64))
    with pytest.raises(ValueError, match="features"):
        GatedLinearTransformer(D, 2, features="scaled")


def test_normalised_features_read_each_token_relative_to_its_prompt(batch):
    """Scaling a prompt's labels and inputs leaves normalised gates unchanged, not raw ones."""
    Z = build_tokens(batch.X, batch.y, batch.x_query)[..., :N]
    scale = torch.tensor([1.0, 3.0, 0.5, 2.0, 1.0, 7.0, 0.2], dtype=torch.float64)[:, None, None]
    for features, same in (("normalised", True), ("raw", False)):
        model = gated(L=1, features=features)
        g, g_scaled = model.gates(Z, 0), model.gates(scale * Z, 0)
        assert torch.allclose(g, g_scaled, rtol=1e-12, atol=1e-12) == same
    # By hand: y_j^2 / mean_k y_k^2 and |x_j|^2 / mean_k |x_k|^2.
    model = gated(L=1, features="normalised")
    a, b, c = model.gate[0].tolist()
    y2, x2 = batch.y**2, (batch.X**2).sum(-1)
    by_hand = 2 * torch.sigmoid(a + b * y2 / y2.mean(-1, keepdim=True) + c * x2 / x2.mean(-1, keepdim=True))
    torch.testing.assert_close(model.gates(Z, 0), by_hand, rtol=1e-12, atol=1e-12)
    # Zero coefficients: DIAG exactly, whatever the features.
    with torch.no_grad():
        model.gate.zero_()
    diag = LinearTransformer(D, 1, 2, "diag", init_scale=0.2, seed=1, dtype="float64")
    assert torch.equal(model.predict(*batch[:3]), diag.predict(*batch[:3]))


def test_gate_quantiles_and_constant_gates(batch):
    model = gated(2)
    q = model.gate_quantiles(*batch[:3], q=(0.0, 0.5, 1.0))
    assert q.shape == (2, 3) and (q[:, 0] <= q[:, 1]).all() and (q[:, 1] <= q[:, 2]).all()
    Z = build_tokens(*batch[:3])
    first = model.gates(Z[..., :N], 0).detach()
    assert float(q[0, 0]) == pytest.approx(float(first.min()), rel=1e-12)
    assert float(q[0, 2]) == pytest.approx(float(first.max()), rel=1e-12)
    fixed = model.with_constant_gates(torch.tensor([0.5, 2.0]))
    assert not any(p.requires_grad for p in fixed.parameters())
    assert torch.allclose(fixed.gates(Z[..., :N], 0), torch.full_like(first, 0.5), rtol=1e-12, atol=0)
    assert torch.allclose(fixed.gates(Z[..., :N], 1), torch.full_like(first, 2.0), rtol=0, atol=1e-8)
    assert torch.equal(fixed.omegas(), model.omegas())  # the omegas are kept
    with pytest.raises(ValueError, match="q must"):
        model.gate_quantiles(*batch[:3], q=(0.5, 1.5))
    with pytest.raises(ValueError, match="g must"):
        model.with_constant_gates([0.0, 1.0])
    with pytest.raises(ValueError, match="g"):
        model.with_constant_gates([1.0])
    with pytest.raises(ValueError, match="one model"):
        gated(2, batch_shape=(2,)).with_constant_gates([1.0, 1.0])
