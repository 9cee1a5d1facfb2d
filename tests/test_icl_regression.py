"""Tests of attnlab.tasks.icl_regression (Part III sampler and token matrix)."""

import numpy as np
import pytest
import torch

from attnlab.tasks.icl_regression import (
    MixedNoiseRegression,
    RegressionBatch,
    build_tokens,
    half_mse,
    noise_spec,
    sample_conditioned_regression,
    sample_regression,
    sample_sigmas,
)


def test_shapes_and_model_of_the_data():
    b = sample_regression(64, d=5, n=8, sigma=0.0, generator=0, dtype="float64")
    assert isinstance(b, RegressionBatch)
    assert b.X.shape == (64, 8, 5) and b.y.shape == (64, 8) and b.x_query.shape == (64, 5)
    assert b.target.shape == (64,) and b.sigma.shape == (64,) and b.w.shape == (64, 5)
    assert b.X.dtype == torch.float64
    torch.testing.assert_close(b.y, torch.einsum("bnd,bd->bn", b.X, b.w))
    torch.testing.assert_close(b.target, torch.einsum("bd,bd->b", b.x_query, b.w))


def test_noise_has_the_drawn_standard_deviation():
    b = sample_regression(4000, d=3, n=50, sigma=2.0, generator=1, dtype="float64")
    resid = b.y - torch.einsum("bnd,bd->bn", b.X, b.w)
    assert abs(resid.std().item() - 2.0) < 0.02
    assert torch.all(b.sigma == 2.0)


def test_uniform_and_categorical_sigmas():
    s = sample_sigmas(200_000, sigma_max=3.0, generator=2, dtype="float64")
    assert s.min() >= 0 and s.max() <= 3.0
    assert abs(s.mean().item() - 1.5) < 0.01
    assert abs((s**2).mean().item() - 3.0) < 0.03  # E sigma^2 = sigma_max^2 / 3
    c = sample_sigmas(100_000, sigmas=[1.0, 3.0, 5.0], probs=[0.5, 0.25, 0.25], generator=3)
    frac = [(c == v).float().mean().item() for v in (1.0, 3.0, 5.0)]
    np.testing.assert_allclose(frac, [0.5, 0.25, 0.25], atol=0.01)
    assert noise_spec(sigmas=[1, 3])["probs"] == [0.5, 0.5]
    assert noise_spec()["kind"] == "fixed" and noise_spec()["sigma"] == 0.0


def test_seeded_and_generator_reproducible():
    a = sample_regression(5, sigma_max=1.0, generator=7)
    b = sample_regression(5, sigma_max=1.0, generator=7)
    for s, t in zip(a, b, strict=True):
        assert torch.equal(s, t)
    g = torch.Generator().manual_seed(7)
    c = sample_regression(5, sigma_max=1.0, generator=g)
    assert torch.equal(a.X, c.X)
    d = sample_regression(5, sigma_max=1.0, generator=g)  # the generator advanced
    assert not torch.equal(c.X, d.X)


def test_sampler_object_fits_train_interface():
    task = MixedNoiseRegression(d=4, n=6, sigmas=[1.0, 3.0])
    batch = task(10, torch.Generator().manual_seed(0))
    assert batch.X.shape == (10, 6, 4)
    assert set(batch.sigma.tolist()) <= {1.0, 3.0}
    assert "sigmas" in repr(task)


def test_build_tokens_layout():
    b = sample_regression(3, d=4, n=5, generator=0)
    Z = build_tokens(b.X, b.y, b.x_query)
    assert Z.shape == (3, 5, 6)  # [B, d+1, n+1]
    torch.testing.assert_close(Z[:, :4, :5], b.X.transpose(1, 2))
    torch.testing.assert_close(Z[:, 4, :5], b.y)
    torch.testing.assert_close(Z[:, :4, 5], b.x_query)
    assert torch.all(Z[:, 4, 5] == 0)


def test_half_mse_uses_predict():
    class Zero:
        def predict(self, X, y, x_query):
            return torch.zeros(X.shape[0], dtype=X.dtype)

    b = sample_regression(100, generator=0, dtype="float64")
    torch.testing.assert_close(half_mse(Zero(), *b), 0.5 * (b.target**2).mean())


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
        ({"sigma": -1.0}, "sigma"),
        ({"sigma_max": float("nan")}, "sigma_max"),
        ({"sigma": 1.0, "sigma_max": 2.0}, "at most one"),
        ({"sigmas": []}, "sigmas"),
        ({"sigmas": [1.0, -3.0]}, "sigmas"),
        ({"sigmas": [1.0, 3.0], "probs": [0.2, 0.2]}, "probs"),
        ({"sigmas": [1.0, 3.0], "probs": [1.0]}, "probs"),
        ({"probs": [1.0]}, "probs"),
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
