import numpy as np
import pytest
import torch
from torch import nn

from attnlab.train import History, train


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
    with pytest.raises(ValueError, match="loss_fn must return a scalar"):
        train(nn.Linear(3, 1), lambda m, X, y: m(X), (X, y), steps=1)


def test_optimizers_match_torch_optim():
    """The written-out SGD and AdamW take the same steps as torch.optim's."""
    X, y, _ = _regression()
    for name, kwargs, reference in [
        ("gd", {"weight_decay": 0.1}, lambda p: torch.optim.SGD(p, lr=0.05, weight_decay=0.1)),
        (
            "adam",
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
