"""Tests of attnlab.tasks.icl_regression (Part III sampler and token matrix)."""

import numpy as np
import pytest
import torch

from attnlab.tasks.icl_regression import (
    MixedNoiseRegression,
    Noise,
    RegressionBatch,
    build_tokens,
    gram_inputs,
    half_mse_loss,
    sample_conditioned_regression,
    sample_regression,
)


def test_shapes_and_model_of_the_data():
    b = sample_regression(64, d=5, n=8, generator=0, dtype="float64")
    assert isinstance(b, RegressionBatch)
    assert b.X.shape == (64, 8, 5) and b.y.shape == (64, 8) and b.x_query.shape == (64, 5)
    assert b.target.shape == (64,) and b.sigma.shape == (64,) and b.w.shape == (64, 5)
    assert b.X.dtype == torch.float64
    torch.testing.assert_close(b.y, torch.einsum("bnd,bd->bn", b.X, b.w))
    torch.testing.assert_close(b.target, torch.einsum("bd,bd->b", b.x_query, b.w))


def test_noise_has_the_drawn_standard_deviation():
    b = sample_regression(4000, d=3, n=50, noise="fixed:2", generator=1, dtype="float64")
    resid = b.y - torch.einsum("bnd,bd->bn", b.X, b.w)
    assert abs(resid.std().item() - 2.0) < 0.02
    assert torch.all(b.sigma == 2.0)


def test_uniform_and_categorical_sigmas():
    g = torch.Generator().manual_seed(2)
    s = Noise.parse("uniform:3").draw((200_000,), g, torch.float64)
    assert s.min() >= 0 and s.max() <= 3.0
    assert abs(s.mean().item() - 1.5) < 0.01
    assert abs((s**2).mean().item() - 3.0) < 0.03  # E sigma^2 = sigma_max^2 / 3
    for spec in ("categorical:1,3,5@0.5,0.25,0.25", Noise("categorical", (1.0, 3.0, 5.0), (0.5, 0.25, 0.25))):
        c = Noise.parse(spec).draw((100_000,), g)
        frac = [(c == v).float().mean().item() for v in (1.0, 3.0, 5.0)]
        np.testing.assert_allclose(frac, [0.5, 0.25, 0.25], atol=0.01)
        u = torch.rand(100_000, generator=g, dtype=torch.float64)
        frac = [(Noise.parse(spec).from_uniform(u) == v).double().mean().item() for v in (1.0, 3.0, 5.0)]
        np.testing.assert_allclose(frac, [0.5, 0.25, 0.25], atol=0.01)
    eq = Noise.parse("categorical:1,3").draw((100_000,), g)
    assert abs((eq == 1.0).float().mean().item() - 0.5) < 0.01


def test_noise_strings_round_trip():
    for spec in ("uniform:3", "fixed:0.5", "categorical:1,3,5", "categorical:1,3@0.25,0.75", "uniform:0"):
        assert str(Noise.parse(spec)) == spec
    assert Noise.parse("uniform:3") == Noise("uniform", (3,))
    u = torch.tensor([0.0, 0.3, 0.5, 0.99], dtype=torch.float64)
    assert Noise.parse("uniform:2").from_uniform(u).tolist() == [0.0, 0.6, 1.0, 1.98]
    assert Noise.parse("categorical:1,3").from_uniform(u).tolist() == [1.0, 1.0, 3.0, 3.0]
    assert Noise.parse("fixed:0.5").from_uniform(u).tolist() == [0.5] * 4


def test_a_list_of_noises_adds_a_settings_dimension():
    b = sample_regression(50, d=4, n=6, noise=["fixed:2", "categorical:1,3", "uniform:0"], generator=0)
    assert b.X.shape == (3, 50, 6, 4) and b.y.shape == (3, 50, 6) and b.sigma.shape == (3, 50)
    assert torch.all(b.sigma[0] == 2) and set(b.sigma[1].unique().tolist()) == {1.0, 3.0}
    assert torch.all(b.sigma[2] == 0)
    torch.testing.assert_close(b.y[2], torch.einsum("bnd,bd->bn", b.X[2], b.w[2]))
    G, e_t = gram_inputs(b.X, b.y, b.x_query)
    assert G.shape == (3, 50, 5, 5) and e_t.shape == (3, 50, 5) and torch.all(e_t[..., -1] == 0)
    E = torch.cat([b.X, b.y[..., None]], -1)
    torch.testing.assert_close(G, E.transpose(-1, -2) @ E)


def test_seeded_and_generator_reproducible():
    a = sample_regression(5, noise="uniform:1", generator=7)
    b = sample_regression(5, noise="uniform:1", generator=7)
    for s, t in zip(a, b, strict=True):
        assert torch.equal(s, t)
    g = torch.Generator().manual_seed(7)
    c = sample_regression(5, noise="uniform:1", generator=g)
    assert torch.equal(a.X, c.X)
    d = sample_regression(5, noise="uniform:1", generator=g)  # the generator advanced
    assert not torch.equal(c.X, d.X)


def test_sampler_object_fits_train_interface():
    task = MixedNoiseRegression(d=4, n=6, noise="categorical:1,3")
    batch = task(10, torch.Generator().manual_seed(0))
    assert batch.X.shape == (10, 6, 4)
    assert set(batch.sigma.tolist()) <= {1.0, 3.0}
    assert "categorical:1,3" in repr(task)


def test_build_tokens_layout():
    b = sample_regression(3, d=4, n=5, generator=0)
    Z = build_tokens(b.X, b.y, b.x_query)
    assert Z.shape == (3, 5, 6)  # [B, d+1, n+1]
    torch.testing.assert_close(Z[:, :4, :5], b.X.transpose(1, 2))
    torch.testing.assert_close(Z[:, 4, :5], b.y)
    torch.testing.assert_close(Z[:, :4, 5], b.x_query)
    assert torch.all(Z[:, 4, 5] == 0)


def test_half_mse_loss_uses_predict():
    class Zero:
        def predict(self, X, y, x_query):
            return torch.zeros(X.shape[0], dtype=X.dtype)

    b = sample_regression(100, generator=0, dtype="float64")
    torch.testing.assert_close(half_mse_loss(Zero(), *b), 0.5 * (b.target**2).mean())


def test_conditioned_spectrum():
    b = sample_conditioned_regression(20, d=6, n=9, kappa=50.0, nu=2.0, generator=0)
    eig = torch.linalg.eigvalsh(b.X.transpose(1, 2) @ b.X)
    torch.testing.assert_close(eig[:, 0], torch.full((20,), 2.0 / 50.0, dtype=torch.float64))
    torch.testing.assert_close(eig[:, -1], torch.full((20,), 2.0, dtype=torch.float64))
    torch.testing.assert_close(b.y, torch.einsum("bnd,bd->bn", b.X, b.w))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"batch_size": 0}, "batch_size"),
        ({"d": 0}, "d"),
        ({"n": 1.5}, "n"),
        ({"noise": "fixed:-1"}, "noise values"),
        ({"noise": "uniform:nan"}, "noise values"),
        ({"noise": "gaussian:1"}, "noise kind"),
        ({"noise": 3.0}, "noise must be a Noise"),
        ({"noise": "uniform:a"}, "numbers"),
        ({"noise": []}, "at least one"),
        ({"noise": "categorical:1,-3"}, "noise values"),
        ({"noise": "categorical:1,3@0.2,0.2"}, "probs"),
        ({"noise": "categorical:1,3@1"}, "probs"),
        ({"noise": "uniform:1@1"}, "probs"),
        ({"dtype": "float16"}, "dtype"),
        ({"generator": -1}, "seed"),
    ],
)
def test_bad_input(kwargs, match):
    args = {"batch_size": 4, "d": 3, "n": 5}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        sample_regression(args.pop("batch_size"), **args)


def test_bad_tokens_and_conditioned_input():
    b = sample_regression(3, d=4, n=5, generator=0)
    with pytest.raises(ValueError, match="y"):
        build_tokens(b.X, b.y[:, :4], b.x_query)
    with pytest.raises(ValueError, match="x_query"):
        build_tokens(b.X, b.y, b.x_query[:, :3])
    with pytest.raises(ValueError, match="X"):
        build_tokens(b.X.numpy(), b.y, b.x_query)
    with pytest.raises(ValueError, match="x_query"):
        build_tokens(b.X, b.y, b.x_query.double())
    bad = b.X.clone()
    bad[0, 0, 0] = float("inf")
    with pytest.raises(ValueError, match="X"):
        build_tokens(bad, b.y, b.x_query)
    with pytest.raises(ValueError, match="kappa"):
        sample_conditioned_regression(2, kappa=0.5)
    with pytest.raises(ValueError, match="n"):
        sample_conditioned_regression(2, d=5, n=3, kappa=2.0)


def test_verify_label_energy_right_and_wrong():
    from attnlab.tasks.icl_regression import verify_label_energy

    b = sample_regression(20_000, 10, 20, noise="token:0.5,5@0.8,0.2", generator=1, dtype="float64")
    answer = [float((b.y[b.sigma == s] ** 2).mean()) for s in (0.5, 5.0)]
    assert "Correct" in verify_label_energy(answer, levels=[0.5, 5.0])
    with pytest.raises(AssertionError, match="adds"):  # the signal forgotten: sigma^2 alone
        verify_label_energy([0.25, 25.0], levels=[0.5, 5.0])
    with pytest.raises(AssertionError, match="not"):  # d sigma^2
        verify_label_energy([2.5, 250.0], levels=[0.5, 5.0])
    with pytest.raises(ValueError, match="one value per level"):
        verify_label_energy([10.25], levels=[0.5, 5.0])
