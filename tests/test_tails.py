"""Tests of the tail statistics and the Wishart extreme-eigenvalue tails (attnlab.tails)."""

import math

import numpy as np
import pytest
import torch

from attnlab.tails import (
    hill,
    lmax_tail_mean,
    mean_allowed,
    sample_given_lmax,
    sample_spiked,
    score,
    stability_edge,
    tail_summary,
    trimmed,
    verdict,
    wishart_lmax_sf,
    wishart_lmin_cdf,
    with_top_eigenvalue,
)
from attnlab.tasks.icl_regression import sample_regression


def pareto(a, size, seed):
    """A Pareto sample with P(V > s) = s^-a for s >= 1."""
    return np.random.default_rng(seed).pareto(a, size) + 1.0


def test_hill_recovers_a_known_index():
    # exact Pareto quantiles: the estimate is a / (1 - O(log k / k))
    N, a, k = 100_000, 1.5, 1000
    v = (N / np.arange(1, N + 1)) ** (1 / a)
    expected = a / (math.log(k + 1) - math.lgamma(k + 1) / k)
    assert hill(v, k) == pytest.approx(expected, rel=1e-12)
    # a random sample: within three standard errors (a / sqrt(k)), at several thresholds
    for a in (0.7, 1.5, 3.0):
        v = pareto(a, 200_000, seed=int(10 * a))
        ks = [200, 1000, 5000]
        plot = hill(v, ks)
        assert plot.shape == (3,)
        for kk, est in zip(ks, plot, strict=True):
            assert abs(est - a) < 3 * a / math.sqrt(kk), (a, kk, est)
        assert hill(v, 1000) == plot[1]
    # pinned (numpy's PCG64 stream)
    assert hill(pareto(1.5, 200_000, seed=15), 1000) == pytest.approx(1.59984724, rel=1e-8)


def test_hill_rejects_bad_input():
    v = pareto(2.0, 100, seed=0)
    for k in (0, 100, 2.5, [3, 0]):
        with pytest.raises(ValueError, match="k"):
            hill(v, k)
    with pytest.raises(ValueError, match="positive"):
        hill(np.concatenate([v[:5], -np.ones(95)]), 10)
    with pytest.raises(ValueError, match="finite"):
        hill(np.append(v, np.inf), 3)
    with pytest.raises(ValueError, match="at least"):
        hill([1.0], 1)


def test_trimmed_mean_and_its_standard_error():
    v = np.arange(1.0, 10_001.0)[::-1].copy()  # 10,000 values
    m, se = trimmed(v, 1e-3)  # drops the 10 largest
    assert m == pytest.approx(np.arange(1.0, 9991.0).mean(), rel=1e-12)
    w = np.minimum(v, 9990.0)
    assert se == pytest.approx(w.std(ddof=1) / ((1 - 1e-3) * 100), rel=1e-12)
    # the standard error is right even where the variance is infinite (Pareto index 1.5)
    draws = [trimmed(pareto(1.5, 10_000, seed=s), 1e-2) for s in range(300)]
    spread = np.std([m for m, _ in draws], ddof=1)
    assert np.mean([se for _, se in draws]) == pytest.approx(spread, rel=0.15)
    with pytest.raises(ValueError, match="trim"):
        trimmed([1.0, 2.0, 3.0], 0.6)


def test_tail_summary_allows_a_mean_only_for_a_light_tail():
    rng = np.random.default_rng(1)
    light = 0.5 * rng.standard_normal(400_000) ** 2  # a squared error: exponential tail
    heavy = pareto(1.2, 400_000, seed=2)
    s = tail_summary(light)
    assert s["n"] == 400_000 and s["k"] == 40 and s["trim"] == 1e-4
    assert s["mean"] == pytest.approx(light.mean()) and s["median"] == pytest.approx(np.median(light))
    assert s["index"] > 5 and s["mean_ok"]
    assert s["worst_share"] == pytest.approx(light.max() / light.sum())
    h = tail_summary(heavy)
    assert abs(h["index"] - 1.2) < 3 * h["index_se"] and not h["mean_ok"]
    assert h["trimmed"] < h["mean"]
    # the margin: two standard errors of the Hill estimate above 2
    assert mean_allowed(3.0, 40) and not mean_allowed(2.9, 40)  # 2 / (1 - 2 / sqrt(40)) = 2.92
    assert not mean_allowed(float("nan"), 40) and mean_allowed(2.1, 10**6, margin=0)


def test_score_uses_the_statistic_the_tail_allows():
    rng = np.random.default_rng(9)
    light = 0.5 * rng.standard_normal(400_000) ** 2  # mean 0.5
    s = score(light, 0.5, 0.075)
    assert s["by"] == "mean" and (s["value"], s["value_se"]) == (s["mean"], s["se"])
    assert s["verdict"] == "met"
    heavy = light.copy()
    heavy[:3] = [1e5, 3e4, 1e4]  # three catastrophic prompts carry most of the sum
    h = score(heavy, 0.5, 0.075)
    assert h["by"] == "trimmed" and h["value"] == h["trimmed"] and h["verdict"] == "met"
    assert abs(h["mean"] - 0.5) > 0.075  # the mean alone would miss


def test_verdict():
    assert verdict(0.100, 0.001, 0.1, 0.015) == "met"
    assert verdict(0.113, 0.001, 0.1, 0.015) == "met"
    assert verdict(0.114, 0.001, 0.1, 0.015) == "undecided"
    assert verdict(0.118, 0.001, 0.1, 0.015) == "missed"
    assert verdict(0.080, 0.001, 0.1, 0.015) == "missed"
    with pytest.raises(ValueError, match="halfwidth"):
        verdict(0.1, 0.01, 0.1, 0.0)
    with pytest.raises(ValueError, match="se"):
        verdict(0.1, -0.01, 0.1, 0.1)


def test_wishart_extreme_eigenvalue_tails():
    # reference values from 30-digit arithmetic (mpmath); float64's precision in this basis is
    # about cond * eps = 3.0e10 * 1.1e-16 (the module)
    assert wishart_lmax_sf(60.0, 20, 10) == pytest.approx(0.077739968029, rel=3.3e-6)
    assert wishart_lmax_sf(80.0, 20, 10) == pytest.approx(4.33949930198e-4, rel=3.3e-6)
    # far tail: x^((n+d-3)/2) e^(-x/2) times 1 + O(1/x) (0.7% between 1000 and 1050; a power
    # one off would be 5% off)
    r = wishart_lmax_sf(1050.0, 20, 10) / wishart_lmax_sf(1000.0, 20, 10)
    assert r == pytest.approx(1.05**13.5 * math.exp(-25), rel=0.01)
    assert wishart_lmax_sf(150.0, 20, 10) == pytest.approx(3.9505150e-15, rel=1e-6)  # pinned
    # small eigenvalue: x^((n-d+1)/2) times 1 + O(x) as x -> 0
    r = wishart_lmin_cdf(0.002, 20, 10) / wishart_lmin_cdf(0.001, 20, 10)
    assert r == pytest.approx(2**5.5, rel=0.005)
    assert wishart_lmax_sf(0.0, 20, 10) == pytest.approx(1.0) and wishart_lmin_cdf(0.0, 20, 10) == 0.0
    # Monte Carlo, an even and an odd d
    rng = np.random.default_rng(3)
    for n, d in ((20, 10), (5, 3)):
        X = rng.standard_normal((40_000, n, d))
        ev = np.linalg.eigvalsh(np.swapaxes(X, 1, 2) @ X)
        for stat, fn, q in ((ev[:, -1], wishart_lmax_sf, 0.9), (ev[:, 0], wishart_lmin_cdf, 0.1)):
            x = float(np.quantile(stat, q))
            emp = (stat > x).mean() if fn is wishart_lmax_sf else (stat < x).mean()
            assert abs(fn(x, n, d) - emp) < 4 * math.sqrt(0.09 / 40_000), (n, d, fn.__name__)
    with pytest.raises(ValueError, match="n must be >= d"):
        wishart_lmax_sf(10.0, 5, 10)
    with pytest.raises(ValueError, match="too large"):
        wishart_lmax_sf(10.0, 30, 15)
    with pytest.raises(ValueError, match="x"):
        wishart_lmin_cdf(-1.0, 20, 10)


def test_with_top_eigenvalue_moves_only_lambda_max():
    b = sample_regression(50, 10, 20, noise="uniform:2", generator=4, dtype="float64")
    moved = with_top_eigenvalue(b, 120.0)
    ev0 = torch.linalg.eigvalsh(b.X.transpose(1, 2) @ b.X)
    ev1 = torch.linalg.eigvalsh(moved.X.transpose(1, 2) @ moved.X)
    assert torch.allclose(ev1[:, -1], torch.full((50,), 120.0, dtype=torch.float64), rtol=1e-12)
    assert torch.allclose(ev1[:, :-1], ev0[:, :-1], rtol=1e-10, atol=1e-10)
    noise = lambda bb: bb.y - (bb.X @ bb.w[..., None])[..., 0]  # noqa: E731
    assert torch.allclose(noise(moved), noise(b), atol=1e-12)
    for name in ("x_query", "target", "sigma", "w"):
        assert torch.equal(getattr(moved, name), getattr(b, name))
    back = with_top_eigenvalue(moved, ev0[:, -1])
    assert torch.allclose(back.X, b.X, atol=1e-10)
    with pytest.raises(ValueError, match="t must"):
        with_top_eigenvalue(b, -1.0)


def test_sample_given_lmax_is_the_conditional_law():
    b = sample_given_lmax(4000, 60.0, noise="uniform:1", generator=5)
    ev = torch.linalg.eigvalsh(b.X.transpose(1, 2) @ b.X)
    assert torch.allclose(ev[:, -1], torch.full((4000,), 60.0, dtype=torch.float64), rtol=1e-10)
    assert torch.allclose(b.target, (b.x_query * b.w).sum(-1))
    assert float(b.sigma.max()) <= 1.0
    # the second eigenvalue against plain draws whose lambda_max falls in [59, 61]
    plain = sample_regression(200_000, 10, 20, generator=6, dtype="float64").X
    ev_p = torch.linalg.eigvalsh(plain.transpose(1, 2) @ plain)
    near = ev_p[(ev_p[:, -1] > 59) & (ev_p[:, -1] < 61)]
    assert len(near) > 2000
    for j in (-2, 0):
        a, c = ev[:, j], near[:, j]
        se = math.sqrt(a.var() / len(a) + c.var() / len(c))
        assert abs(float(a.mean() - c.mean())) < 4 * se, j


def test_sample_spiked_weights_are_unbiased():
    b, wt = sample_spiked(200_000, generator=7)
    assert wt.shape == (200_000,) and float(wt.max()) <= 2.0 + 1e-12  # 1 / probs of scale 1
    assert abs(float(wt.mean()) - 1) < 4 * float(wt.std()) / math.sqrt(len(wt))
    lmax = torch.linalg.eigvalsh(b.X.transpose(1, 2) @ b.X)[:, -1]
    for x in (70.0, 90.0):
        f = wt * (lmax > x)
        est, se = float(f.mean()), float(f.std()) / math.sqrt(len(f))
        assert abs(est - wishart_lmax_sf(x, 20, 10)) < 4 * se, x
        assert (lmax > x).double().mean() > 20 * wishart_lmax_sf(x, 20, 10)  # oversampled
    with pytest.raises(ValueError, match="probs"):
        sample_spiked(10, scales=(1.0, 2.0), probs=(0.5, 0.4))


def test_stability_edge():
    assert stability_edge([-0.02, 0.3]) == pytest.approx(100.0)  # one step: 2 / |omega|
    # two steps: the first maps lambda to lambda (1 - g1 lambda)^2, which the second must keep below 2 / g2
    g1, g2 = 0.017, 0.09
    edge = stability_edge([-g1, -g2, 0.0])
    assert edge * (1 - g1 * edge) ** 2 == pytest.approx(2 / g2, rel=1e-9)
    assert 1 / g1 < edge < 2 / g1
    with pytest.raises(ValueError, match="omega_xx"):
        stability_edge([0.01, -0.1])


def test_lmax_tail_mean():
    grid = np.arange(70.0, 160.1, 2.5)
    assert lmax_tail_mean(grid, np.ones_like(grid)) == pytest.approx(wishart_lmax_sf(70.0, 20, 10), rel=1e-9)
    # E[lambda_max; lambda_max > 70] against Monte Carlo
    X = np.random.default_rng(8).standard_normal((200_000, 20, 10))
    lmax = np.linalg.eigvalsh(np.swapaxes(X, 1, 2) @ X)[:, -1]
    f = np.where(lmax > 70, lmax, 0.0)
    est = lmax_tail_mean(grid, grid)
    assert abs(est - f.mean()) < 4 * f.std() / math.sqrt(f.size)
    with pytest.raises(ValueError, match="finite"):
        lmax_tail_mean(grid, np.full_like(grid, np.inf))
    with pytest.raises(ValueError, match="grid"):
        lmax_tail_mean(grid[::-1], grid)


def test_the_tables_model_explodes_beyond_its_edge():
    """Chapter 04's finding on the table's 3-layer DIAG at sigma_max = 0 (seed 3, picked on
    validation): its worst held-out prompt (icl_scoring's first chunk, prompt 55,417) has
    lambda_max 93.4, beyond the edge of its x-steps; moving only that eigenvalue into the bulk
    removes the loss."""
    from attnlab import icl_training as it
    from attnlab.experiments import load_result
    from attnlab.experiments.in_context.trained import trained_model

    m = trained_model(load_result("icl_table_diag3", "cpu"), "diag", 3, "uniform:0", 3)
    assert stability_edge(m.omegas()[:, 0].tolist()) == pytest.approx(88.18280, rel=1e-6)
    b = sample_regression(100_000, 10, 20, generator=50_000, dtype="float64")
    worst = type(b)(*(v[55_417:55_418] for v in b))  # sigma = 0: the oracle is exact

    def loss(batch):
        return float(0.5 * (it.evaluate(m, batch.X, batch.y, batch.x_query) - batch.target) ** 2)

    lmax = float(torch.linalg.eigvalsh(worst.X[0].T @ worst.X[0])[-1])
    assert lmax == pytest.approx(93.3836, rel=1e-5)
    assert loss(worst) == pytest.approx(11456.28, rel=1e-5)
    assert loss(with_top_eigenvalue(worst, 48.7)) == pytest.approx(5.28e-4, rel=1e-2)
    # prompts drawn at a given lambda_max: typical inside the edge, catastrophic beyond it
    for t, lo, hi in ((60.0, 0.0, 0.01), (100.0, 1e4, 1e7)):
        c = sample_given_lmax(400, t, generator=9)
        med = float((0.5 * (it.evaluate(m, c.X, c.y, c.x_query) - c.target) ** 2).median())
        assert lo < med < hi, (t, med)
