"""Tests for attnlab.icl_training, the batched trainer of Part III (chapters 04, 05)."""

import numpy as np
import pytest
import torch

from attnlab import icl_training as it
from attnlab.models import LinearTransformer
from attnlab.tasks.icl_regression import sample_regression
from attnlab.train import lr_factor


def _batch(B=6, sigma_max=2.0, seed=3):
    return sample_regression(B, 10, 20, noise=f"uniform:{sigma_max}", generator=seed, dtype="float64")


def test_batched_training_equals_training_models_separately():
    kw = dict(noise=["uniform:1", "categorical:1,3"], seeds=[0, 1], steps=5, batch_size=32, lr=1e-2)
    both = it.train_icl(["diag", "gdpp"], [1, 2], **kw)
    alone = it.train_icl(["diag"], [2], **kw)
    one_seed = it.train_icl(["diag"], [2], **{**kw, "seeds": [1]})
    a, b, c = both.group("diag", 2), alone.group("diag", 2), one_seed.group("diag", 2)
    assert torch.equal(a.weights, b.weights)
    np.testing.assert_array_equal(a.loss, b.loss)
    # Seed 1 trained alone: same initialisation and data stream, so the same model (float32 batching).
    torch.testing.assert_close(a.weights[:, 1:], c.weights, rtol=1e-5, atol=1e-8)
    assert a.weights.shape == (2, 2, 2, 1, 4) and a.loss.shape == (2, 2, 1)
    assert both.group("gdpp", 1).weights.shape == (2, 2, 1, 1, 3)
    assert not torch.equal(a.weights[0, 0], a.weights[0, 1])


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
    assert list(res.steps) == [50, 100, 150]


def test_warmup_schedule_ramps_then_stays_constant():
    """``"warmup:W"``: factors 1/W, 2/W, ..., 1, then 1; ``"warmup:1"`` trains as the constant schedule."""
    assert [lr_factor("warmup:4", s, 10) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    kw = dict(noise=["uniform:1"], seeds=[0], steps=3, batch_size=16, lr=1e-2)
    const = it.train_icl(["diag"], [2], lr_schedule="constant", **kw).group("diag", 2).weights
    warm1 = it.train_icl(["diag"], [2], lr_schedule="warmup:1", **kw).group("diag", 2).weights
    warm3 = it.train_icl(["diag"], [2], lr_schedule="warmup:3", **kw).group("diag", 2).weights
    assert torch.equal(const, warm1) and not torch.equal(const, warm3)


def test_divergent_model_is_frozen_and_flagged():
    res = it.train_icl(
        ["full"], [3], ["uniform:0", "uniform:5"], [0], steps=3, batch_size=16, lr=1e-3, init_scale=3.0
    )
    grp = res.group("full", 3)
    assert grp.diverged.all()
    assert torch.isfinite(grp.weights).all()
    assert np.isnan(grp.loss).all()


def test_evaluate_shapes_layers_and_chunks():
    b = _batch(B=7)
    model = LinearTransformer(10, 2, 1, "diag", batch_shape=(3,), init_scale=0.2, seed=4)  # float32
    out = it.evaluate(model, b.X, b.y, b.x_query, chunk=3)
    layers = it.evaluate(model, b.X, b.y, b.x_query, return_layers=True)
    assert out.shape == (3, 7) and layers.shape == (3, 3, 7) and out.dtype == torch.float64
    torch.testing.assert_close(layers[:, -1], out, rtol=1e-12, atol=1e-14)
    assert torch.all(layers[:, 0] == 0)  # nothing read out before the first layer
    assert model.p.dtype == torch.float32  # evaluated on a float64 copy
    ref = LinearTransformer.from_packed(model.packed_weights().detach(), 10, "diag").predict(
        b.X, b.y, b.x_query
    )
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-14)


def test_group_models_are_float64_copies():
    res = it.train_icl(["full"], [1], ["uniform:1", "uniform:2"], [0, 1], steps=2, batch_size=4)
    grp = res.group("full", 1)
    one = grp.models((1, 0))
    assert one.batch_shape == () and one.P.dtype == torch.float64
    torch.testing.assert_close(one.P.float(), grp.model.P[1, 0])
    assert grp.models(1).batch_shape == (2,)


def test_decayed_model_sees_a_fixed_decay_as_fixed():
    from attnlab.models import DecayedLinearTransformer
    from attnlab.tasks.icl_regression import MixedNoiseRegression
    from attnlab.train import train

    model = DecayedLinearTransformer(
        10, 2, 1, gamma_init=[0.8, 0.8], learn_decay=[True, False], batch_shape=(2,)
    )
    start = model.decay_logit.detach().clone()
    train(model, it.fast_half_mse_loss, MixedNoiseRegression(noise="uniform:1"), optimizer="adam", lr=1e-2,
          param_lr={"decay_logit": 0.1}, steps=5, batch_size=16)  # fmt: skip
    assert torch.equal(model.decay_logit[1], start[1]) and not torch.equal(model.decay_logit[0], start[0])


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
        ({"noise": []}, "noise"),
        ({"seeds": [-1]}, "seeds"),
        ({"steps": 0}, "steps"),
        ({"batch_size": 0}, "batch_size"),
        ({"lr": -1.0}, "lr"),
        ({"lr": {"full": 1e-3}}, "lr"),
        ({"betas": (0.9,)}, "betas"),
        ({"lr_schedule": "step"}, "lr_schedule"),
        ({"lr_schedule": "warmup:0"}, "lr_schedule"),
        ({"lr_schedule": "warmup:x"}, "lr_schedule"),
        ({"num_threads": 0}, "num_threads"),
        ({"diag_mode": "free"}, "diag_mode"),
    ],
)
def test_train_icl_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        it.train_icl(**{"params": ["diag"], "steps": 1, "batch_size": 2, **kwargs})


def test_other_bad_input():
    b = _batch(B=4)
    model = LinearTransformer(10, 1, 1, "diag")
    with pytest.raises(ValueError, match="y"):
        it.evaluate(model, b.X, b.y[:, :3], b.x_query)
    with pytest.raises(ValueError, match="X"):
        it.evaluate(model, b.X[0], b.y, b.x_query)
    with pytest.raises(ValueError, match="model"):
        it.evaluate("diag", b.X, b.y, b.x_query)
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
    assert not it.diagonal_mass(mixed.requires_grad_()).requires_grad  # a diagnostic: float() warns not
    with pytest.raises(ValueError, match="P"):
        it.diagonal_mass(torch.zeros(3, 4))


def test_the_retry_rule_compares_a_model_with_the_best_shallower_one():
    # DIAG at 1, 2 and 3 layers, one noise setting, two seeds: the 3-layer model of seed 0 is worse
    # than 1.1 times the best shallower model (1 layer) but better than the worst (2 layers)
    from types import SimpleNamespace

    val = {
        ("diag", 1): np.array([[1.0, 1.0]]),
        ("diag", 2): np.array([[3.0, 1.0]]),
        ("diag", 3): np.array([[2.0, 1.05]]),
        ("full", 3): np.array([[0.5, np.inf]]),  # another parametrisation: no shallower model
    }
    groups = {k: SimpleNamespace(diverged=np.zeros((1, 2), bool)) for k in val}
    failed = it._failed(SimpleNamespace(groups=groups), val, fail_ratio=1.1)
    assert failed[("diag", 3)].tolist() == [[True, False]]
    assert failed[("diag", 2)].tolist() == [[True, False]]
    assert failed[("diag", 1)].tolist() == [[False, False]]
    assert failed[("full", 3)].tolist() == [[False, True]]  # a non-finite loss fails
