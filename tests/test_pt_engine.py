"""Tests of Part II's experiments (pt = phase transition): the engine train_batched and the registry."""

import math

import numpy as np
import pytest
import torch

from attnlab.experiments.phase_transition import engine as pt
from attnlab.experiments.phase_transition.histogram import histogram_data
from attnlab.models import TiedLowRankAttention
from attnlab.tasks import phase_transition as ps
from attnlab.validation import make_generator


@pytest.mark.parametrize(("init", "lam"), [("semantic", 0.3), ("positional", 0.05)])
def test_one_gd_step_is_Q_minus_lr_times_grad_plus_lam_Q(init, lam):
    """One step of the trainer is Q1 = Q0 - lr (grad R(Q0) + lam Q0), with R the summed risk of the
    token form (autograd): dropping lam, or the sum over samples, makes this fail."""
    d, n_seeds, seed, lr, sigma, omega = 12, 2, 3, 0.15, 0.5, 0.3
    out = pt.train_batched(alpha=1.5, d=d, inits=(init,), n_seeds=n_seeds, seed=seed, lam=lam, lr=lr, steps=1,
                           n_test=10, dtype="float64", omega=omega, sigma=sigma)  # fmt: skip
    # the engine's data, drawn again from the same seed
    gen = make_generator(seed)
    teacher = ps.make_teacher(d, omega, sigma=sigma, n_seeds=n_seeds, seed=gen, dtype="float64")
    x, y, _ = ps.sample(out["n"], teacher, seed=gen)
    for s in range(n_seeds):
        model = TiedLowRankAttention(
            d, 1, init=init if init == "positional" else teacher.Q_star[s], dtype="float64"
        )
        Q0 = model.Q.detach().clone()
        (grad,) = torch.autograd.grad(((model(x[s]) - y[s]) ** 2).sum() / (2 * d), [model.Q])
        Q1 = Q0 - lr * (grad + lam * Q0)  # by hand
        ov = ps.overlaps(Q1[:, 0], teacher.Q_star[s], sigma=sigma)
        assert out["q"][0, s] == pytest.approx(float(ov["q"]), rel=1e-10)
        assert out["m"][0, s] == pytest.approx(abs(float(ov["m"])), rel=1e-10)
        assert out["theta_over_sigma2"][0, s] == pytest.approx(abs(float(ov["theta"])) / sigma**2, rel=1e-10)
        one = TiedLowRankAttention(d, 1, init=Q1, dtype="float64")
        eps_t = (((one(x[s]) - y[s]) ** 2).sum() / (2 * d) + lam / 2 * Q1.square().sum()) / d
        assert out["eps_t"][0, s] == pytest.approx(float(eps_t.detach()), rel=1e-10)


def test_train_batched_small_run():
    out = pt.train_batched(alpha=1.0, d=20, n_seeds=2, steps=30, n_test=200, record_every=10, seed=1)
    assert out["eps_g"].shape == out["eps_t"].shape == out["m"].shape == (2, 2)
    assert out["eps_lin"].shape == (2,)
    assert out["curve_eps_t"].shape == (4, 2, 2)
    assert np.all(np.isfinite(out["eps_g"])) and np.all(out["eps_g"] > 0)
    # GD decreases the training risk from both starts
    assert np.all(out["curve_eps_t"][-1] < out["curve_eps_t"][0])
    # the semantic start keeps a large theta, the positional one a large m
    assert np.all(out["theta_over_sigma2"][0] > 0.3) and np.all(out["m"][1] > 0.1)
    rows = pt.rows_from(out, ("semantic", "positional"), alpha=1.0)
    assert len(rows) == 4 and rows[0]["init"] == "semantic"


def test_train_batched_variants_run():
    for kwargs in ({"tied": False}, {"value": "learned"}, {"optimizer": "adam", "lr": 0.01}, {"r": 2}):
        out = pt.train_batched(alpha=1.0, d=10, n_seeds=2, steps=5, n_test=50, **kwargs)
        assert np.all(np.isfinite(out["eps_t"])), kwargs


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"alpha": 0.0}, "alpha"),
        ({"d": 1}, "d"),
        ({"omega": -0.1}, "omega"),
        ({"inits": ("semantic", "clever")}, "inits"),
        ({"inits": "semantic"}, "inits"),
        ({"n_seeds": 0}, "n_seeds"),
        ({"lr": 0.0}, "lr"),
        ({"optimizer": "lbfgs"}, "optimizer"),
        ({"value": "random"}, "value"),
    ],
)
def test_train_batched_rejects_bad_input(kwargs, name):
    base = {"alpha": 1.0, "d": 10, "n_seeds": 1, "steps": 1, "n_test": 10}
    with pytest.raises(ValueError, match=name):
        pt.train_batched(**{**base, **kwargs})


def test_pt_gd_is_registered_at_both_scales():
    from attnlab.experiments import get

    exp = get("pt_gd")
    assert exp.paper["d"] == 1000 and exp.paper["n_seeds"] == 24
    assert len(pt.alpha_grid(exp.paper)) == 25
    assert pt.alpha_grid({**exp.paper, "alpha_every": 3})[-1] == pytest.approx(2.0)
    assert math.isclose(pt.alpha_grid(exp.paper)[0], 0.01)


def test_fast_gradient_matches_autograd():
    common = {
        "alpha": [0.5, 1.0],
        "d": 16,
        "n_seeds": 2,
        "steps": 40,
        "n_test": 100,
        "seed": 4,
        "dtype": "float64",
    }
    fast = pt.train_batched(fast=True, **common)
    slow = pt.train_batched(fast=False, **common)
    assert fast["eps_t"].shape == (2, 2, 2)
    for key in ("eps_t", "eps_g", "m", "theta_over_sigma2"):
        np.testing.assert_allclose(fast[key], slow[key], rtol=1e-9, atol=1e-12)


def test_histogram_data_counts():
    x, y = histogram_data(50, 10, 15, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (50, 10)
    for i in range(5):
        seq = x[i].tolist()
        assert y[i].tolist() == [seq.count(t) for t in seq]


def test_chapter_experiments_are_registered():
    from attnlab.experiments import names

    for name in ("pt_gd", "pt_curves", "pt_finite_d", "pt_adam_random", "pt_untied", "pt_value",
                 "pt_correlated", "pt_histogram", "pt_theory"):  # fmt: skip
        assert name in names()


@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        ("pt_gd", {"d": 12, "n_alpha": 2, "steps": 3}),
        ("pt_curves", {"d": 12, "steps": 4, "record_every": 2}),
        ("pt_finite_d", {"ds": "8,12", "steps": 3}),
        ("pt_adam_random", {"d": 12, "steps": 3, "steps_gd": 3}),
        ("pt_untied", {"d": 12, "n_alpha": 2, "steps": 3}),
        ("pt_value", {"d": 8, "n_alpha": 2, "steps": 3}),
        ("pt_correlated", {"d": 12, "n_alpha": 2, "steps": 3}),
        ("pt_histogram", {"n_train": 60, "n_test": 30, "batch": 30, "epochs": 1, "dim": 8, "hidden": 8}),
    ],
)
def test_experiments_run_at_tiny_size(name, overrides):
    from attnlab.experiments import run

    small = {"n_seeds": 2, "n_test": 40} if name != "pt_histogram" else {}
    result = run(name, "book", overrides={**small, **overrides}, cache=False)
    assert result.rows and all(
        np.isfinite(v) for r in result.rows for v in r.values() if isinstance(v, float)
    )
