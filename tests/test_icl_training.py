"""Tests for attnlab.icl_training, the batched trainer of Part III (chapters 04, 05)."""

import numpy as np
import pytest
import torch

from attnlab import icl_training as it
from attnlab.tasks.icl_regression import sample_regression


def _batch(B=6, sigma_max=2.0, seed=3):
    return sample_regression(B, 10, 20, sigma_max=sigma_max, generator=seed, dtype="float64")


@pytest.mark.parametrize(("param", "heads"), [("full", 2), ("diag", 2), ("gdpp", 2), ("diag_omega", 1)])
def test_gram_forward_matches_token_model_layer_by_layer(param, heads):
    b = _batch()
    theta = it.init_params(
        param, 3, heads, (), init_scale=0.1, generator=torch.Generator().manual_seed(1), dtype=torch.float64
    )
    G, e_t = it.gram_inputs(b.X, b.y, b.x_query)
    ours = it.forward(param, theta, G, e_t, return_layers=True)  # [L+1, B]
    model = it.to_model(param, theta)
    with torch.no_grad():
        ref = model.predictions_by_layer(b.X, b.y, b.x_query)
    scale = ref.abs().max()
    assert torch.allclose(ours, ref, rtol=0, atol=1e-10 * float(scale)), float((ours - ref).abs().max())


def test_gdpp_spectral_forward_matches_gram_forward():
    b = _batch(B=5)
    theta = it.init_params(
        "gdpp", 4, 2, (3,), init_scale=0.1, generator=torch.Generator().manual_seed(2), dtype=torch.float64
    )
    G, e_t = it.gram_inputs(b.X, b.y, b.x_query)
    a = it.forward("gdpp", theta, G, e_t, return_layers=True)
    c = it.forward_gdpp_spectral(theta, *it.spectral_inputs(G, e_t), return_layers=True)
    assert a.shape == c.shape == (3, 5, 5)
    assert torch.allclose(a, c, rtol=1e-10, atol=1e-10 * float(a.abs().max()))


def test_omega_of_one_head_diag():
    theta = torch.tensor([[[2.0, 3.0, 5.0, 7.0]]])  # p_x, p_y, q_x, q_y
    np.testing.assert_allclose(it.omega("diag", theta)[0].numpy(), [10.0, 14.0, 15.0, 21.0])
    np.testing.assert_allclose(it.omega("gdpp", theta[..., :3])[0].numpy(), [10.0, 0.0, 15.0, 0.0])


def test_batched_training_equals_training_models_separately():
    kw = dict(noise=["uniform:1", "categorical:1,3"], seeds=[0, 1], steps=5, batch_size=32, lr=1e-2)
    both = it.train_icl(["diag", "gdpp"], [1, 2], **kw)
    alone = it.train_icl(["diag"], [2], **kw)
    a, b = both.group("diag", 2), alone.group("diag", 2)
    assert torch.allclose(a.theta, b.theta, rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(a.loss, b.loss, rtol=1e-5)
    assert a.theta.shape == (2, 2, 2, 1, 4) and a.loss.shape == (2, 2, 1)
    assert both.group("gdpp", 1).theta.shape == (2, 2, 1, 1, 3)


def test_training_reduces_the_loss_of_one_layer_model():
    res = it.train_icl(
        ["gdpp"],
        [1],
        ["uniform:0"],
        [0],
        steps=150,
        batch_size=256,
        lr=2e-2,
        lr_schedule="cosine",
        record_every=50,
    )
    loss = res.group("gdpp", 1).loss[0, 0]
    # The zero prediction has loss E<w, x_t>^2 / 2 = 5; the best one-step-GD value is 1.774.
    assert 1.65 < loss[-1] < 2.0 and loss[-1] < loss[0], loss


def test_divergent_model_is_frozen_and_flagged():
    res = it.train_icl(
        ["full"], [3], ["uniform:0", "uniform:5"], [0], steps=3, batch_size=16, lr=1e-3, init_scale=3.0
    )
    grp = res.group("full", 3)
    assert grp.diverged.all()
    assert torch.isfinite(grp.theta).all()


def test_evaluate_shapes_and_layers():
    b = _batch(B=7)
    theta = it.init_params("diag", 2, 1, (3,), init_scale=0.05, dtype=torch.float64)
    out = it.evaluate("diag", theta, b.X, b.y, b.x_query, chunk=3)
    layers = it.evaluate("diag", theta, b.X, b.y, b.x_query, return_layers=True)
    assert out.shape == (3, 7) and layers.shape == (3, 3, 7)
    assert torch.allclose(layers[:, -1], out)
    assert torch.all(layers[:, 0] == 0)  # nothing read out before the first layer


def test_sampler_shapes_and_noise_levels():
    data = it.sample_icl(["fixed:2", "categorical:1,3", "uniform:0"], 2, 50)
    assert data["X"].shape == (3, 2, 50, 20, 10) and data["y"].shape == (3, 2, 50, 20)
    assert torch.all(data["sigma"][0] == 2) and set(data["sigma"][1].unique().tolist()) <= {1.0, 3.0}
    assert torch.all(data["sigma"][2] == 0)
    assert it.parse_noise("categorical:1,3,5") == ("categorical", (1.0, 3.0, 5.0))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"params": ["softmax"]}, "params"),
        ({"params": []}, "params"),
        ({"depths": [0]}, "depths"),
        ({"noise": ["gaussian:1"]}, "noise kind"),
        ({"noise": ["uniform"]}, "noise"),
        ({"noise": ["uniform:1,2"]}, "noise"),
        ({"noise": ["fixed:-1"]}, "noise"),
        ({"seeds": [-1]}, "seeds"),
        ({"steps": 0}, "steps"),
        ({"batch_size": 0}, "batch_size"),
        ({"lr": -1.0}, "lr"),
        ({"lr": {"full": 1e-3}}, "lr"),
        ({"betas": (0.9,)}, "betas"),
        ({"lr_schedule": "step"}, "lr_schedule"),
        ({"num_threads": 0}, "num_threads"),
        ({"params": ["diag_omega"], "n_heads": 2}, "n_heads"),
    ],
)
def test_train_icl_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        it.train_icl(**{"params": ["diag"], "steps": 1, "batch_size": 2, **kwargs})


def test_other_bad_input():
    b = _batch(B=4)
    theta = it.init_params("diag", 1, 1, ())
    with pytest.raises(ValueError, match="param"):
        it.forward("softmax", theta, *it.gram_inputs(b.X, b.y, b.x_query))
    with pytest.raises(ValueError, match="y"):
        it.evaluate("diag", theta, b.X, b.y[:, :3], b.x_query)
    with pytest.raises(ValueError, match="X"):
        it.evaluate("diag", theta, b.X[0], b.y, b.x_query)
    with pytest.raises(ValueError, match="theta"):
        it.to_model("diag", theta[0])
    with pytest.raises(ValueError, match="param"):
        it.omega("full", theta)
    res = it.train_icl(["diag"], [1], steps=1, batch_size=2)
    with pytest.raises(ValueError, match="n_layers"):
        res.group("diag", 5)


def test_diagonal_mass():
    D = torch.diag(torch.tensor([2.0] * 10 + [-3.0]))
    assert torch.isclose(it.diagonal_mass(D), torch.tensor(1.0))
    off = torch.zeros(11, 11)
    off[0, 1] = 1.0
    assert it.diagonal_mass(off) == 0
    mixed = D + 0.0
    mixed[0, 0] += 1.0  # breaks the scalar x-block: 1.0**2 * (1 - 1/10) of the mass leaves the pattern
    total = (mixed**2).sum()
    assert torch.isclose(it.diagonal_mass(mixed), (total - 0.9) / total)
    with pytest.raises(ValueError, match="P"):
        it.diagonal_mass(torch.zeros(3, 4))
