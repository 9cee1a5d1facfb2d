"""Part II's bridge to Part I (pt = phase transition): one-layer attention on the histogram task."""

from __future__ import annotations

import math

import torch
from torch.nn.functional import cross_entropy

from attnlab.experiments import experiment
from attnlab.experiments.phase_transition.engine import _threads
from attnlab.models import HistogramTransformer
from attnlab.train import train
from attnlab.validation import make_generator


def histogram_data(n: int, seq_len: int, alphabet: int, generator: torch.Generator):
    """Sequences ``[n, seq_len]`` of tokens in ``range(alphabet)`` and, at every position, how
    many times its token occurs in the sequence (the histogram task of Part I)."""
    x = torch.randint(alphabet, (n, seq_len), generator=generator)
    y = (x[:, :, None] == x[:, None, :]).sum(-1)  # [n, L]: counts, 1..L
    return x, y


def _epochs(x, y, batch, generator):
    """A sampler for :func:`attnlab.train.train` that walks through ``(x, y)`` in epochs: a fresh
    permutation from ``generator`` at the start of each epoch, then consecutive minibatches."""
    state = {"perm": None, "at": 0}

    def sample(batch_size, gen):
        if state["perm"] is None or state["at"] >= len(x):
            state["perm"], state["at"] = torch.randperm(len(x), generator=generator), 0
        idx = state["perm"][state["at"] : state["at"] + batch]
        state["at"] += batch
        return x[idx], y[idx]

    return sample


@experiment(
    "pt_histogram",
    book={"seq_len": 10, "alphabet": 15, "dim": 32, "hidden": 64, "n_train": 3000, "n_test": 2000,
          "batch": 150, "epochs": 40, "lr": 3e-3, "n_seeds": 1, "seed": 0},
    paper={"seq_len": 10, "alphabet": 15, "dim": 64, "hidden": 128, "n_train": 35000, "n_test": 15000,
           "batch": 32, "epochs": 200, "lr": 1e-3, "n_seeds": 10, "seed": 0},
    description="bridge to Part I: one-layer attention solves the histogram task by content or by position",
)  # fmt: skip
def pt_histogram(config: dict, device: str) -> list[dict]:
    """Train the semantic-only and the positional-only model; report accuracy and attention.

    ``same_token_mass``: average attention a position pays to the *other* positions holding its
    own token (``same_token_mass_uniform`` is that mass under uniform attention); ``self_mass``:
    attention on itself; ``input_dependence``: standard deviation of the attention weights across
    inputs, averaged (zero for a purely positional attention).
    """
    rows = []
    L, T = config["seq_len"], config["alphabet"]
    with _threads(1):
        for s in range(config["n_seeds"]):
            gen = make_generator(config["seed"] + s)
            x_tr, y_tr = histogram_data(config["n_train"], L, T, gen)
            x_te, y_te = histogram_data(config["n_test"], L, T, gen)
            for kind in ("semantic", "positional"):
                model = HistogramTransformer(L, T, config["dim"], config["hidden"], kind, gen)
                history = train(
                    model,
                    lambda m, x, y: cross_entropy(m(x).reshape(-1, L + 1), y.reshape(-1)),
                    _epochs(x_tr, y_tr, config["batch"], gen),
                    optimizer="adam",
                    lr=config["lr"],
                    betas=(0.9, 0.98),
                    steps=config["epochs"] * math.ceil(config["n_train"] / config["batch"]),
                    batch_size=config["batch"],
                    seed=gen,
                    record="mean",  # draws exactly one batch per step; records each step's loss
                )
                with torch.no_grad():
                    acc = float((model(x_te).argmax(-1) == y_te).float().mean())
                    A, _ = model.attention(x_te)  # [n, L, L]
                    same = (x_te[:, :, None] == x_te[:, None, :]).float()
                    others = same * (1 - torch.eye(L))  # same token, other position
                    rows.append({
                        "model": kind, "seed_index": s, "test_accuracy": acc, "final_loss": history.loss[-1],
                        "self_mass": float(torch.diagonal(A, dim1=-2, dim2=-1).mean()),
                        "same_token_mass": float((A * others).sum(-1).mean()),
                        "same_token_mass_uniform": float(others.mean(-1).mean()),
                        "input_dependence": float(A.std(0).mean()),
                    })  # fmt: skip
    return rows
