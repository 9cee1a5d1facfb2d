"""Part II's bridge to Part I (pt = phase transition): one-layer attention on the histogram task."""

from __future__ import annotations

import torch

from attnlab.experiments import experiment
from attnlab.experiments.phase_transition.engine import _threads
from attnlab.validation import make_generator


def histogram_data(n: int, seq_len: int, alphabet: int, generator: torch.Generator):
    """Sequences ``[n, seq_len]`` of tokens in ``range(alphabet)`` and, at every position, how
    many times its token occurs in the sequence (the histogram task of Part I)."""
    x = torch.randint(alphabet, (n, seq_len), generator=generator)
    y = (x[:, :, None] == x[:, None, :]).sum(-1)  # [n, L]: counts, 1..L
    return x, y


class _HistogramTransformer(torch.nn.Module):
    """The authors' one-layer model (``src/transformer.py``), scaled down.

    Token and learned positional embeddings live in two halves of the model dimension; the
    attention's queries and keys read only one half (``attention_input="semantic"`` or
    ``"positional"``), its values the whole; then LayerNorm and a two-layer ReLU read-out.
    """

    def __init__(self, seq_len, alphabet, dim, hidden, attention_input, generator):
        super().__init__()
        half = dim // 2
        self.tok = torch.nn.Parameter(torch.randn(alphabet, half, generator=generator) / half**0.5)
        self.pos = torch.nn.Parameter(torch.randn(seq_len, half, generator=generator) / half**0.5)
        self.Q = torch.nn.Parameter(torch.randn(half, half, generator=generator) / half**0.5)
        self.K = torch.nn.Parameter(torch.randn(half, half, generator=generator) / half**0.5)
        self.V = torch.nn.Parameter(torch.randn(dim, dim, generator=generator) / dim**0.5)
        self.norm = torch.nn.LayerNorm(dim)
        self.fc1 = torch.nn.Linear(dim, hidden)
        self.fc2 = torch.nn.Linear(hidden, seq_len + 1)
        self.attention_input = attention_input
        with torch.no_grad():
            for layer in (self.fc1, self.fc2):
                layer.weight.copy_(
                    torch.randn(layer.weight.shape, generator=generator) / layer.in_features**0.5
                )
                layer.bias.zero_()

    def attention(self, x):
        e_tok = self.tok[x]  # [n, L, half]
        e_pos = self.pos.expand_as(e_tok)
        a = e_tok if self.attention_input == "semantic" else e_pos
        scores = (a @ self.Q) @ (a @ self.K).transpose(-1, -2) / a.shape[-1] ** 0.5
        return torch.softmax(scores, dim=-1), torch.cat([e_tok, e_pos], -1)

    def forward(self, x):
        A, e = self.attention(x)
        return self.fc2(torch.relu(self.fc1(self.norm(A @ e @ self.V))))  # [n, L, classes]


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
                model = _HistogramTransformer(L, T, config["dim"], config["hidden"], kind, gen)
                opt = torch.optim.Adam(model.parameters(), lr=config["lr"], betas=(0.9, 0.98))
                for _ in range(config["epochs"]):
                    perm = torch.randperm(config["n_train"], generator=gen)
                    for i in range(0, config["n_train"], config["batch"]):
                        idx = perm[i : i + config["batch"]]
                        loss = torch.nn.functional.cross_entropy(model(x_tr[idx]).reshape(-1, L + 1),
                                                                 y_tr[idx].reshape(-1))  # fmt: skip
                        opt.zero_grad(set_to_none=True)
                        loss.backward()
                        opt.step()
                with torch.no_grad():
                    acc = float((model(x_te).argmax(-1) == y_te).float().mean())
                    A, _ = model.attention(x_te)  # [n, L, L]
                    same = (x_te[:, :, None] == x_te[:, None, :]).float()
                    others = same * (1 - torch.eye(L))  # same token, other position
                    rows.append({
                        "model": kind, "seed_index": s, "test_accuracy": acc, "final_loss": float(loss),
                        "self_mass": float(torch.diagonal(A, dim1=-2, dim2=-1).mean()),
                        "same_token_mass": float((A * others).sum(-1).mean()),
                        "same_token_mass_uniform": float(others.mean(-1).mean()),
                        "input_dependence": float(A.std(0).mean()),
                    })  # fmt: skip
    return rows
