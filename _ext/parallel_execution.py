"""Execute the book's chapters on every core before Sphinx reads them.

myst-nb executes a notebook while Sphinx reads it, one chapter after the other. With
``execute_notebooks: cache`` (``_config.yml``) this extension runs first, on Sphinx's
``env-before-read-docs``: it empties the jupyter-cache, executes every notebook about to be read
in a pool of :func:`jobs` processes (one kernel each, the longest sources first), exactly as
myst-nb would (``single_nb_execution`` in the chapter's folder, with the configured timeout and
``allow_errors``), and caches each executed notebook. myst-nb then reads every chapter and finds
its outputs in the cache, executed minutes earlier by this same build.

Nothing is kept from an earlier build: the cache is emptied whenever a build reads a notebook, so
every chapter read is executed in that build (``make book`` also removes ``_build`` first). A
chapter whose execution fails is not cached: myst-nb executes it again while reading it and
reports the failure as it always does, as a warning that ``-W`` turns into a failed build.
Warnings printed by a cell (stderr) are in the cached outputs, and ``stderr_output:
remove-warn`` turns them into build warnings as before.

The log says ``executed N notebooks in S s on J processes`` (``benchmarks/bench.py --build``
reads it). ``$BOOK_JOBS`` sets the number of processes (default: the cores this process may use);
each kernel gets its share of the cores as BLAS and OpenMP threads (``$OMP_NUM_THREADS``, unless
set): J kernels with a thread per core each oversubscribe the machine.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from sphinx.util import logging

LOGGER = logging.getLogger(__name__)

#: The summary line :func:`execute_before_reading` logs (``benchmarks/bench.py`` parses it).
SUMMARY = "executed {count} notebooks in {seconds:.1f} s on {jobs} processes"


def jobs() -> int:
    """Processes that execute notebooks: ``$BOOK_JOBS``, or the cores available to this process."""
    value = os.environ.get("BOOK_JOBS", "").strip()
    if value:
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"BOOK_JOBS must be a positive integer, got {value!r}")
        return int(value)
    return _cores()


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _execute(job):
    """Execute one notebook as myst-nb's cache client does; runs in a worker process."""
    from jupyter_cache.executors.utils import single_nb_execution

    notebook, cwd, timeout, allow_errors = job
    started = time.monotonic()
    try:
        result = single_nb_execution(
            notebook, cwd=cwd, timeout=timeout, allow_errors=allow_errors, meta_override=True
        )
    except Exception as err:  # a dead kernel: myst-nb executes the chapter again and reports it
        return notebook, time.monotonic() - started, f"{type(err).__name__}: {err}"
    return result.nb, result.time, result.exc_string if result.err is not None else None


def _notebooks(app, env, docnames):
    """``(docname, path, notebook)`` for each docname that myst-nb will read and execute."""
    from myst_nb.core.read import create_nb_reader

    md_config, nb_config = env.myst_config, env.mystnb_config
    found = []
    for docname in docnames:
        path = Path(env.doc2path(docname))
        if path.suffix not in app.config.source_suffix:
            continue
        content = path.read_text(encoding="utf8")
        reader = create_nb_reader(str(path), md_config, nb_config, content)
        if reader is None:
            continue
        notebook = reader.read(content)
        # A notebook that changes myst-nb's configuration in its own metadata, or that myst-nb
        # would not execute, is left to myst-nb.
        if nb_config.metadata_key in notebook.metadata or nb_config.kernel_rgx_aliases:
            continue
        if any(Path(path).match(p) for p in nb_config.execution_excludepatterns or ()):
            continue
        found.append((docname, path, notebook))
    return found


def execute_before_reading(app, env, docnames):
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    nb_config = env.mystnb_config
    if nb_config.execution_mode != "cache":
        return
    notebooks = _notebooks(app, env, docnames)
    if not notebooks:
        return
    cache_path = Path(nb_config.execution_cache_path or ".jupyter_cache")
    shutil.rmtree(cache_path, ignore_errors=True)
    cache = get_cache(str(cache_path))
    # The longest sources first, so that the longest chapters do not start last.
    notebooks.sort(key=lambda item: -item[1].stat().st_size)
    n_jobs = min(jobs(), len(notebooks))
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, _cores() // n_jobs)))  # the kernels inherit it
    started = time.monotonic()
    work = [(nb, str(path.parent), nb_config.execution_timeout, nb_config.execution_allow_errors)
            for _, path, nb in notebooks]  # fmt: skip
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=n_jobs, mp_context=context) as pool:
        for (docname, path, _), (executed, seconds, error) in zip(
            notebooks, pool.map(_execute, work), strict=True
        ):
            if error is not None:
                LOGGER.info(f"{docname}: execution failed; myst-nb executes it again while reading it")
                continue
            cache.cache_notebook_bundle(
                CacheBundleIn(executed, str(path), data={"execution_seconds": seconds}),
                check_validity=False,
                overwrite=True,
            )
            LOGGER.info(f"{docname}: executed in {seconds:.1f} s")
    LOGGER.info(SUMMARY.format(count=len(notebooks), seconds=time.monotonic() - started, jobs=n_jobs))


def setup(app):
    app.connect("env-before-read-docs", execute_before_reading)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
