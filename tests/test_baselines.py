"""Tests for attnlab.baselines (Part III, chapter 04)."""

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal

from attnlab import baselines as bl


def _data(B=64, n=20, d=10, sigma=1.0, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((B, n, d))
    w = rng.standard_normal((B, d))
    q = rng.standard_normal((B, d))
    s = np.broadcast_to(np.asarray(sigma, dtype=float), (B,)).copy()
    y = np.einsum("bnd,bd->bn", X, w) + s[:, None] * rng.standard_normal((B, n))
    return X, y, q, np.einsum("bd,bd->b", q, w), s


def test_ridge_matches_closed_form_numpy_and_torch():
    X, y, q, _, _ = _data(B=8)
    lam = 0.7
    w = np.stack([np.linalg.solve(X[b].T @ X[b] + lam * np.eye(10), X[b].T @ y[b]) for b in range(8)])
    expected = np.einsum("bd,bd->b", w, q)
    out = bl.ridge(X, y, q, lam)
    assert isinstance(out, np.ndarray)
    np.testing.assert_allclose(out, expected, rtol=1e-10, atol=1e-12)
    out_t = bl.ridge(torch.from_numpy(X), torch.from_numpy(y), torch.from_numpy(q), lam)
    assert isinstance(out_t, torch.Tensor) and out_t.dtype == torch.float64
    np.testing.assert_allclose(out_t.numpy(), expected, rtol=1e-10, atol=1e-12)


def test_oracle_ols_and_spectral_agree():
    X, y, q, _, s = _data(B=16, sigma=np.linspace(0.1, 3, 16))
    np.testing.assert_allclose(bl.oracle_ridge(X, y, q, s), bl.ridge(X, y, q, s**2), rtol=1e-12)
    w_ols = np.stack([np.linalg.lstsq(X[b], y[b], rcond=None)[0] for b in range(16)])
    np.testing.assert_allclose(bl.ols(X, y, q), np.einsum("bd,bd->b", w_ols, q), rtol=1e-9, atol=1e-10)
    sp = bl.Spectral(X, y, q)
    np.testing.assert_allclose(
        sp.ridge(torch.from_numpy(s**2)).numpy(), bl.oracle_ridge(X, y, q, s), rtol=1e-9
    )
    np.testing.assert_allclose(sp.with_y(2 * y).ridge(0.0).numpy(), 2 * bl.ols(X, y, q), rtol=1e-8)


def test_ols_with_fewer_examples_than_dimensions_uses_pseudo_inverse():
    X, y, q, _, _ = _data(B=4, n=5, d=10, sigma=0.0)
    w = np.stack([np.linalg.pinv(X[b]) @ y[b] for b in range(4)])  # min-norm interpolant
    np.testing.assert_allclose(bl.ols(X, y, q), np.einsum("bd,bd->b", w, q), rtol=1e-7, atol=1e-9)


def test_ada_ridge_uses_unbiased_variance_estimate():
    X, y, q, _, _ = _data(B=8, sigma=2.0)
    rss = []
    for b in range(8):
        w = np.linalg.lstsq(X[b], y[b], rcond=None)[0]
        rss.append(((y[b] - X[b] @ w) ** 2).sum())
    s2 = np.asarray(rss) / (20 - 10)
    np.testing.assert_allclose(bl.noise_variance_ols(X, y), s2, rtol=1e-9)
    np.testing.assert_allclose(bl.ada_ridge(X, y, q), bl.ridge(X, y, q, s2), rtol=1e-9)


def test_const_rr_recovers_known_fixed_noise_variance():
    # With one known noise level, the best constant is exactly sigma^2 (ridge = posterior mean).
    X, y, q, t, _ = _data(B=10_000, sigma=1.5, seed=1)
    lam = bl.ConstRR().fit(X, y, q, t).lam
    assert abs(lam - 2.25) / 2.25 < 0.15, lam


def test_tuned_rr_is_at_least_as_good_as_ada_on_its_tuning_data():
    X, y, q, t, _ = _data(B=2_000, sigma=np.random.default_rng(3).uniform(0, 4, 2_000), seed=2)
    tuned = bl.TunedRR().fit(X, y, q, t)
    assert bl.half_mse(tuned.predict(X, y, q), t) <= bl.half_mse(bl.ada_ridge(X, y, q), t) + 1e-12
    assert tuned.c > 0 and tuned.tau > 0


def test_bayes_with_one_sigma_is_oracle_ridge():
    X, y, q, _, s = _data(B=32, sigma=1.3)
    out = bl.bayes_optimal(X, y, q, [1.3], [1.0])
    np.testing.assert_allclose(out, bl.oracle_ridge(X, y, q, s), rtol=1e-10, atol=1e-12)


def test_sigma_posterior_matches_dense_gaussian_likelihood():
    X, y, _, _, _ = _data(B=3, sigma=2.0, seed=4)
    sigmas, probs = np.array([0.5, 2.0, 4.0]), np.array([0.2, 0.5, 0.3])
    post = bl.sigma_posterior(X, y, sigmas, probs)
    for b in range(3):
        like = [
            multivariate_normal(np.zeros(20), X[b] @ X[b].T + s**2 * np.eye(20)).pdf(y[b]) for s in sigmas
        ]
        dense = probs * np.asarray(like)
        np.testing.assert_allclose(post[b], dense / dense.sum(), rtol=1e-8, atol=1e-14)


def test_verify_sigma_posterior_right_and_wrong_answers():
    X, y, _, _, _ = _data(B=6, sigma=2.0, seed=7)
    sigmas, probs = np.array([1.0, 3.0, 5.0]), np.array([0.2, 0.5, 0.3])

    def dense(power=2, prior=probs):
        like = np.array(
            [
                [
                    multivariate_normal(np.zeros(20), X[b] @ X[b].T + s**power * np.eye(20)).logpdf(y[b])
                    for s in sigmas
                ]
                for b in range(len(y))
            ]
        )
        w = np.exp(like - like.max(1, keepdims=True)) * prior
        return w / w.sum(1, keepdims=True)

    assert "Correct" in bl.verify_sigma_posterior(dense(), X, y, sigmas, probs)
    with pytest.raises(AssertionError, match="uniform prior"):  # the prior forgotten
        bl.verify_sigma_posterior(dense(prior=1.0), X, y, sigmas, probs)
    with pytest.raises(AssertionError, match="proportional"):  # sigma for sigma^2
        bl.verify_sigma_posterior(dense(power=1), X, y, sigmas, probs)
    with pytest.raises(AssertionError, match="sum to one"):
        bl.verify_sigma_posterior(2 * dense(), X, y, sigmas, probs)
    with pytest.raises(ValueError, match="post must have shape"):
        bl.verify_sigma_posterior(dense()[:, :2], X, y, sigmas, probs)


def test_bayes_posterior_mean_mixes_ridge_solutions():
    X, y, q, _, _ = _data(B=5, sigma=1.0, seed=5)
    sigmas, probs = np.array([0.5, 3.0]), np.array([0.5, 0.5])
    post = bl.sigma_posterior(X, y, sigmas, probs)
    mix = sum(post[:, g] * bl.ridge(X, y, q, sigmas[g] ** 2) for g in range(2))
    pred, w = bl.bayes_optimal(X, y, q, sigmas, probs, return_w=True)
    np.testing.assert_allclose(pred, mix, rtol=1e-10)
    np.testing.assert_allclose(pred, np.einsum("bd,bd->b", w, q), rtol=1e-10)


def test_bayes_is_stable_for_huge_labels_and_quadrature_converges():
    X, y, q, _, _ = _data(B=50, sigma=2.0, seed=6)
    out = bl.bayes_optimal(X, 1e4 * y, q, *bl.uniform_sigma_grid(3.0, 32))
    assert np.all(np.isfinite(out))
    a = bl.bayes_optimal(X, y, q, *bl.uniform_sigma_grid(3.0, 48))
    b = bl.bayes_optimal(X, y, q, *bl.uniform_sigma_grid(3.0, 96))
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8)
    s, p = bl.uniform_sigma_grid(3.0, 16)
    assert np.isclose(p.sum(), 1) and s.min() > 0 and s.max() < 3


def test_bayes_beats_ada_and_adjusted_loss_of_oracle_is_zero():
    rng = np.random.default_rng(7)
    X, y, q, t, s = _data(B=2_000, sigma=rng.uniform(0, 3, 2_000), seed=8)
    bayes = bl.adjusted_loss(bl.bayes_optimal(X, y, q, *bl.uniform_sigma_grid(3.0)), t, X, y, q, s)
    ada = bl.adjusted_loss(bl.ada_ridge(X, y, q), t, X, y, q, s)
    assert 0 < bayes < ada
    assert bl.adjusted_loss(bl.oracle_ridge(X, y, q, s), t, X, y, q, s) == 0.0


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda X, y, q: bl.ridge(X[0], y, q, 1.0), "X"),
        (lambda X, y, q: bl.ridge(X, y[:, :3], q, 1.0), "y"),
        (lambda X, y, q: bl.ridge(X, y, q[:, :3], 1.0), "x_query"),
        (lambda X, y, q: bl.ridge(X, y, q, -1.0), "lam"),
        (lambda X, y, q: bl.ridge(X.tolist(), y, q, 1.0), "X"),
        (lambda X, y, q: bl.oracle_ridge(X, y, q, np.ones(3)), "sigma"),
        (lambda X, y, q: bl.ada_ridge(X[:, :5], y[:, :5], q), "n > d"),
        (lambda X, y, q: bl.bayes_optimal(X, y, q, [0.0, 1.0], [0.5, 0.5]), "sigmas"),
        (lambda X, y, q: bl.bayes_optimal(X, y, q, [1.0, 2.0], [0.5, 0.6]), "probs"),
        (lambda X, y, q: bl.bayes_optimal(X, y, q, [1.0, 2.0], [1.0]), "probs"),
        (lambda X, y, q: bl.ConstRR().predict(X, y, q), "lam"),
        (lambda X, y, q: bl.TunedRR().predict(X, y, q), "c and tau"),
        (lambda X, y, q: bl.ConstRR().fit(X, y, q, np.ones(3)), "target"),
        (lambda X, y, q: bl.uniform_sigma_grid(0.0), "sigma_max"),
        (lambda X, y, q: bl.half_mse(np.ones(3), np.ones(4)), "prediction"),
        (lambda X, y, q: bl.ridge(X, np.full_like(y, np.nan), q, 1.0), "y"),
        (lambda X, y, q: bl.em_reweighted_ridge(X, y, q, [0.0, 1.0], [0.5, 0.5]), "sigmas"),
        (lambda X, y, q: bl.em_reweighted_ridge(X, y, q, [1.0, 2.0], [0.5, 0.6]), "probs"),
        (lambda X, y, q: bl.em_reweighted_ridge(X, y, q, [1.0, 2.0], [0.5, 0.5], n_iter=0), "n_iter"),
    ],
)
def test_bad_input_raises(call, match):
    X, y, q, _, _ = _data(B=6)
    with pytest.raises(ValueError, match=match):
        call(X, y, q)


def test_implied_ridge_recovers_the_ridge_parameter():
    X, y, q, _, _ = _data(B=500, sigma=1.0, seed=9)
    lam = bl.implied_ridge(bl.ridge(X, y, q, 3.7), X, y, q)
    assert abs(lam - 3.7) / 3.7 < 1e-3
    with pytest.raises(ValueError, match="prediction"):
        bl.implied_ridge(np.zeros(3), X, y, q)


def test_trimmed_mean_drops_only_the_largest_values():
    rng = np.random.default_rng(3)
    v = rng.normal(0.3, 1.0, size=20_000)
    v[[17, 4_000]] = [8e4, 5e3]  # two prompts that dominate the mean
    # drop = 1e-4 of 20,000 values: the 2 largest go, whatever their place.
    assert bl.trimmed_mean(v, 1e-4) == pytest.approx(np.delete(v, [17, 4_000]).mean(), rel=1e-12)
    assert bl.trimmed_mean(v, 0.0) == pytest.approx(v.mean(), rel=1e-12)
    # ceil: 1.5e-4 of 20,000 is 3 values.
    assert bl.trimmed_mean(v, 1.5e-4) == pytest.approx(np.sort(v)[:-3].mean(), rel=1e-12)
    with pytest.raises(ValueError, match="drop must leave at least one value"):
        bl.trimmed_mean(np.array([1.0, 2.0]), 0.6)
    with pytest.raises(ValueError, match="drop"):
        bl.trimmed_mean(v, -0.1)


def _token_data(B=200, n=20, d=10, levels=(0.5, 5.0), probs=(0.8, 0.2), seed=0):
    """Prompts whose context tokens draw their own noise std from ``levels``."""
    rng = np.random.default_rng(seed)
    X, w, q = rng.standard_normal((B, n, d)), rng.standard_normal((B, d)), rng.standard_normal((B, d))
    s = rng.choice(levels, p=probs, size=(B, n))
    y = np.einsum("bnd,bd->bn", X, w) + s * rng.standard_normal((B, n))
    return X, y, q, np.einsum("bd,bd->b", q, w), s


def _em_objective(X, y, w, levels, probs):
    """``-½‖w‖² + Σ_j log Σ_k p_k N(y_j - x_jᵀw; 0, σ_k²)`` per prompt, written from its definition."""
    res = y - np.einsum("bnd,bd->bn", X, w)
    dens = sum(
        p * np.exp(-0.5 * (res / s) ** 2) / (s * np.sqrt(2 * np.pi))
        for s, p in zip(levels, probs, strict=True)
    )
    return -0.5 * (w**2).sum(-1) + np.log(dens).sum(-1)


def test_em_with_one_level_is_the_oracle_ridge():
    X, y, q, _, _ = _token_data(B=20, levels=(1.5, 1.5), probs=(0.5, 0.5))
    for n_iter in (1, 7):
        got = bl.em_reweighted_ridge(X, y, q, [1.5, 1.5], [0.3, 0.7], n_iter=n_iter)
        np.testing.assert_allclose(got, bl.oracle_ridge(X, y, q, np.full(20, 1.5)), rtol=1e-10)
    got = bl.em_reweighted_ridge(X, y, q, [1.5, 4.0], [1.0, 0.0])  # a level of probability 0
    np.testing.assert_allclose(got, bl.oracle_ridge(X, y, q, np.full(20, 1.5)), rtol=1e-10)


def test_em_never_lowers_its_objective_and_converges():
    X, y, q, t, _ = _token_data(B=100, seed=1)
    levels, probs = [0.5, 5.0], [0.8, 0.2]
    objective = [
        _em_objective(
            X, y, bl.em_reweighted_ridge(X, y, q, levels, probs, n_iter=k, return_w=True)[1], levels, probs
        )
        for k in range(1, 9)
    ]
    assert np.all(np.diff(objective, axis=0) >= -1e-9)
    w200 = bl.em_reweighted_ridge(X, y, q, levels, probs, n_iter=200, return_w=True)[1]
    w201 = bl.em_reweighted_ridge(X, y, q, levels, probs, n_iter=201, return_w=True)[1]
    np.testing.assert_allclose(w201, w200, atol=1e-8)  # a fixed point of the EM map
    # torch in, torch out
    pred = bl.em_reweighted_ridge(torch.as_tensor(X), torch.as_tensor(y), torch.as_tensor(q), levels, probs)
    assert isinstance(pred, torch.Tensor) and pred.shape == (100,)


def test_em_beats_constant_ridge_on_two_level_token_noise():
    X, y, q, t, s = _token_data(B=2000, seed=2)
    Xt, yt, qt, tt, _ = _token_data(B=1000, seed=5)
    const = bl.ConstRR().fit(Xt, yt, qt, tt).predict(X, y, q)
    em = bl.em_reweighted_ridge(X, y, q, [0.5, 5.0], [0.8, 0.2])
    oracle = bl.oracle_ridge(X, y, q, s)
    loss = {k: bl.half_mse(v, t) for k, v in {"const": const, "em": em, "oracle": oracle}.items()}
    assert loss["oracle"] < loss["em"] < 0.8 * loss["const"], loss


def test_batched_adarr_is_adarr():
    """The spectral (batched) AdaRR of the Part III baselines gives the same noise estimate,
    ``RSS / (n - d)``, and the same predictions as ``ada_ridge`` on the same prompts."""
    X, y, q, _, _ = _data(B=12, sigma=np.linspace(0.2, 3.0, 12))
    sp = bl.Spectral(X, y, q)
    np.testing.assert_allclose(sp.ada_sigma2().numpy(), bl.noise_variance_ols(X, y), rtol=1e-9)
    np.testing.assert_allclose(sp.ridge(sp.ada_sigma2()).numpy(), bl.ada_ridge(X, y, q), rtol=1e-9)
