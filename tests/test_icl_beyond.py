"""Chapter 06's additions: per-token noise, the weighted oracle ridge and the ``icl_beyond`` experiment."""

import math

import numpy as np
import pytest
import torch

from attnlab import baselines as bl
from attnlab import experiments as ex
from attnlab.tasks.icl_regression import Noise, sample_regression


def test_token_noise_draws_one_level_per_context_token():
    b = sample_regression(20_000, d=3, n=8, noise="token:0.5,4@0.75,0.25", generator=1, dtype="float64")
    assert b.sigma.shape == (20_000, 8) and b.y.shape == (20_000, 8)
    assert set(b.sigma.unique().tolist()) == {0.5, 4.0}
    assert abs((b.sigma == 4.0).double().mean().item() - 0.25) < 0.005
    # Levels differ within prompts (heteroscedastic) and the residual has the drawn std per token.
    assert bool(((b.sigma == 4.0).any(-1) & (b.sigma == 0.5).any(-1)).double().mean() > 0.8)
    resid = b.y - torch.einsum("bnd,bd->bn", b.X, b.w)
    for level in (0.5, 4.0):
        assert abs(resid[b.sigma == level].std().item() - level) < 0.02 * level
    assert str(Noise.parse("token:0.5,4@0.75,0.25")) == "token:0.5,4@0.75,0.25"
    assert Noise.parse("token:1,3").per_token and not Noise.parse("categorical:1,3").per_token


def test_a_list_mixing_token_noise_repeats_the_others_along_the_tokens():
    b = sample_regression(30, d=3, n=5, noise=["fixed:2", "token:1,3"], generator=0)
    assert b.sigma.shape == (2, 30, 5) and torch.all(b.sigma[0] == 2)
    assert set(b.sigma[1].unique().tolist()) == {1.0, 3.0}
    # Lists without per-token noise keep one sigma per prompt (and their draws are unchanged).
    plain = sample_regression(30, d=3, n=5, noise=["fixed:2", "categorical:1,3"], generator=0)
    assert plain.sigma.shape == (2, 30)
    torch.testing.assert_close(plain.X, b.X)


def test_oracle_ridge_per_token_is_the_weighted_ridge():
    g = np.random.default_rng(0)
    B, n, d = 5, 12, 4
    X, w, q = g.normal(size=(B, n, d)), g.normal(size=(B, d)), g.normal(size=(B, d))
    s = g.choice([0.3, 2.5], size=(B, n))
    y = np.einsum("bnd,bd->bn", X, w) + s * g.normal(size=(B, n))
    got = bl.oracle_ridge(X, y, q, s)
    for b in range(B):
        W = np.diag(s[b] ** -2.0)
        w_hat = np.linalg.solve(X[b].T @ W @ X[b] + np.eye(d), X[b].T @ W @ y[b])
        np.testing.assert_allclose(got[b], q[b] @ w_hat, rtol=1e-10)
    # One level per prompt repeated along the tokens is the ordinary oracle ridge.
    s1 = g.uniform(0.5, 2.0, size=B)
    np.testing.assert_allclose(
        bl.oracle_ridge(X, y, q, np.repeat(s1[:, None], n, 1)), bl.oracle_ridge(X, y, q, s1)
    )
    with pytest.raises(ValueError, match="sigma"):
        bl.oracle_ridge(X, y, q, np.zeros((B, n)))
    with pytest.raises(ValueError, match="sigma"):
        bl.oracle_ridge(X, y, q, np.ones((B, n + 1)))


def test_beyond_experiment_rows():
    small = {"steps": 3, "batch_size": 16, "n_eval": 300, "n_tune": 200, "nodes": 8}
    res = ex.run("icl_beyond", overrides=small, cache=False)
    models = [r for r in res.rows if r["kind"] == "model"]
    groups = {(r["group"], r["model"], r["n_layers"]) for r in models}
    assert groups == {("gated", "gla", 2), ("gated", "diag", 2), ("depth", "diag", 1), ("depth", "diag", 2),
                      ("gdpp", "gdpp", 1), ("gdpp", "gdpp", 2)}  # fmt: skip
    assert all(np.isfinite(r["adjusted"]) and not r["diverged"] for r in models)
    bayes = [r for r in res.rows if r["kind"] == "baseline" and r["model"] == "bayes"]
    assert {r["noise"] for r in bayes} == {"uniform:3"}  # no Bayes floor for per-token noise
    built = [r for r in res.rows if r["kind"] == "construction"]
    assert {r["bounds"] for r in built} == {"worst", "mp", "tuned"}
    assert all(len(r["gamma"]) == r["n_layers"] - 1 for r in built)


def test_gate_lr_experiment_trains_only_the_gated_group_with_faster_gates():
    small = {"steps": 3, "batch_size": 16, "n_eval": 300, "n_tune": 200, "nodes": 8}
    res = ex.run("icl_beyond_gate_lr", overrides=small, cache=False)
    assert {r["kind"] for r in res.rows} == {"model", "baseline", "gate"}
    coef = np.abs([[r["a"], r["b"], r["c"]] for r in res.rows if r["kind"] == "gate"])
    # Adam's first steps move every coefficient by about the learning rate: 1e-2, not lr = 1e-3.
    assert coef.max() > 5 * small["steps"] * res.config["lr"]
    assert coef.max() < 1.5 * small["steps"] * res.config["gate_lr"]


def test_gated_long_keeps_the_omegas_that_rebuild_its_gated_models():
    small = {"steps": 3, "batch_size": 16, "n_eval": 300, "n_tune": 200, "nodes": 8}
    res = ex.run("icl_beyond_gated_long", overrides=small, cache=False)
    assert {r["kind"] for r in res.rows} == {"model", "baseline", "gate", "gate_omega"}
    gate = {(r["seed"], r["layer"]): r for r in res.rows if r["kind"] == "gate"}
    omega = {(r["seed"], r["layer"]): r for r in res.rows if r["kind"] == "gate_omega"}
    assert gate.keys() == omega.keys() and len(omega) == res.config["gated_depth"] * res.config["n_seeds"]
    # Rebuilt from its rows, the gated model scores what the experiment measured (same prompts).
    from attnlab.experiments.in_context import trained_gated_model
    from attnlab.experiments.in_context.beyond import _eval_data

    spec = res.config["gated_noise"][0]
    m = trained_gated_model(res, 0)
    assert m.n_layers == res.config["gated_depth"] and not any(p.requires_grad for p in m.parameters())
    with pytest.raises(ValueError, match="seed"):
        trained_gated_model(res, 99)
    data = _eval_data([spec], res.config)
    with torch.no_grad():
        loss = 0.5 * ((m.predict(data["X"], data["y"][spec], data["x_query"]) - data["target"]) ** 2).mean()
    row = next(r for r in res.rows if r["kind"] == "model" and r["model"] == "gla" and r["seed"] == 0)
    assert float(loss) == pytest.approx(row["loss"], rel=1e-5)  # trained in float32


def test_the_committed_bayes_floor_is_true_to_the_code():
    """``icl_bayes_floor`` re-derived on its first block of 5,000 prompts with short chains: the
    oracle's loss exactly (the same prompts), the floor within its Monte Carlo error (four
    combined standard errors, plus the two runs' estimated biases, which short chains inflate)."""
    committed = ex.load_result("icl_bayes_floor", "paper")
    (again,) = ex.run("icl_bayes_floor", "book", cache=False).rows
    first = committed.rows[0]
    assert again["start"] == first["start"] == 0 and again["prompts"] == first["prompts"]
    assert again["oracle_loss"] == pytest.approx(first["oracle_loss"], rel=1e-12)
    tol = (
        4 * math.hypot(again["bayes_mc_se"], first["bayes_mc_se"])
        + again["bayes_mc_bias"]
        + first["bayes_mc_bias"]
    )
    assert abs(again["bayes"] - first["bayes"]) <= tol
    assert tol < 0.1 * first["bayes"]  # the check can fail: a tenth of the floor
    floor = np.average([r["bayes"] for r in committed.rows], weights=[r["prompts"] for r in committed.rows])
    assert floor == pytest.approx(0.2368, abs=5e-4)  # the chapter's number
