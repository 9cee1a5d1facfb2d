"""Re-derive a cheap part of every committed result with today's code (``test_committed_results.py``).

A committed result (``lib/attnlab/results/NAME-SCALE.csv`` and ``.json``) records its configuration
and the command that made it. Each kind of check below re-runs a representative part of it from
that configuration and compares the rows it gives with the committed ones at a stated tolerance:

- :class:`Rerun`: the registered experiment run again (``attnlab.experiments.run``, no cache) with
  the committed configuration and overrides that make it cheap (one grid point, one seed, the first
  steps of a run that records a curve), its rows matched to the committed rows by key columns;
- :class:`FirstWindow`: one trained Part III model (param, depth, seed, with every noise setting of
  the process that trained it) trained again for the first ``record_every`` steps of its run (its
  schedule over the run's full length, :func:`attnlab.icl_training.train_icl`'s ``stop_after``),
  against the first point of its committed training curve;
- :class:`StoredModel`: a model whose weights the result stores, evaluated again on the run's
  evaluation and validation prompts, against its committed table row;
- :class:`Oracle`: the oracle's mean loss on the run's evaluation prompts (the ``oracle_loss``
  column), which depends on the prompts and the noise alone;
- :class:`Check`: a function of its own (a splice of committed runs, a rebuilt model);
- :class:`NotCheap`: no part can be re-derived cheaply, and why;
- :class:`Elsewhere`: a test of the result's own module re-derives it (named, and checked to exist).

Rows are matched on their key columns (floats rounded to 9 significant digits); every re-derived
row must have a committed twin, and at least ``min_rows`` must be compared.
"""

from __future__ import annotations

import functools
import math
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np

from attnlab import experiments as ex

RESULTS = Path(str(resources.files("attnlab") / "results"))

# Float64 on the same inputs: sums over up to 10^5 prompts and BLAS kernels that differ between
# machines leave ~1e-12 relative; 1e-9 is far below any change of a computation.
FLOAT64_RTOL = 1e-9
# Part III's trainer is float32. Trained alone, a model's first window of 100 steps is bit-equal to
# its batched twin in the committed runs (measured); 1e-6 relative leaves room for float32
# reassociation on another CPU (eps 6e-8 over ~10 accumulated roundings), while a different
# initialisation (GD++'s seed offset 3 -> 2) moves the first window by 4e-6 to 1e-4.
FLOAT32_RTOL = 1e-6


def committed_stems() -> list[str]:
    """``NAME-SCALE`` of every committed result."""
    return sorted(p.stem for p in RESULTS.glob("*.json"))


@functools.cache
def committed(stem: str) -> ex.Result:
    name, scale = stem.rsplit("-", 1)
    return ex.load_result(name, scale)


def committed_config(stem: str) -> dict:
    """The registered configuration at the result's scale with the committed values: a key the
    committed configuration lacks (a setting added later) keeps its registered default, and a
    committed key the experiment no longer has fails (the result is stale)."""
    res = committed(stem)
    return ex.get(res.name).config(res.scale, res.config)


def command_overrides(command: str) -> dict:
    """The ``--set KEY=VALUE`` overrides of a recorded command line."""
    words, out = shlex.split(command), {}
    for i, word in enumerate(words):
        if word == "--set":
            key, _, value = words[i + 1].partition("=")
            out[key] = ex._core._parse(value)
    return out


def _norm(value):
    """A key column's value: a missing value ('' in a result file) is None."""
    return None if value == "" else value


def _number(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_)
    )


def _key_matches(got: tuple, want: tuple) -> bool:
    """Equal key values; floats (a root, alpha +- delta) equal to 1e-6 relative."""
    for g, w in zip(got, want, strict=True):
        if _number(g) and _number(w):
            if not (math.isclose(g, w, rel_tol=1e-6, abs_tol=1e-12) or (g != g and w != w)):
                return False
        elif g != w:
            return False
    return True


def _same(got, want, rtol: float, atol: float) -> bool:
    if want in ("", None) or got in ("", None):
        return want in ("", None) and got in ("", None)
    if isinstance(want, (bool, np.bool_)) or isinstance(got, (bool, np.bool_)):
        return isinstance(want, (bool, np.bool_)) and isinstance(got, (bool, np.bool_)) and got == want
    if isinstance(want, str) or isinstance(got, str):
        return str(got) == str(want)
    got, want = float(got), float(want)
    if not (math.isfinite(got) and math.isfinite(want)):
        return got == want or (math.isnan(got) and math.isnan(want))
    return abs(got - want) <= atol + rtol * abs(want)


def compare_rows(got, want, keys, columns, rtol, atol=0.0, min_rows=1) -> None:
    """Match every row of ``got`` to the row of ``want`` with equal ``keys`` and compare
    ``columns``; raise ``AssertionError`` listing every difference."""
    index: dict = {}
    for row in want:
        key = tuple(_norm(row.get(k)) for k in keys)
        exact = tuple(v for v in key if not _number(v))
        index.setdefault(exact, []).append((key, row))
    problems, compared = [], 0
    for row in got:
        key = tuple(_norm(row.get(k)) for k in keys)
        where = {k: v for k, v in zip(keys, key, strict=True) if v is not None}
        exact = tuple(v for v in key if not _number(v))
        twin = next((w for k, w in index.get(exact, []) if _key_matches(key, k)), None)
        if twin is None:
            problems.append(f"no committed row with {where}")
            continue
        compared += 1
        for col in columns:
            if col in row and not _same(row[col], twin.get(col), rtol, atol):
                problems.append(f"{where} {col}: re-derived {row[col]!r}, committed {twin.get(col)!r}")
    if compared < min_rows:
        problems.append(f"compared {compared} rows, expected at least {min_rows}")
    if problems:
        shown = "\n  ".join(problems[:20])
        raise AssertionError(f"{len(problems)} differences (rtol {rtol:g}, atol {atol:g}):\n  {shown}")


def _select(rows, where) -> list[dict]:
    if where is None:
        return list(rows)
    if callable(where):
        return [r for r in rows if where(r)]
    return [
        r
        for r in rows
        if all((r.get(k) in v) if isinstance(v, tuple) else r.get(k) == v for k, v in where.items())
    ]


@dataclass(frozen=True)
class Spec:
    """A check of one committed result; ``why`` says what it re-derives and why its tolerance."""

    why: str

    def check(self, stem: str) -> None:  # pragma: no cover - every kind overrides it
        raise NotImplementedError


@dataclass(frozen=True)
class Rerun(Spec):
    """Run the experiment again with the committed configuration and ``overrides``; compare the
    re-derived rows that pass ``where`` (a dict of column values, a tuple meaning "one of", or a
    function of the row) on ``columns`` with their committed twins (same ``keys``)."""

    overrides: Mapping = field(default_factory=dict)
    keys: tuple = ()
    columns: tuple = ()
    rtol: float = FLOAT64_RTOL
    atol: float = 0.0
    where: Mapping | Callable | None = None
    min_rows: int = 1

    def check(self, stem: str) -> None:
        res = committed(stem)
        config = {**committed_config(stem), **self.overrides}
        got = ex.run(res.name, res.scale, overrides=config, cache=False).rows
        compare_rows(_select(got, self.where), res.rows, self.keys, self.columns, self.rtol, self.atol,
                     self.min_rows)  # fmt: skip


@dataclass(frozen=True)
class Check(Spec):
    """``fn(result)`` re-derives rows; they are compared with the committed rows as in :class:`Rerun`
    (``fn`` may instead raise ``AssertionError`` itself and return None)."""

    fn: Callable = None
    keys: tuple = ()
    columns: tuple = ()
    rtol: float = FLOAT64_RTOL
    atol: float = 0.0
    min_rows: int = 1

    def check(self, stem: str) -> None:
        res = committed(stem)
        got = self.fn(res)
        if got is not None:
            compare_rows(got, res.rows, self.keys, self.columns, self.rtol, self.atol, self.min_rows)


@dataclass(frozen=True)
class NotCheap(Spec):
    """No part of the result can be re-derived cheaply; ``why`` says why (the lab notes list it)."""

    def check(self, stem: str) -> None:
        assert len(self.why) > 40, f"{stem}: say why it cannot be re-derived cheaply"


@dataclass(frozen=True)
class Elsewhere(Spec):
    """A test beside the result's module re-derives it: ``test`` is ``"tests/FILE.py::NAME"``; the
    check fails if that test is gone (so that the result is never left without a re-derivation)."""

    test: str = ""

    def check(self, stem: str) -> None:
        path, _, name = self.test.partition("::")
        source = (Path(__file__).parent.parent / path).read_text()
        assert f"def {name}(" in source, f"{stem}: {self.test} not found"


# ------------------------------------------------------------------------------------------------
# Part III: trained models
# ------------------------------------------------------------------------------------------------


def _table_row(res, param, L, noise, seed, arm=None) -> dict:
    def key(r):
        return (r["param"], int(r["n_layers"]), r["noise"], int(r["seed"]), r.get("arm") or None)

    rows = [r for r in res.rows if r["kind"] == "table" and key(r) == (param, L, noise, seed, arm)]
    assert len(rows) == 1, f"expected one table row of {(param, L, noise, seed, arm)}, found {len(rows)}"
    return rows[0]


def _process_config(stem: str, seed: int, arm: str | None = None) -> list[dict]:
    """The configurations of the processes that trained seed ``seed`` (one per ``--set part=k/m``
    of the result's commands), with ``arm``'s changes applied as :func:`arm_rows` does."""
    res = committed(stem)
    config = committed_config(stem)
    if arm is not None:
        config = {**config, **config["arms"][arm]}
    commands = res.meta.get("commands") or [res.meta["command"]]
    if isinstance(commands, str):  # an old merge wrote the list as its text
        commands = [c.strip(" '\"") for c in commands.strip("[]").split("', '")]
    out = []
    for command in commands:
        sets = command_overrides(command)
        if f"run {res.name} " not in command + " ":
            continue
        start = int(sets.get("seed_start", config.get("seed_start", 0)))
        if start <= seed < start + int(sets.get("n_seeds", config["n_seeds"])):
            out.append({**config, "part": sets.get("part", "all"), "seed_start": start,
                        "n_seeds": int(sets.get("n_seeds", config["n_seeds"]))})  # fmt: skip
    assert out, f"{stem}: no recorded command trained seed {seed}"
    return out


@dataclass(frozen=True)
class FirstWindow(Spec):
    """Train model ``(param, n_layers)`` of seed ``seed`` again, as the first process of the run
    that trained it did (its noise settings, learning rate, schedule over the run's steps, batch,
    data and initialisation seeds), for the first ``record_every`` steps; compare its mean loss
    over them with the first point of the committed curve of every noise setting whose model was
    not replaced by a re-run (a replaced model's curve is the re-run's)."""

    param: str = "diag"
    n_layers: int = 1
    seed: int = 0
    arm: str | None = None
    rtol: float = FLOAT32_RTOL
    min_rows: int = 1

    def check(self, stem: str) -> None:
        from attnlab.experiments.in_context.recipe import Recipe
        from attnlab.icl_training import train_icl

        res = committed(stem)
        config = _process_config(stem, self.seed, self.arm)[0]
        plan = Recipe.from_config(config).plan
        run = next(r for r in plan.runs if self.param in r.params and self.n_layers in r.depths)
        every = int(plan.shared["record_every"])
        out = train_icl(
            (self.param,), (self.n_layers,), plan.noise, (self.seed,), lr=run.lr, steps=run.steps,
            lr_schedule=run.lr_schedule, dtype=run.dtype, stop_after=every, **plan.shared,
        )  # fmt: skip
        loss = out.group(self.param, self.n_layers).loss[:, 0, 0]
        lr = float(run.lr[self.param] if isinstance(run.lr, dict) else run.lr)
        got = []
        for si, noise in enumerate(plan.noise):
            table = _table_row(res, self.param, self.n_layers, noise, self.seed, self.arm)
            if not math.isclose(float(table.get("lr", lr)), lr, rel_tol=1e-9):
                continue  # re-run at another rate: its curve is the re-run's
            model = {"param": self.param, "n_layers": self.n_layers, "noise": noise, "seed": self.seed}
            got.append({"kind": "curve", **model, "step": every, "train_loss": float(loss[si])})
        want = [r for r in res.rows if r["kind"] == "curve" and r.get("arm", None) in (self.arm, "", None)]
        keys = ("kind", "param", "n_layers", "noise", "seed", "step")
        compare_rows(got, want, keys, ("train_loss",), self.rtol, 0.0, self.min_rows)


@functools.lru_cache(maxsize=2)  # a set of 100,000 prompts holds ~0.2 GB
def _prompts(n_eval: int, d: int, n: int, seed: int, noise: str, chunk: int):
    from attnlab.experiments.in_context.recipe import prompt_set

    return prompt_set(n_eval, d, n, seed, noise=(noise,), chunk=chunk)


@dataclass(frozen=True)
class StoredModel(Spec):
    """Evaluate a model whose weights the result stores on the run's evaluation prompts (and its
    validation prompts) again: its mean, median and trimmed adjusted loss, its loss and the
    oracle's, against its committed table row (float64 on the same prompts)."""

    param: str = "diag"
    n_layers: int = 1
    noise: str = "uniform:0"
    seed: int = 0
    rtol: float = FLOAT64_RTOL

    def check(self, stem: str) -> None:
        from attnlab import baselines as bl
        from attnlab.experiments.in_context.trained import trained_model

        res, config = committed(stem), committed_config(stem)
        model = trained_model(res, self.param, self.n_layers, self.noise, self.seed)
        d, n, chunk = config["d"], config["n"], config["chunk"]
        evaluation = _prompts(config["n_eval"], d, n, config["eval_seed"], self.noise, chunk)
        adj, sq = evaluation.adjusted(model, self.noise)
        row = {"kind": "table", "param": self.param, "n_layers": self.n_layers, "noise": self.noise,
               "seed": self.seed, "adjusted": float(adj.mean()), "adjusted_median": float(adj.median()),
               "adjusted_trimmed": bl.trimmed_mean(adj, config["trim"]), "loss": float(sq.mean()),
               "oracle_loss": float(evaluation.oracle_sq[self.noise].mean())}  # fmt: skip
        if "adjusted_val" in _table_row(res, self.param, self.n_layers, self.noise, self.seed):
            val = _prompts(config["n_val"], d, n, config["eval_seed"] + 13, self.noise, chunk)
            row["adjusted_val"] = float(val.adjusted(model, self.noise)[0].mean())
        keys = ("kind", "param", "n_layers", "noise", "seed")
        compare_rows([row], res.rows, keys, tuple(row)[5:], self.rtol)


@functools.cache
def _oracle_mean(n_eval: int, d: int, n: int, seed: int, noise: str, chunk: int) -> float:
    """The oracle's mean loss on a set of evaluation prompts (kept: several results share a set)."""
    return float(_prompts(n_eval, d, n, seed, noise, chunk).oracle_sq[noise].mean())


@dataclass(frozen=True)
class Oracle(Spec):
    """The oracle's mean loss on the run's evaluation prompts of ``noise`` (the ``oracle_loss`` of
    every table row of that noise setting): the prompts, the noise distribution and the oracle."""

    noise: tuple = ("uniform:1",)
    rtol: float = FLOAT64_RTOL

    def check(self, stem: str) -> None:
        res, config = committed(stem), committed_config(stem)
        got = []
        for noise in self.noise:
            mean = _oracle_mean(config["n_eval"], config["d"], config["n"], config["eval_seed"], noise,
                                config["chunk"])  # fmt: skip
            got.append({"kind": "table", "noise": noise, "oracle_loss": mean})
        compare_rows(got, res.rows, ("kind", "noise"), ("oracle_loss",), self.rtol)
