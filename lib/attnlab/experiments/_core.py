"""Registry, cache, result files and parallel sweeps behind :mod:`attnlab.experiments`."""

from __future__ import annotations

import csv
import functools
import hashlib
import importlib
import io
import json
import os
import pkgutil
import platform
import shlex
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import joblib
import numpy as np

import attnlab
from attnlab.validation import check_choice, check_int, resolve_device

SCALES = ("book", "paper", "cpu")  # book and paper for every experiment; cpu where one is defined
_REGISTRY: dict[str, Experiment] = {}
_DISCOVERED = False


@dataclass(frozen=True)
class Experiment:
    """A registered experiment: its function, its configurations and a description.

    ``book`` and ``paper`` exist for every experiment; ``cpu`` (a recipe that reproduces the paper
    on a CPU in about an hour) only where one was defined.
    """

    name: str
    fn: Callable[[dict, str], list[dict]]
    book: dict
    paper: dict
    description: str = ""
    cpu: dict | None = None

    @property
    def scales(self) -> tuple[str, ...]:
        """The scales this experiment defines, in the order of :data:`SCALES`."""
        return ("book", "paper") + (("cpu",) if self.cpu is not None else ())

    def config(self, scale: str = "book", overrides: Mapping | None = None) -> dict:
        """Return the configuration at ``scale`` with ``overrides`` applied (keys must exist)."""
        scale = check_choice("scale", scale, self.scales)
        config = dict({"book": self.book, "paper": self.paper, "cpu": self.cpu}[scale])
        for key, value in dict(overrides or {}).items():
            if key not in config:
                known = ", ".join(sorted(config))
                raise ValueError(f"overrides key {key!r} is not a parameter of {self.name}; known: {known}")
            config[key] = value
        return config


@dataclass
class Result:
    """Rows returned by an experiment, with the configuration that produced them."""

    name: str
    scale: str
    config: dict
    rows: list[dict]
    version: str = attnlab.__version__
    meta: dict = field(default_factory=dict)

    @property
    def columns(self) -> list[str]:
        cols: list[str] = []
        for row in self.rows:
            cols += [c for c in row if c not in cols]
        return cols

    def column(self, name: str, **where) -> np.ndarray:
        """Return column ``name`` as an array, keeping rows whose columns equal ``where``."""
        if name not in self.columns:
            raise ValueError(f"name must be one of the columns {self.columns}, got {name!r}")
        rows = [r for r in self.rows if all(_eq(r.get(k), v) for k, v in where.items())]
        return np.asarray([r.get(name) for r in rows])


def _eq(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        try:
            return bool(np.isclose(float(a), float(b), rtol=1e-9, atol=1e-12))
        except (TypeError, ValueError):
            return False
    return a == b


def experiment(
    name: str, *, book: Mapping, paper: Mapping, description: str = "", cpu: Mapping | None = None
):
    """Register ``fn(config, device) -> list[dict]`` under ``name`` with its scales.

    ``book`` and ``paper`` are required; ``cpu`` is an optional third scale. All must have the
    same keys.
    """
    if not isinstance(name, str) or not name.replace("_", "").isalnum():
        raise ValueError(f"name must be an identifier-like string, got {name!r}")
    if set(book) != set(paper):
        raise ValueError(f"book and paper configs of {name!r} must have the same keys")
    if cpu is not None and set(cpu) != set(book):
        raise ValueError(f"cpu config of {name!r} must have the same keys as book and paper")

    def register(fn):
        if name in _REGISTRY and _REGISTRY[name].fn.__qualname__ != fn.__qualname__:
            raise ValueError(f"name {name!r} is already registered")
        _REGISTRY[name] = Experiment(
            name, fn, dict(book), dict(paper), description, None if cpu is None else dict(cpu)
        )
        return fn

    return register


def _discover() -> None:
    global _DISCOVERED
    if _DISCOVERED:
        return
    package = importlib.import_module("attnlab.experiments")
    for info in pkgutil.iter_modules(package.__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"attnlab.experiments.{info.name}")
    _DISCOVERED = True


def names() -> list[str]:
    """The names of all registered experiments, sorted."""
    _discover()
    return sorted(_REGISTRY)


def get(name: str) -> Experiment:
    """The registered :class:`Experiment` called ``name``."""
    _discover()
    if name not in _REGISTRY:
        raise ValueError(f"name must be a registered experiment ({', '.join(names())}), got {name!r}")
    return _REGISTRY[name]


def cache_dir() -> Path:
    """Where results are cached: ``$ATTNLAB_CACHE`` or ``~/.cache/attnlab``."""
    return Path(os.environ.get("ATTNLAB_CACHE", Path.home() / ".cache" / "attnlab"))


def _execute(name: str, config: dict, device: str, version: str, code: str) -> tuple[list, dict]:
    # ``version`` and ``code`` are part of the cache key: a change of the library recomputes.
    import torch  # here, not at the top: a page that only loads committed results never needs it

    wall, cpu = time.perf_counter(), time.process_time()
    out = get(name).fn(dict(config), device)
    rows, meta = out if isinstance(out, tuple) and len(out) == 2 else (out, {})
    timing = {
        "wall_s": round(time.perf_counter() - wall, 1),
        "cpu_s": round(time.process_time() - cpu, 1),
        "torch_threads": torch.get_num_threads(),
        "machine": _machine(),
        "library": code,
    }
    return rows, {**dict(meta), "timing": timing}


def _machine() -> dict:
    """What a run's last bits depend on besides the library: the CPU (compiled kernels are built
    for its instruction set; ``cpu_flags`` is a hash of its flags) and torch's version."""
    import torch

    try:
        info = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        info = []
    model = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), "")
    flags = next((line for line in info if line.startswith("flags")), "")
    return {
        "cpu": model or platform.processor(),
        "cpu_flags": hashlib.sha256(flags.encode()).hexdigest()[:16],
        "torch": torch.__version__,
    }


def library_fingerprint() -> str:
    """A hash of every source file of the ``attnlab`` package.

    It is part of the cache key, so that a result computed by older code is never served after
    the library changed, even within one version number.
    """
    root = Path(attnlab.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def run(
    name: str,
    scale: str = "book",
    *,
    device: str = "cpu",
    overrides: Mapping | None = None,
    cache: bool = True,
) -> Result:
    """Run experiment ``name`` at ``scale`` and return its :class:`Result`.

    Results are cached on disk with ``joblib.Memory``, keyed by the name, the full configuration,
    the device, the library version and a fingerprint of the library's source
    (:func:`library_fingerprint`), so a second call with the same configuration and code loads
    them. An experiment may return ``(rows, meta)`` instead of rows: ``meta`` (a dict) goes to
    :attr:`Result.meta` and the result's JSON, with the measured ``timing`` of the computation
    (``wall_s``, ``cpu_s`` and torch's thread count; a cached result keeps the original timing).
    """
    exp = get(name)
    config = exp.config(scale, overrides)
    resolve_device(device)
    if cache:
        memory = joblib.Memory(cache_dir() / "joblib", verbose=0)
        rows, meta = memory.cache(_execute)(
            name, config, str(device), attnlab.__version__, library_fingerprint()
        )
    else:
        rows, meta = _execute(name, config, str(device), attnlab.__version__, library_fingerprint())
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ValueError(f"experiment {name!r} must return a list of dict rows")
    return Result(name, scale, config, rows, meta=meta)


def sweep(
    fn: Callable[..., object],
    configs: Sequence[Mapping],
    *,
    n_jobs: int = 2,
    backend: str = "loky",
    scheduler=None,
) -> list:
    """Evaluate ``fn(**config)`` for every config in parallel; results keep the configs' order.

    By default the configs run on the local cores through joblib (``n_jobs`` processes). Pass
    ``scheduler``, the address of a running ``dask.distributed`` scheduler
    (``"tcp://host:8786"``) or a ``distributed.Client``, to run the same sweep on a cluster
    instead; ``$ATTNLAB_SCHEDULER`` sets a default address (the CLI's ``--scheduler``). ``fn``
    must then be importable by the workers (a module-level function of an installed package).
    """
    if not callable(fn):
        raise ValueError("fn must be callable")
    configs = [dict(c) for c in configs]
    scheduler = scheduler if scheduler is not None else os.environ.get("ATTNLAB_SCHEDULER") or None
    if scheduler is not None:
        return _sweep_dask(fn, configs, scheduler)
    n_jobs = check_int("n_jobs", n_jobs, minimum=-1)
    if n_jobs == 0:
        raise ValueError("n_jobs must be a positive integer or -1 (all cores), got 0")
    if n_jobs == 1 or len(configs) <= 1:
        return [fn(**c) for c in configs]
    return joblib.Parallel(n_jobs=n_jobs, backend=backend)(joblib.delayed(fn)(**c) for c in configs)


def _sweep_dask(fn, configs: list[dict], scheduler) -> list:
    try:
        from distributed import Client
    except ImportError as err:  # pragma: no cover - distributed is a declared dependency
        raise ValueError("scheduler needs the 'distributed' package (pip install distributed)") from err
    if isinstance(scheduler, Client):
        client, owned = scheduler, False
    elif isinstance(scheduler, str) and "://" in scheduler:
        client, owned = Client(scheduler, timeout="20s"), True
    else:
        raise ValueError(
            f"scheduler must be a 'tcp://host:port' address or a distributed.Client, got {scheduler!r}"
        )
    try:
        futures = [client.submit(fn, pure=False, **c) for c in configs]
        return client.gather(futures)
    finally:
        if owned:
            client.close()


def write_result(result: Result, out: str | os.PathLike, command: str | None = None) -> Path:
    """Write ``NAME-SCALE.csv`` (rows) and ``NAME-SCALE.json`` (config, version, command)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{result.name}-{result.scale}"
    with open(stem.with_suffix(".csv"), "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=result.columns)
        writer.writeheader()
        writer.writerows(result.rows)
    meta = {
        "name": result.name,
        "scale": result.scale,
        "config": result.config,
        "attnlab_version": result.version,
        "command": command,
        **result.meta,
    }
    stem.with_suffix(".json").write_text(json.dumps(meta, indent=2, default=str) + "\n")
    return stem.with_suffix(".csv")


def _parse(value: str):
    """A CSV cell as written by :func:`write_result`: an int, a float, a bool or the string."""
    if not value:  # an empty cell (a column that another kind of row fills), most of some files
        return value
    if "." not in value:  # int() refuses any string with a dot: most cells are floats
        try:
            return int(value)
        except ValueError:
            pass
    try:
        return float(value)
    except ValueError:
        pass
    if value in ("True", "False"):
        return value == "True"
    return value


@functools.lru_cache(maxsize=32)
def _parse_rows(text: str) -> tuple[dict, ...]:
    """The parsed rows of one result file's text, parsed once per process for the same text."""
    reader = csv.DictReader(io.StringIO(text, newline=""))
    return tuple({k: _parse(v) for k, v in row.items()} for row in reader)


def load_result(name: str, scale: str = "paper", directory: str | os.PathLike | None = None) -> Result:
    """Load a result written by :func:`write_result`.

    By default it reads the results committed with the library (``attnlab/results``), which the
    chapters show next to their own book-scale runs. A file's text is parsed once per process: a
    chapter that loads the same result in several cells parses it once (a file written again
    is parsed again); each call gets rows of its own to change.
    """
    scale = check_choice("scale", scale, SCALES)
    base = Path(directory) if directory is not None else Path(str(resources.files("attnlab") / "results"))
    stem = base / f"{name}-{scale}"
    csv_path = stem.with_suffix(".csv")
    if not csv_path.exists():
        raise ValueError(f"name {name!r} at scale {scale!r} has no result file in {base}")
    with open(csv_path, newline="") as fh:
        rows = [dict(row) for row in _parse_rows(fh.read())]
    meta = json.loads(stem.with_suffix(".json").read_text())
    return Result(name, scale, meta["config"], rows, meta.get("attnlab_version", "?"), meta)


def _without_out(args: Sequence[str]) -> list[str]:
    """The command-line words less ``--out DIR``: a result records how to reproduce it, not where it went."""
    words, skip = [], False
    for word in args:
        if skip:
            skip = False
        elif word == "--out":
            skip = True
        elif not word.startswith("--out="):
            words.append(word)
    return words


def main(argv: Sequence[str] | None = None) -> int:
    """The command-line interface (``python -m attnlab.experiments``)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m attnlab.experiments", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the registered experiments")
    p_run = sub.add_parser("run", help="run one experiment and write its results")
    p_run.add_argument("name")
    p_run.add_argument("--scale", choices=SCALES, default="book")
    p_run.add_argument("--device", default="cpu")
    p_run.add_argument("--out", default="results")
    p_run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a parameter")
    p_run.add_argument("--no-cache", action="store_true")
    p_run.add_argument(
        "--scheduler", default=None, metavar="ADDRESS", help="run sweeps on a dask.distributed scheduler"
    )
    args = parser.parse_args(argv)

    if args.command == "list":
        for n in names():
            exp = get(n)
            print(f"{n:28s} {exp.description}")
        return 0
    overrides = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--set expects KEY=VALUE, got {item!r}")
        overrides[key] = _parse(value)
    if args.scheduler:
        os.environ["ATTNLAB_SCHEDULER"] = args.scheduler
    result = run(args.name, args.scale, device=args.device, overrides=overrides, cache=not args.no_cache)
    command = "python -m attnlab.experiments " + " ".join(
        shlex.quote(a) for a in _without_out(argv or sys.argv[1:])
    )
    path = write_result(result, args.out, command=command)
    print(f"wrote {path} ({len(result.rows)} rows)")
    return 0
