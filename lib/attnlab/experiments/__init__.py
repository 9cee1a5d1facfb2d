"""Named experiments with two scales (three with ``cpu``), a disk cache and a command-line interface.

An experiment is a function ``fn(config: dict, device: str) -> list[dict]`` returning result
rows, registered with :func:`experiment` together with two configurations: ``book`` (runs in a
chapter on two CPU cores in seconds) and ``paper`` (the paper's setting, from the CLI)::

    @experiment("pt_gd", book={"d": 200}, paper={"d": 1000}, description="...")
    def pt_gd(config, device):
        ...
        return [{"alpha": a, "eps_g": e} for ...]

An optional third configuration, ``cpu=...``, is a recipe that reproduces a paper's result on a
CPU (``--scale cpu``); ``fn`` may return ``(rows, meta)``, and ``meta`` with the measured wall and
CPU time goes to the result's JSON.

Every module in this package that does not start with ``_`` is imported on first use, so a part
of the book registers its experiments by adding a module here.

``python -m attnlab.experiments list`` lists them; ``python -m attnlab.experiments run NAME
--scale paper --device cuda --out DIR`` runs one and writes ``NAME-SCALE.csv`` and
``NAME-SCALE.json`` (the configuration, the library version and the command).
"""

from attnlab.experiments._core import (
    Experiment,
    Result,
    cache_dir,
    experiment,
    get,
    load_result,
    names,
    run,
    sweep,
    write_result,
)

__all__ = [
    "Experiment",
    "Result",
    "cache_dir",
    "experiment",
    "get",
    "load_result",
    "names",
    "run",
    "sweep",
    "write_result",
]
