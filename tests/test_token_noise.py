"""Tests for attnlab.token_noise: the Bayes posterior mean for per-token noise levels (chapter 06)."""

import itertools

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal

from attnlab import baselines as bl
from attnlab.token_noise import bayes_per_token, gibbs_trace

LEVELS, PROBS = [0.5, 5.0], [0.8, 0.2]  # chapter 06's "token:0.5,5@0.8,0.2"


def _token_data(B, n, d, levels, probs, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((B, n, d))
    w = rng.standard_normal((B, d))
    q = rng.standard_normal((B, d))
    s = np.asarray(levels)[rng.choice(len(levels), size=(B, n), p=probs)]
    y = np.einsum("bnd,bd->bn", X, w) + s * rng.standard_normal((B, n))
    return X, y, q, np.einsum("bd,bd->b", q, w), s


def _brute_force(X, y, q, levels, probs):
    """Every assignment in the n-dimensional form: p(z | y) ∝ Π π · N(y; 0, XXᵀ + D_z), E[x_tᵀw | z, y]."""
    out = []
    for b in range(len(X)):
        logw, pred = [], []
        for z in itertools.product(range(len(levels)), repeat=X.shape[1]):
            C = X[b] @ X[b].T + np.diag(np.asarray(levels)[list(z)] ** 2)
            prior = np.log(np.asarray(probs)[list(z)]).sum()
            logw.append(prior + multivariate_normal(np.zeros(len(C)), C).logpdf(y[b]))
            pred.append(q[b] @ X[b].T @ np.linalg.solve(C, y[b]))
        wts = np.exp(np.asarray(logw) - max(logw))
        out.append(wts @ np.asarray(pred) / wts.sum())
    return np.asarray(out)


@pytest.mark.parametrize(
    ("n", "d", "levels", "probs"),
    [(4, 2, [0.3, 1.7, 4.0], [0.6, 0.3, 0.1]), (6, 3, [0.7, 2.5], [0.65, 0.35])],
)
def test_exact_matches_the_brute_force_formula(n, d, levels, probs):
    X, y, q, _, _ = _token_data(6, n, d, levels, probs, seed=n)
    got = bayes_per_token(X, y, q, levels, probs, method="exact", chunk=4)  # two chunks
    np.testing.assert_allclose(got, _brute_force(X, y, q, levels, probs), rtol=1e-10, atol=1e-12)


def test_exact_with_one_level_is_the_oracle_ridge():
    X, y, q, _, _ = _token_data(8, 7, 3, [1.3], [1.0], seed=3)
    oracle = bl.oracle_ridge(X, y, q, np.full(8, 1.3))
    np.testing.assert_allclose(bayes_per_token(X, y, q, [1.3], [1.0], method="exact"), oracle, rtol=1e-10)
    # two equal levels, and a level of probability 0, change nothing
    for levels, probs in (([1.3, 1.3], [0.2, 0.8]), ([1.3, 4.0], [1.0, 0.0])):
        got = bayes_per_token(X, y, q, levels, probs, method="exact")
        np.testing.assert_allclose(got, oracle, rtol=1e-10)


def test_pinned_values_at_a_generic_prior():
    levels, probs = [0.4, 1.3, 3.0], [0.5, 0.35, 0.15]
    X, y, q, _, _ = _token_data(3, 6, 3, levels, probs, seed=11)
    exact = bayes_per_token(X, y, q, levels, probs, method="exact")
    pinned = [-0.5048172310086264, 0.7185005668311885, 0.8121200787816342]
    np.testing.assert_allclose(exact, pinned, rtol=1e-10)
    # Gibbs from a fixed seed on the CPU (a change of the sampler's random stream changes these)
    gibbs = bayes_per_token(X, y, q, levels, probs, n_sweeps=40, burn_in=5, n_chains=2, generator=4)
    pinned = [-0.4976632295474926, 0.7170319416706988, 0.8045083183484086]
    np.testing.assert_allclose(gibbs, pinned, rtol=1e-10)


def test_gibbs_matches_exact_within_its_monte_carlo_error():
    """d = 5, n = 12 (4,096 assignments), three seeds: the errors are as large as the stated SEs."""
    X, y, q, t, _ = _token_data(150, 12, 5, LEVELS, PROBS, seed=7)
    exact = bayes_per_token(X, y, q, LEVELS, PROBS, method="exact")
    for seed in (1, 2, 3):
        settings = {"n_sweeps": 200, "burn_in": 20, "n_chains": 4, "n_batches": 5}
        gibbs, se = bayes_per_token(X, y, q, LEVELS, PROBS, **settings, generator=seed, return_se=True)
        z = (gibbs - exact) / se
        # no bias: the mean error over prompts within 4 of its standard errors
        assert abs(z.mean()) < 4 * np.sqrt((z**2).mean() / len(z)), z.mean()
        # honest SEs: with 20 batch means z is about Student-t with 19 dof, E z² = 19/17
        assert 0.6 < (z**2).mean() < 1.8, (z**2).mean()
        assert (np.abs(z) > 4).mean() < 0.01, np.sort(np.abs(z))[-5:]
        # the Bayes risk: Gibbs and exact agree within 4 standard errors of their paired difference
        diff = 0.5 * (gibbs - t) ** 2 - 0.5 * (exact - t) ** 2
        assert abs(diff.mean()) < 4 * diff.std() / np.sqrt(len(diff)), diff.mean()


def test_bayes_risk_is_below_em_and_ridge_on_the_same_prompts():
    """Chapter 06's setting (d = 10, n = 20): the Bayes risk is below EM's and ridge's, and above the
    oracle's (which knows the levels), each by more than 4 standard errors of the paired difference."""
    X, y, q, t, s = _token_data(1500, 20, 10, LEVELS, PROBS, seed=21)
    Xt, yt, qt, tt, _ = _token_data(1000, 20, 10, LEVELS, PROBS, seed=22)
    sq = {
        "bayes": bayes_per_token(X, y, q, LEVELS, PROBS, n_sweeps=30, burn_in=10, n_chains=2, generator=0),
        "em": bl.em_reweighted_ridge(X, y, q, LEVELS, PROBS),
        "const_rr": bl.ConstRR().fit(Xt, yt, qt, tt).predict(X, y, q),
        "oracle": bl.oracle_ridge(X, y, q, s),
    }
    sq = {k: 0.5 * (v - t) ** 2 for k, v in sq.items()}

    def margin(a, b):  # mean(loss_a − loss_b) in standard errors of the paired difference
        diff = sq[a] - sq[b]
        return diff.mean() / (diff.std() / np.sqrt(len(diff)))

    assert margin("em", "bayes") > 4, margin("em", "bayes")
    assert margin("const_rr", "bayes") > 4, margin("const_rr", "bayes")
    assert margin("bayes", "oracle") > 4, margin("bayes", "oracle")


def test_trace_numpy_torch_and_chunks():
    X, y, q, _, _ = _token_data(5, 8, 3, LEVELS, PROBS, seed=2)
    tr = gibbs_trace(X, y, q, LEVELS, PROBS, n_sweeps=12, n_chains=3, generator=9)
    assert isinstance(tr, np.ndarray) and tr.shape == (3, 12, 5)
    # bayes_per_token averages the same sweeps (same seed, one chunk) after the burn-in
    settings = {"n_sweeps": 12, "burn_in": 2, "n_chains": 3, "n_batches": 5}
    pred = bayes_per_token(X, y, q, LEVELS, PROBS, **settings, generator=9)
    np.testing.assert_allclose(pred, tr[:, 2:].mean((0, 1)), rtol=1e-12)
    Xt, yt, qt = (torch.as_tensor(a) for a in (X, y, q))
    out = bayes_per_token(Xt, yt, qt, LEVELS, PROBS, method="exact")
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float64
    np.testing.assert_allclose(
        bayes_per_token(X, y, q, LEVELS, PROBS, method="exact", chunk=2), out.numpy(), rtol=1e-13
    )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"method": "mcmc"}, "method"),
        ({"sigmas": [0.0, 1.0]}, "sigmas"),
        ({"probs": [0.5, 0.6]}, "probs"),
        ({"n_sweeps": 1}, "n_sweeps"),
        ({"n_sweeps": 10, "burn_in": 10}, "burn_in"),
        ({"n_sweeps": 10, "burn_in": 6, "n_batches": 5}, "n_batches"),
        ({"n_chains": 1, "n_batches": 1}, "n_chains"),
        ({"chunk": 0}, "chunk"),
        ({"generator": -1}, "seed"),
    ],
)
def test_bad_input_raises(kwargs, match):
    X, y, q, _, _ = _token_data(2, 6, 2, LEVELS, PROBS, seed=0)
    args = {"sigmas": LEVELS, "probs": PROBS} | kwargs
    sigmas, probs = args.pop("sigmas"), args.pop("probs")
    with pytest.raises(ValueError, match=match):
        bayes_per_token(X, y, q, sigmas, probs, **args)


def test_exact_refuses_too_many_assignments_and_bad_shapes():
    X, y, q, _, _ = _token_data(1, 23, 2, LEVELS, PROBS, seed=0)
    with pytest.raises(ValueError, match="n must keep"):
        bayes_per_token(X, y, q, LEVELS, PROBS, method="exact")
    with pytest.raises(ValueError, match="x_query"):
        bayes_per_token(X, y, q[:, :1], LEVELS, PROBS)
