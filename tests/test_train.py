import math

import numpy as np
import pytest
import torch
from torch import nn

from attnlab.train import History, lr_factor, train


def _regression(n=64, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g, dtype=torch.float64)
    w = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    return X, X @ w, w


def mse(model, X, y):
    return 0.5 * ((model(X).squeeze(-1) - y) ** 2).mean()


def test_full_batch_gd_matches_closed_form_step():
    X, y, _ = _regression()
    model = nn.Linear(3, 1, bias=False)
    with torch.no_grad():
        model.weight.zero_()
    hist = train(model, mse, (X, y), optimizer="gd", lr=0.1, steps=1, dtype="float64")
    # One GD step from w = 0 on (1/2n)||Xw - y||^2 is w = lr * X^T y / n.
    expected = 0.1 * X.T @ y / X.shape[0]
    assert torch.allclose(model.weight.detach().squeeze(0), expected, atol=1e-12)
    assert hist.steps == [0, 1]
    assert hist.loss[1] < hist.loss[0]


@pytest.mark.parametrize(
    "optimizer,kwargs", [("gd", {}), ("sgd", {"batch_size": 16}), ("adam", {"batch_size": 16})]
)
def test_optimizers_fit_a_linear_model(optimizer, kwargs):
    X, y, w = _regression()
    model = nn.Linear(3, 1, bias=False)
    lr = 0.05 if optimizer == "adam" else 0.3
    hist = train(model, mse, (X, y), optimizer=optimizer, lr=lr, steps=400, dtype="float64", seed=1, **kwargs)
    assert hist.loss[-1] < 1e-4 * hist.loss[0]
    assert torch.allclose(model.weight.detach().squeeze(0), w, atol=2e-2)


def test_sampler_callbacks_and_reproducibility():
    w = torch.tensor([1.0, -2.0, 0.5])

    def sample(batch_size, gen):
        X = torch.randn(batch_size, 3, generator=gen)
        return X, X @ w

    def run():
        model = nn.Linear(3, 1, bias=False)
        torch.nn.init.zeros_(model.weight)
        return train(
            model,
            mse,
            sample,
            optimizer="sgd",
            lr=0.1,
            steps=50,
            batch_size=8,
            seed=3,
            callbacks={"w0": lambda m: m.weight[0, 0]},
            record_every=10,
        )

    h1, h2 = run(), run()
    assert h1.loss == h2.loss
    assert h1.steps == [0, 10, 20, 30, 40, 50]
    assert len(h1.tracked["w0"]) == 6
    arrays = h1.as_arrays()
    assert isinstance(arrays["w0"], np.ndarray) and arrays["loss"].shape == (6,)


def test_weight_decay_shrinks_towards_zero():
    X, y, _ = _regression()
    m1, m2 = nn.Linear(3, 1, bias=False), nn.Linear(3, 1, bias=False)
    m2.load_state_dict(m1.state_dict())
    train(m1, mse, (X, y), lr=0.2, steps=200, dtype="float64")
    train(m2, mse, (X, y), lr=0.2, steps=200, dtype="float64", weight_decay=0.5)
    assert m2.weight.norm() < m1.weight.norm()


def test_progress_is_silent_when_not_a_terminal(capsys):
    X, y, _ = _regression()
    train(nn.Linear(3, 1, bias=False), mse, (X, y), steps=5)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_history_defaults():
    h = History()
    assert h.as_arrays()["loss"].shape == (0,)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"optimizer": "lbfgs"}, "optimizer must be one of"),
        ({"lr": 0.0}, "lr must be > 0"),
        ({"steps": -1}, "steps must be an integer >= 0"),
        ({"optimizer": "sgd"}, "batch_size must be given"),
        ({"batch_size": 4}, "batch_size must be None for optimizer='gd'"),
        ({"optimizer": "sgd", "batch_size": 1000}, "batch_size must be <="),
        ({"dtype": "int32"}, "dtype must be"),
        ({"device": "tpu"}, "device must be"),
        ({"weight_decay": -1.0}, "weight_decay must be >= 0"),
        ({"callbacks": {"x": 3}}, r"callbacks\['x'\] must be callable"),
        ({"record_every": 0}, "record_every must be an integer >= 1"),
    ],
)
def test_bad_arguments(kwargs, match):
    X, y, _ = _regression()
    with pytest.raises(ValueError, match=match):
        train(nn.Linear(3, 1), mse, (X, y), **kwargs)


def test_bad_model_data_and_loss():
    X, y, _ = _regression()
    with pytest.raises(ValueError, match="model must be a torch.nn.Module"):
        train(lambda x: x, mse, (X, y))
    with pytest.raises(ValueError, match="loss_fn must be callable"):
        train(nn.Linear(3, 1), 3, (X, y))
    with pytest.raises(ValueError, match="data must be a non-empty tuple"):
        train(nn.Linear(3, 1), mse, ())
    with pytest.raises(ValueError, match="share their first"):
        train(nn.Linear(3, 1), mse, (X, y[:3]))
    with pytest.raises(ValueError, match="batch_size must be given when data is a sampler"):
        train(nn.Linear(3, 1), mse, lambda b, g: (X, y), optimizer="adam")
    with pytest.raises(ValueError, match="parameters must lead with the models dimensions"):
        train(nn.Linear(3, 1), lambda m, X, y: m(X), (X, y), steps=1)
    with pytest.raises(ValueError, match="loss_fn must return a tensor"):
        train(nn.Linear(3, 1), lambda m, X, y: 1.0, (X, y), steps=1)
    with pytest.raises(ValueError, match="param_lr must name parameters"):
        train(nn.Linear(3, 1), mse, (X, y), param_lr={"w": 0.1})


def test_optimizers_match_torch_optim():
    """The loop's SGD, Adam and AdamW take the same steps as torch.optim's."""
    X, y, _ = _regression()
    for name, kwargs, reference in [
        ("gd", {"weight_decay": 0.1}, lambda p: torch.optim.SGD(p, lr=0.05, weight_decay=0.1)),
        (
            "adam",
            {"weight_decay": 0.1, "batch_size": 64},
            lambda p: torch.optim.Adam(p, lr=0.05, weight_decay=0.1),
        ),
        (
            "adamw",
            {"weight_decay": 0.1, "batch_size": 64},
            lambda p: torch.optim.AdamW(p, lr=0.05, weight_decay=0.1),
        ),
    ]:
        ours, theirs = nn.Linear(3, 1, bias=False).double(), nn.Linear(3, 1, bias=False).double()
        theirs.load_state_dict(ours.state_dict())
        train(ours, mse, (X, y), optimizer=name, lr=0.05, steps=20, dtype="float64", **kwargs)
        opt = reference(theirs.parameters())
        for _ in range(20):
            opt.zero_grad()
            mse(theirs, X, y).backward()
            opt.step()
        assert torch.allclose(ours.weight, theirs.weight, atol=1e-12, rtol=0)


class _Batched(nn.Module):
    """``M`` linear models in one parameter ``w [M, 3]``; the loss is one ½·MSE per model."""

    def __init__(self, w):
        super().__init__()
        self.w = nn.Parameter(w.clone())
        self.b = nn.Parameter(torch.zeros(w.shape[0]))


def _per_model_mse(model, X, y):
    pred = X @ model.w.T + model.b  # [B, M]
    return 0.5 * ((pred - y[:, None]) ** 2).mean(0)  # [M]


def _one_model_mse(model, X, y):
    return _per_model_mse(model, X, y)[0]


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_per_model_losses_train_each_model_as_if_alone(optimizer):
    """Three models trained side by side end where each ends when trained alone (same batches)."""
    X, y, _ = _regression()
    w0 = torch.randn(3, 3, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    kw = dict(optimizer=optimizer, lr=0.05, steps=30, batch_size=16, dtype="float64", seed=2, record_every=10)
    together = _Batched(w0)
    hist = train(together, _per_model_mse, (X, y), lr_schedule="cosine", param_lr={"b": 0.01}, **kw)
    assert hist.steps == [0, 10, 20, 30] and hist.as_arrays()["loss"].shape == (4, 3)
    assert hist.diverged.shape == (3,) and not hist.diverged.any()
    for m in range(3):
        alone = _Batched(w0[m : m + 1])
        h1 = train(alone, _one_model_mse, (X, y), lr_schedule="cosine", param_lr={"b": 0.01}, **kw)
        assert torch.allclose(alone.w[0], together.w[m], rtol=1e-12, atol=1e-14)
        assert torch.allclose(alone.b[0], together.b[m], rtol=1e-12, atol=1e-14)
        assert np.allclose(h1.loss, hist.as_arrays()["loss"][:, m], rtol=1e-12)
    assert np.all(hist.loss[-1] < 0.5 * hist.loss[0])  # every model trained


def test_callable_lr_schedule_scales_each_update():
    """A callable schedule multiplies the rate of each update: a factor 1 is the constant schedule, a
    factor 0 for the first two updates leaves the weights where they start, then training resumes."""
    X, y, _ = _regression()
    w0 = torch.randn(3, 3, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    kw = dict(optimizer="adam", lr=0.05, steps=4, batch_size=16, dtype="float64", seed=2)
    const, ones = _Batched(w0), _Batched(w0)
    train(const, _per_model_mse, (X, y), lr_schedule="constant", **kw)
    train(ones, _per_model_mse, (X, y), lr_schedule=lambda step, steps: 1.0, **kw)
    assert torch.equal(const.w, ones.w) and not torch.equal(const.w, w0)
    frozen = _Batched(w0)
    train(frozen, _per_model_mse, (X, y), lr_schedule=lambda step, steps: 0.0, **kw)
    assert torch.equal(frozen.w, w0)
    seen = []
    train(_Batched(w0), _per_model_mse, (X, y), lr_schedule=lambda s, n: seen.append((s, n)) or 1.0, **kw)
    assert seen == [(0, 4), (1, 4), (2, 4), (3, 4)]


def test_diverged_model_is_reported_and_the_others_train_on():
    X, y, _ = _regression()
    w0 = torch.zeros(2, 3, dtype=torch.float64)
    model = _Batched(w0)
    # Model 1's loss is multiplied by 1e300 from the start: it overflows to inf at once.
    scale = torch.tensor([1.0, 1e300], dtype=torch.float64)

    def loss(m, X, y):
        return _per_model_mse(m, X, y) * scale * scale

    hist = train(model, loss, (X, y), optimizer="sgd", lr=0.1, steps=50, batch_size=16, dtype="float64")
    assert hist.diverged.tolist() == [False, True]
    assert torch.all(model.w[1] == 0)  # SGD: a zero gradient leaves it where it was
    losses = hist.as_arrays()["loss"]
    assert np.isnan(losses[:, 1]).all() and np.isfinite(losses[:, 0]).all()
    assert losses[-1, 0] < 1e-3 * losses[0, 0]


def test_record_mean_averages_the_training_losses_of_each_window():
    X, y, _ = _regression()
    w0 = torch.zeros(2, 3, dtype=torch.float64)
    kw = dict(optimizer="sgd", lr=0.05, steps=7, batch_size=16, dtype="float64", seed=4)
    every = train(_Batched(w0), _per_model_mse, (X, y), record_every=1, **kw)
    mean = train(_Batched(w0), _per_model_mse, (X, y), record_every=3, record="mean", **kw)
    losses = every.as_arrays()["loss"]  # steps 0..7; the training losses are those of steps 0..6
    assert mean.steps == [3, 6, 7]
    expected = [losses[0:3].mean(0), losses[3:6].mean(0), losses[6:7].mean(0)]
    assert np.allclose(mean.as_arrays()["loss"], expected, rtol=1e-12)


def test_groups_of_batched_models_train_side_by_side():
    """A dict of per-model losses, one entry per submodule: each group trains as if alone."""
    X, y, _ = _regression()
    w2, w3 = torch.zeros(2, 3, dtype=torch.float64), torch.ones(3, 3, dtype=torch.float64)
    kw = dict(optimizer="adam", steps=10, batch_size=16, dtype="float64", seed=2, record_every=5)
    models = nn.ModuleDict({"a": _Batched(w2), "b": _Batched(w3)})

    def losses(m, X, y):
        return {"a": _per_model_mse(m["a"], X, y), "b": _per_model_mse(m["b"], X, y)}

    hist = train(models, losses, (X, y), lr=0.05, param_lr={"b.w": 0.01, "b.b": 0.01}, **kw)
    arrays = hist.as_arrays()["loss"]
    assert arrays["a"].shape == (3, 2) and arrays["b"].shape == (3, 3)
    assert hist.diverged["a"].shape == (2,) and not hist.diverged["b"].any()
    for key, w0, lr in (("a", w2, 0.05), ("b", w3, 0.01)):
        alone = _Batched(w0)
        h1 = train(alone, _per_model_mse, (X, y), lr=lr, **kw)
        assert torch.allclose(alone.w, models[key].w, rtol=1e-12, atol=1e-14)
        assert np.allclose(h1.as_arrays()["loss"], arrays[key], rtol=1e-12)
    with pytest.raises(ValueError, match="dict keys must name submodules"):
        train(models, lambda m, X, y: {"c": _per_model_mse(m["a"], X, y)}, (X, y), steps=1)
    with pytest.raises(ValueError, match="dict values must be tensors"):
        train(models, lambda m, X, y: {"a": 1.0}, (X, y), steps=1)


def test_lr_schedules_pinned_values():
    steps = 12  # warm-up of 3 steps for the 25% schedule, 1 step for the cosine's 10%
    wc = [lr_factor("warmup:3", s, steps) for s in range(steps)]
    assert wc == pytest.approx([1 / 3, 2 / 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1], abs=1e-15)
    wsd = [lr_factor("warmup_stable_decay", s, steps) for s in range(steps)]
    assert wsd == pytest.approx([1 / 3, 2 / 3, 1, 1, 1, 1, 1, 1, 1, 1, 2 / 3, 1 / 3], abs=1e-15)
    cos = [lr_factor("cosine", s, steps) for s in (0, 1, 6)]
    assert cos == pytest.approx([1, 1, 0.5 * (1 + math.cos(math.pi * 5 / 11))], abs=1e-15)
    assert [lr_factor("constant", s, steps) for s in (0, 11)] == [1.0, 1.0]
    for bad in ("linear", "warmup:0", "warmup:x", "warmup_constant"):
        with pytest.raises(ValueError, match="schedule"):
            lr_factor(bad, 0, steps)


def test_max_grad_norm_clips_each_model_by_its_own_norm():
    """One full-batch GD step by hand: the model whose gradient norm exceeds the bound moves by
    lr * bound along its gradient's direction, the other by its whole gradient."""
    X, y, _ = _regression()
    w0 = torch.tensor([[0.3, -0.2, 0.1], [5.0, 4.0, -3.0]], dtype=torch.float64)
    ref = _Batched(w0).double()
    _per_model_mse(ref, X, y).sum().backward()
    g = torch.cat([ref.w.grad, ref.b.grad[:, None]], dim=1)  # [M, 4]: each model's whole gradient
    norms = g.norm(dim=1)
    bound = float(norms.mean())  # between the two norms (the models are far apart)
    assert norms[0] < bound < norms[1]
    model = _Batched(w0)
    train(model, _per_model_mse, (X, y), lr=0.1, steps=1, max_grad_norm=bound, dtype="float64")
    expected = w0 - 0.1 * g[:, :3] * torch.clamp(bound / norms, max=1.0)[:, None]
    torch.testing.assert_close(model.w.detach(), expected, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(
        model.b.detach(), -0.1 * g[:, 3] * torch.clamp(bound / norms, max=1.0), rtol=1e-12, atol=1e-14
    )


@pytest.mark.parametrize("patience", [1, 2])
def test_one_non_finite_batch_is_skipped_with_patience(patience):
    """Model 1's loss is inf at update 3 only: with patience 1 it is diverged from there; with
    patience 2 it skips that update (counted) and trains on, ending where SGD without that
    update ends."""
    X, y, _ = _regression()
    w0 = torch.zeros(2, 3, dtype=torch.float64)
    calls = []

    def loss(m, X, y, skip=True):
        per = _per_model_mse(m, X, y)
        calls.append(None)
        bad = torch.tensor([1.0, float("inf") if skip and len(calls) == 4 else 1.0], dtype=torch.float64)
        return per * bad

    model = _Batched(w0)
    kw = dict(optimizer="sgd", lr=0.1, steps=8, batch_size=16, dtype="float64", seed=3)
    hist = train(model, loss, (X, y), patience=patience, **kw)
    assert hist.diverged.tolist() == [False, patience == 1]
    assert hist.skipped.tolist() == [0, 0 if patience == 1 else 1]
    if patience == 2:
        # the same batches with update 3 of model 1 left out, by hand
        ref = _Batched(w0).double()
        g = torch.Generator().manual_seed(3)
        for step in range(8):
            idx = torch.randperm(X.shape[0], generator=g)[:16]
            ref.zero_grad()
            per = _per_model_mse(ref, X[idx], y[idx])
            (per[0] + (0.0 if step == 3 else per[1])).backward()
            with torch.no_grad():
                ref.w -= 0.1 * ref.w.grad
                ref.b -= 0.1 * ref.b.grad
        torch.testing.assert_close(model.w.detach(), ref.w.detach(), rtol=1e-12, atol=1e-14)


def test_non_finite_gradient_with_finite_loss_is_skipped():
    """A gradient that overflows while the loss does not (here: a loss with an infinite slope at
    the start) skips that model's update instead of moving it by a clamped huge step."""
    X, y, _ = _regression()
    w0 = torch.zeros(2, 3, dtype=torch.float64)

    def loss(m, X, y):
        per = _per_model_mse(m, X, y)
        return torch.stack([per[0], per[1] + torch.sqrt(m.w[1, 0].abs())])  # d/dw at 0: inf

    model = _Batched(w0)
    hist = train(model, loss, (X, y), optimizer="sgd", lr=0.1, steps=3, batch_size=16, dtype="float64")
    assert not hist.diverged.any() and hist.skipped.tolist() == [0, 3]
    assert torch.all(model.w[1] == 0) and torch.all(model.w[0] != 0)
