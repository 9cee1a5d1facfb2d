"""``stop_after``: the first updates of a long run, with the whole run's schedule and records.

A cheap checkpoint of a committed run (``test_committed_results.py``) trains a model for the first
window of its steps; the schedule must still span the run's full length.
"""

import numpy as np
import pytest
import torch
from torch import nn

from attnlab.icl_training import train_icl
from attnlab.train import train


class _Batched(nn.Module):
    def __init__(self, w0):
        super().__init__()
        self.w = nn.Parameter(w0.clone())


def _loss(model, X, y):
    return 0.5 * ((X @ model.w.T - y[:, None]) ** 2).mean(0)


def _data():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(64, 3, generator=g, dtype=torch.float64)
    return X, X @ torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)


@pytest.mark.parametrize("record", ["last", "mean"])
def test_stop_after_is_the_start_of_the_whole_run(record):
    """Stopping after 6 of 20 updates gives the first records of the whole run, bit for bit, with
    the whole run's schedule (a decaying one, so that a schedule over 6 steps would differ)."""
    X, y = _data()
    w0 = torch.zeros(2, 3, dtype=torch.float64)
    kw = dict(optimizer="adam", lr=0.05, steps=20, batch_size=16, dtype="float64", seed=1,
              lr_schedule="warmup_stable_decay", record_every=3, record=record)  # fmt: skip
    whole, part = _Batched(w0), _Batched(w0)
    h_whole = train(whole, _loss, (X, y), **kw)
    h_part = train(part, _loss, (X, y), stop_after=6, **kw)
    n = len(h_part.steps)
    assert h_part.steps == h_whole.steps[:n] and h_part.steps[-1] == 6
    assert np.array_equal(h_part.as_arrays()["loss"], h_whole.as_arrays()["loss"][:n])
    short = train(_Batched(w0), _loss, (X, y), **{**kw, "steps": 6})
    assert not np.array_equal(short.as_arrays()["loss"], h_part.as_arrays()["loss"])
    seen = []
    train(
        _Batched(w0),
        _loss,
        (X, y),
        stop_after=2,
        **{**kw, "lr_schedule": lambda s, n: seen.append((s, n)) or 1},
    )
    assert seen == [(0, 20), (1, 20)]
    with pytest.raises(ValueError, match="stop_after"):
        train(_Batched(w0), _loss, (X, y), stop_after=-1, **kw)


def test_train_icl_stops_after_the_first_window():
    kw = dict(params=("diag",), depths=(2,), noise=("uniform:1", "uniform:3"), seeds=(0, 1), steps=40,
              batch_size=32, lr=1e-3, lr_schedule="cosine", record_every=10)  # fmt: skip
    whole = train_icl(**kw)
    part = train_icl(**kw, stop_after=10)
    assert list(part.steps) == [10]
    loss_whole, loss_part = whole.group("diag", 2).loss, part.group("diag", 2).loss
    assert np.array_equal(loss_part[..., 0], loss_whole[..., 0])
