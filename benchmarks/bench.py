# ruff: noqa: E501  (the report below is long Markdown lines built from f-strings)
"""Benchmarks of the book's library against straightforward baselines, measured side by side.

Run from the repository root (``make bench``)::

    python -m benchmarks [--quick] [--book] [--build] [--out benchmarks/RESULTS.md]

Each benchmark times the library and its baseline in the same process, alternating them, and
reports ratios; absolute times are printed only for context (the machine may be shared).

* ``bench_state_evolution``: Part II's solver (:func:`attnlab.theory.phase_transition.solve`)
  against :mod:`benchmarks.se_baseline` (the authors' algorithm: one scipy BFGS per node), at the
  same quadrature and at equal or better accuracy against a converged reference solution.
* ``bench_phase_diagram``: the paper-scale 20×20 (α, ω) grid ``pt_phase_diagram`` on 2 workers.
* ``bench_thresholds``: ``alpha_c`` and ``alpha_l`` at one ω against the plain root finder (the
  same scan and Brent's method, every α solved cold on the full rule), alternately.
* ``bench_transition_lines``: the whole α_c(ω), α_l(ω) curve at 20 values of ω on 2 workers.
* ``bench_prox``: the compiled prox against numpy's (the same algorithm), alternately.
* ``bench_icl``: Part III's trainer (:func:`attnlab.icl_training.train_icl`) against the naive
  token-form loop of :mod:`benchmarks.icl_reference` (one model, autograd, ``torch.optim.Adam``)
  at the same thread count, with fresh data and on a fixed batch; many models in one call against
  one at a time; its FLOP/s against a float32 matmul peak measured in the same run.
* ``bench_book`` (``--book``): execution time of every chapter (jupytext + nbclient) and the total.
* ``bench_build`` (``--build``): the two commands of a fresh clone, timed as a reader runs them:
  ``make book`` (its cold execution of every chapter, as the build logs it, and its wall time)
  and ``make test`` (wall time). Targets (issue 35): execution ≤ 5 min, ``make test`` ≤ 12 min.

The README's table is this run's; a benchmark not run in this invocation keeps the row of the
last run that measured it (``RESULTS.json``), so that ``--only build`` does not drop the others.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "RESULTS.md"


def _timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - t0, out


def _rel(a, b):
    return abs(a - b) / abs(b)


# ------------------------------------------------------------------------------------------------
# Part II: the state-evolution solver.
# ------------------------------------------------------------------------------------------------


def bench_state_evolution(
    *,
    alpha=2.0,
    omega=0.3,
    branch="semantic",
    n_nodes=4,
    ref_nodes=16,
    candidates=(4, 6, 8, 10, 12),
    repeats=3,
    baseline_max_iter=300,
) -> dict:
    """Solver vs the BFGS-per-node baseline at (α, ω): times, errors against a converged reference."""
    from attnlab.theory import phase_transition as se
    from benchmarks.se_baseline import solve_baseline

    ref = se.solve(alpha, omega, branch, n_nodes=ref_nodes, tol=1e-9)

    def errors(eps_g, eps_t):
        return max(_rel(eps_g, ref.eps_g), _rel(eps_t, ref.eps_t))

    t_base, base = _timed(
        solve_baseline, alpha, omega, se.STARTS[branch], n_nodes=n_nodes, max_iter=baseline_max_iter
    )
    err_base = errors(base["eps_g"], base["eps_t"])
    rows = []
    chosen = None
    for k in sorted(set((n_nodes, *candidates))):
        times = []
        for _ in range(repeats):
            t, fp = _timed(se.solve, alpha, omega, branch, n_nodes=k)
            times.append(t)
        t = statistics.median(times)
        err = errors(fp.eps_g, fp.eps_t)
        rows.append(
            {
                "n_nodes": k,
                "time": t,
                "error": err,
                "eps_g": fp.eps_g,
                "eps_t": fp.eps_t,
                "iterations": fp.iterations,
                "converged": fp.converged,
            }
        )
        if chosen is None and err <= err_base:
            chosen = rows[-1]
    same = next(r for r in rows if r["n_nodes"] == n_nodes)
    return {
        "alpha": alpha,
        "omega": omega,
        "branch": branch,
        "n_nodes": n_nodes,
        "ref_nodes": ref_nodes,
        "ref": {"eps_g": ref.eps_g, "eps_t": ref.eps_t},
        "baseline": {**base, "time": t_base, "error": err_base},
        "solver": rows,
        "same_quadrature": same,
        "equal_accuracy": chosen,
        "speedup_same_quadrature": t_base / same["time"],
        "speedup_equal_accuracy": t_base / chosen["time"] if chosen else float("nan"),
    }


def bench_phase_diagram(*, n_alpha=20, n_omega=20, n_jobs=2) -> dict:
    """Time the paper-scale ``pt_phase_diagram`` grid (no cache), on ``n_jobs`` workers."""
    from attnlab import experiments as ex

    exp = ex.get("pt_phase_diagram")
    config = exp.config("paper", {"n_alpha": n_alpha, "n_omega": n_omega, "n_jobs": n_jobs})
    t, rows = _timed(exp.fn, config, "cpu")
    conv = [r[f"converged_{b}"] for r in rows for b in ("semantic", "positional")]
    return {
        "n_alpha": n_alpha,
        "n_omega": n_omega,
        "n_jobs": n_jobs,
        "n_nodes": config["n_nodes"],
        "tol": config["tol"],
        "time": t,
        "points": len(rows),
        "converged": float(np.mean(conv)),
    }


def bench_thresholds(*, omega=0.3, n_nodes=20, repeats=1) -> dict:
    """Time ``alpha_c`` and ``alpha_l`` at ``omega`` against the plain root finder, alternately.

    The baseline is what the library did before warm starts: the same scan (4 points on
    (0.1, 3.0)) and Brent's method to 1e-4, every α solved cold on ``n_nodes`` from the branch's
    starting point. Reports the medians and both roots.
    """
    from attnlab.theory import phase_transition as se
    from attnlab.theory.phase_transition import thresholds as th

    ref = se.eps_lin(omega)

    def plain_c():
        def gap(a):
            sem = se.solve(a, omega, "semantic", n_nodes=n_nodes)
            return sem.eps_t - se.solve(a, omega, "positional", n_nodes=n_nodes).eps_t

        return th._bracket_root(gap, 0.1, 3.0, 4, 1e-4)

    def plain_l():
        return th._bracket_root(
            lambda a: se.solve(a, omega, "semantic", n_nodes=n_nodes).eps_g - ref, 0.1, 3.0, 4, 1e-4
        )

    codes = {
        "alpha_c": (lambda: se.alpha_c(omega, n_nodes=n_nodes), plain_c),
        "alpha_l": (lambda: se.alpha_l(omega, n_nodes=n_nodes), plain_l),
    }
    out = {"omega": omega, "n_nodes": n_nodes, "repeats": repeats}
    for name, (lib, plain) in codes.items():
        times = {"library": [], "plain": []}
        for _ in range(repeats):
            t, root = _timed(lib)
            times["library"].append(t)
            t, plain_root = _timed(plain)
            times["plain"].append(t)
        lib_t, plain_t = statistics.median(times["library"]), statistics.median(times["plain"])
        out[name] = {
            "time": lib_t,
            "plain_time": plain_t,
            "speedup": plain_t / lib_t,
            "root": root,
            "plain_root": plain_root,
        }
    return out


def _line_point(omega, which, n_nodes, bracket, n_grid, xtol):
    from attnlab.theory import phase_transition as se

    t0 = time.process_time()
    root = (se.alpha_c if which == "alpha_c" else se.alpha_l)(
        omega, n_nodes=n_nodes, bracket=bracket, n_grid=n_grid, xtol=xtol
    )
    return {"omega": omega, "name": which, "root": root, "cpu": time.process_time() - t0}


def bench_transition_lines(*, n_omega=20, omega_max=0.475, n_nodes=20, n_jobs=2) -> dict:
    """Wall time of the whole α_c(ω), α_l(ω) curve: both thresholds at ``n_omega`` values of ω on
    [0, ``omega_max``], ``n_nodes`` nodes, one job per threshold on ``n_jobs`` workers (the bracket,
    scan and tolerance of ``pt_transition_lines`` at paper scale), small ω (the slowest) first."""
    from attnlab.experiments import sweep

    args = {"n_nodes": n_nodes, "bracket": (0.2, 2.5), "n_grid": 6, "xtol": 1e-4}
    jobs = [
        {"omega": float(w), "which": k, **args}
        for w in np.linspace(0, omega_max, n_omega)
        for k in ("alpha_c", "alpha_l")
    ]
    t, points = _timed(sweep, _line_point, jobs, n_jobs=n_jobs)
    return {"n_omega": n_omega, "n_nodes": n_nodes, "n_jobs": n_jobs, "time": t, "points": points, **args}


def bench_prox(*, n_nodes=(8, 20), repeats=5) -> dict:
    """The compiled prox against numpy's (the same algorithm), alternately, on the nodes of one
    solve: the semantic fixed point at α = 2, ω = 0.3, from the starts of a fresh iteration
    (u, -u and the previous solution). Medians, and the largest difference of the minima."""
    import importlib

    from attnlab.theory import phase_transition as se
    from attnlab.theory.phase_transition.equations import _Problem

    P = importlib.import_module("attnlab.theory.phase_transition.prox")
    out = {"kernel": P._kernel() is not None, "rows": []}
    if not out["kernel"]:
        return out
    for n in n_nodes:
        fp = se.solve(2.0, 0.3, "semantic", n_nodes=n)
        prob = _Problem(2.0, 0.3, 0.5, 0.01, P.DEFAULT_A, n, 1e-10, "semantic")
        prob.hats(fp.q, fp.m, fp.V, fp.theta, all_starts=True)
        u1, u2, hs1, hs2, _ = prob.fields(fp.q, fp.m, fp.theta)
        T = P._target(hs1, hs2, 0.3, P.DEFAULT_A)
        starts = [(u1, u2), (-u1, -u2), (prob.h[0], prob.h[1])]
        codes = {"kernel": P._prox_batch, "numpy": P._prox_batch_numpy}
        times, minima = {name: [] for name in codes}, {}
        for _ in range(repeats):
            for name, fn in codes.items():
                t, (*_, minima[name]) = _timed(fn, u1, u2, fp.V, T, prob.s2, starts)
                times[name].append(t)
        k, npy = statistics.median(times["kernel"]), statistics.median(times["numpy"])
        diff = float(np.max(np.abs(minima["kernel"] - minima["numpy"])))
        out["rows"].append({"n_nodes": n, "points": int(u1.size), "kernel": k, "numpy": npy, "speedup": npy / k,
                            "max_diff": diff})  # fmt: skip
    return out


# ------------------------------------------------------------------------------------------------
# Part III: the batched trainer.
# ------------------------------------------------------------------------------------------------


def flops_trainer(param: str, L: int, H: int, B: int, d: int, n: int) -> float:
    """Useful FLOPs of one training step of one model in the trainer (multiply-add = 2 FLOPs).

    Counted from :mod:`attnlab.models.gram_backward` with ``D = d+1`` (the padding to ``D+1``
    that the code runs is not counted): the context Gram matrix ``EᵀE`` (2·B·n·D²); forward per
    layer ``T G Tᵀ`` (4·B·D³, not after the last layer), ``T e`` (2·B·D²), FULL's
    ``Σ_k P_k G Q_k`` (4·B·D³ per head); backward ``S T G`` (2·B·D³, not for the last layer),
    ``Tᵀ S T`` (4·B·D³, not for the first and last layers), FULL's weight gradients (8·B·D³ per
    head) and ``Pᵀ T̄ Qᵀ`` (2·B·D³ per head, not for the first layer).
    """
    D = d + 1
    c = B * D**3
    total = 2 * B * n * D**2 + L * 2 * B * D**2 + (L - 1) * (4 * c + 2 * c) + max(L - 2, 0) * 4 * c
    if param == "full":
        total += H * (L * (4 * c + 8 * c) + (L - 1) * 2 * c)
    return float(total)


def flops_tokens(param: str, L: int, H: int, B: int, d: int, n: int) -> float:
    """FLOPs of one forward pass of the token form (same conventions; a step is about 3×)."""
    D, N = d + 1, n + 1
    per_layer = 2 * B * D * N * N + 2 * B * D * D * N  # Z M, (Z M) Zᵀ
    per_layer += H * (2 * B * D**3 + 2 * B * D**3 + 2 * B * D * D * N + B * D * N)  # P S, ·Q, ·Z, +
    return L * (per_layer + B * D * N)


def _cpu_timed(fn, *args):
    """``(wall seconds, CPU seconds of this process)`` of ``fn(*args)``."""
    w0, c0 = time.perf_counter(), time.process_time()
    fn(*args)
    return time.perf_counter() - w0, time.process_time() - c0


def matmul_peak(n: int = 1024, threads: int | None = None, repeats: int = 5, clock: str = "wall") -> float:
    """Best float32 FLOP/s of an n×n matmul with ``threads`` torch threads (None: the default).

    ``clock="cpu"`` times by the process's CPU time (one thread on a shared machine)."""
    prev = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        a, b = torch.randn(n, n), torch.randn(n, n)
        a @ b
        best = min(_cpu_timed(torch.matmul, a, b)[clock == "cpu"] for _ in range(repeats))
    finally:
        torch.set_num_threads(prev)
    return 2 * n**3 / best


def small_matmul_rate(B: int = 2048, D: int = 12, repeats: int = 20, clock: str = "wall") -> float:
    """Best float32 FLOP/s of ``B`` independent ``D × D`` products in one ``torch.bmm`` (current threads).

    The trainer's per-sequence products (``T X Tᵀ`` and its backward) are of this kind: their rate,
    not the large-matmul peak, bounds the trainer."""
    a, b = torch.randn(B, D, D), torch.randn(B, D, D)
    torch.bmm(a, b)
    best = min(_cpu_timed(torch.bmm, a, b)[clock == "cpu"] for _ in range(repeats))
    return 2 * B * D**3 / best


def kernel_build_time(d: int) -> float | None:
    """Seconds to build the float32 Gram kernel for ``d`` from scratch (an empty cache), or ``None``."""
    import tempfile

    from attnlab.models import gram_kernel

    previous = os.environ.get("ATTNLAB_CACHE")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["ATTNLAB_CACHE"] = tmp
        gram_kernel._library.cache_clear()
        t0 = time.perf_counter()
        built = gram_kernel.available(torch.float32, d)
        seconds = time.perf_counter() - t0
    if previous is None:
        del os.environ["ATTNLAB_CACHE"]
    else:
        os.environ["ATTNLAB_CACHE"] = previous
    gram_kernel._library.cache_clear()  # the next use loads the cached library again
    return seconds if built else None


def _trainer_fixed(param, n_layers, batch, steps):
    """The trainer's step (Gram form, hand-written backward, the library's loop and Adam) on one fixed batch."""
    from torch import nn

    from attnlab import icl_training as it
    from attnlab.models import LinearTransformer
    from attnlab.train import train

    d = batch[0].shape[-1]
    models = nn.ModuleDict({"m": LinearTransformer(d, n_layers, 1, param, batch_shape=(1, 1))})
    data = tuple(t[None, None] for t in batch)  # one "sample": the whole batch at every step
    train(models, it._group_losses, data, optimizer="adam", lr=1e-4, betas=(0.9, 0.98), steps=steps,
          record_every=steps, record="mean")  # fmt: skip


def bench_icl(
    *, params=("diag", "full"), n_layers=7, batch_size=2048, d=10, n=20, steps=10, repeats=3,
    batched_models=10, threads=1,
) -> dict:  # fmt: skip
    """Seconds per step of the trainer and of the naive token-form loop, at the same thread count.

    Codes (each timed ``repeats`` times, interleaved, median; the spread is (max - min) / median):
    ``trainer`` (:func:`attnlab.icl_training.train_icl`, one model), ``naive`` (one
    ``LinearTransformer`` through its token form, autograd, ``torch.optim.Adam``:
    :func:`benchmarks.icl_reference.train_naive`) and ``reference`` (the per-head token form of
    :func:`benchmarks.icl_reference.train_reference`), each with fresh data every step
    (``_fresh``: sampling included) and on a fixed batch (``_fixed``); ``batched``: ``train_icl``
    with ``batched_models`` models (noise settings) in one call, seconds per model-step. Every
    code runs with ``threads`` torch threads; the float32 matmul peak is measured at that count.
    With one thread, times are the process's CPU time (``clock="cpu"``: on a shared, loaded machine
    wall time mostly measures waiting for a core; wall times are kept in ``wall_s_per_step``).
    """
    from attnlab import icl_training as it
    from benchmarks.icl_reference import sample, train_naive, train_reference

    noise_many = [f"uniform:{k % 8}" for k in range(batched_models)]
    common = {"d": d, "n": n, "batch_size": batch_size, "record_every": steps, "num_threads": threads}
    out = {
        "n_layers": n_layers, "batch_size": batch_size, "d": d, "n": n, "steps": steps, "repeats": repeats,
        "batched_models": batched_models, "threads": threads, "params": {},
        "clock": "cpu" if threads == 1 else "wall",
    }  # fmt: skip
    out["kernel_build_s"] = kernel_build_time(d)
    with it.num_threads_scope(threads):
        out["peak"] = matmul_peak(threads=threads, clock=out["clock"])
        out["small_matmul"] = small_matmul_rate(batch_size, d + 2, clock=out["clock"])
        for p in params:
            batch = sample(batch_size, d, n, 1.0, torch.Generator().manual_seed(1))
            codes = {
                "trainer_fresh": lambda k, p=p: it.train_icl([p], [n_layers], ["uniform:1"], [0], steps=k, **common),
                "trainer_fixed": lambda k, p=p, b=batch: _trainer_fixed(p, n_layers, b, k),
                "naive_fresh": lambda k, p=p: train_naive(p, n_layers, d=d, n=n, steps=k, batch_size=batch_size),
                "naive_fixed": lambda k, p=p, b=batch: train_naive(p, n_layers, d=d, n=n, steps=k, batch=b),
                "reference_fresh": lambda k, p=p: train_reference(p, n_layers, d=d, n=n, steps=k, batch_size=batch_size),
                "batched_fresh": lambda k, p=p: it.train_icl([p], [n_layers], noise_many, [0], steps=k, **common),
            }  # fmt: skip
            for fn in codes.values():  # warm-up: first calls allocate and dispatch
                fn(1)
            times, walls = {k: [] for k in codes}, {k: [] for k in codes}
            for _ in range(repeats):
                for name, fn in codes.items():
                    wall, cpu = _cpu_timed(fn, steps)
                    per = steps * (batched_models if name == "batched_fresh" else 1)
                    times[name].append((cpu if out["clock"] == "cpu" else wall) / per)
                    walls[name].append(wall / per)
            med = {k: statistics.median(v) for k, v in times.items()}
            f_lib = flops_trainer(p, n_layers, 1, batch_size, d, n)
            f_tok = 3 * flops_tokens(p, n_layers, 1, batch_size, d, n)
            out["params"][p] = {
                "s_per_step": med,
                "wall_s_per_step": {k: statistics.median(v) for k, v in walls.items()},
                "spread": {k: (max(v) - min(v)) / med[k] for k, v in times.items()},
                "speedup_fresh": med["naive_fresh"] / med["trainer_fresh"],
                "speedup_fixed": med["naive_fixed"] / med["trainer_fixed"],
                "speedup_vs_reference": med["reference_fresh"] / med["trainer_fresh"],
                "batched_vs_one_at_a_time": med["trainer_fresh"] / med["batched_fresh"],
                "flops_per_step_trainer": f_lib,
                "flops_per_step_naive": f_tok,
                "trainer_flops_s_fixed": f_lib / med["trainer_fixed"],
                "trainer_flops_s_fresh": f_lib / med["trainer_fresh"],
                "batched_flops_s": f_lib / med["batched_fresh"],
                "naive_flops_s_fixed": f_tok / med["naive_fixed"],
            }
    return out


# ------------------------------------------------------------------------------------------------
# The whole book.
# ------------------------------------------------------------------------------------------------


def chapters(book: Path = ROOT / "book") -> list[Path]:
    """Every chapter, without JupyterLab's ``.ipynb_checkpoints`` copies (or any hidden folder)."""
    return sorted(
        p for p in book.rglob("*.md") if not any(part.startswith(".") for part in p.relative_to(book).parts)
    )


def bench_book(paths=None, timeout: int = 1200) -> dict:
    """Execute every chapter (jupytext → nbclient, working directory = the chapter's folder)."""
    import tempfile

    rows = []
    # Start from an empty experiment cache, as `make test` does, so that nothing is loaded from a
    # previous run; the kernels inherit the environment.
    previous = os.environ.get("ATTNLAB_CACHE")
    cache = tempfile.TemporaryDirectory(prefix="attnlab-bench-cache-")
    os.environ["ATTNLAB_CACHE"] = cache.name
    try:
        rows = _execute_chapters(paths, timeout)
    finally:
        if previous is None:
            os.environ.pop("ATTNLAB_CACHE", None)
        else:
            os.environ["ATTNLAB_CACHE"] = previous
        cache.cleanup()
    total = sum(r["time"] for r in rows)
    return {"chapters": rows, "total": total, "within_10_min": total <= 600}


def _execute_chapters(paths, timeout):
    import jupytext
    from nbclient import NotebookClient

    rows = []
    for path in [Path(p) for p in paths] if paths is not None else chapters():
        nb = jupytext.read(path)
        if not any(c.cell_type == "code" for c in nb.cells):
            continue
        client = NotebookClient(
            nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
        )
        t0 = time.perf_counter()
        try:
            client.execute()
            ok = True
        except Exception as err:  # report, do not stop the other chapters
            ok = False
            print(f"{path}: {type(err).__name__}: {str(err)[:200]}", file=sys.stderr)
        name = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
        rows.append({"chapter": name, "time": time.perf_counter() - t0, "ok": ok})
    return rows


#: Issue 35's targets: every chapter executed cold by ``make book``, and ``make test``, in seconds.
BOOK_EXECUTION_TARGET_S = 300
MAKE_TEST_TARGET_S = 720

#: The line the book build logs once every chapter has run (``_ext/parallel_execution.py``).
_EXECUTED = re.compile(r"executed (\d+) notebooks in ([\d.]+) s on (\d+) processes")


def run_make(target: str) -> tuple[int, str]:
    """``make -o .venv/.installed TARGET`` in the repository; returns its exit status and output."""
    done = subprocess.run(
        ["make", "--no-print-directory", "-o", ".venv/.installed", target],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    return done.returncode, done.stdout


def bench_build(runner=run_make, clock=time.monotonic) -> dict:
    """Time ``make book`` and ``make test`` as run from the repository (``runner(target)``).

    ``make book`` removes the previous build and executes every chapter cold; its execution time
    is the one the build logs (:data:`_EXECUTED`), its wall time includes Sphinx's reading and
    writing. A command that fails is reported as failed, with its time.
    """
    out = {}
    for target in ("book", "test"):
        started = clock()
        status, log = runner(target)
        elapsed = clock() - started
        row = {"wall": elapsed, "ok": status == 0}
        if status != 0:
            print(f"make {target} failed ({status}):\n{log[-2000:]}", file=sys.stderr)
        if target == "book":
            found = _EXECUTED.findall(log)
            if not found:
                raise RuntimeError(
                    "make book did not log its execution time: is _ext/parallel_execution.py used?"
                )
            count, seconds, jobs = found[-1]
            row |= {"execution": float(seconds), "notebooks": int(count), "jobs": int(jobs)}
        out[target] = row
    return out


def build_rows(build_res) -> list[str]:
    """The summary table's rows for :func:`bench_build`'s result."""
    if not build_res:
        return []
    book, test = build_res["book"], build_res["test"]

    def failed(row):
        return "" if row["ok"] else " (FAILED)"

    return [
        f"| `make book`: {book['notebooks']} chapters executed cold, {book['jobs']} processes | (absolute) "
        f"| {book['execution']:.0f} s{failed(book)} (whole build {book['wall']:.0f} s) | ≤ {BOOK_EXECUTION_TARGET_S} s |",
        f"| `make test`, every check | (absolute) | {test['wall']:.0f} s{failed(test)} | ≤ {MAKE_TEST_TARGET_S} s |",
    ]


# ------------------------------------------------------------------------------------------------
# Report.
# ------------------------------------------------------------------------------------------------


def _g(x, fmt=".3g"):
    return format(x, fmt)


def summary_table(se_res, pd_res, icl_res, th_res=None, build_res=None) -> str:
    lines = ["| Benchmark | Baseline | Ratio (measured side by side) | Target |", "|---|---|---|---|"]
    lines += build_rows(build_res)
    if se_res:
        eq = se_res["equal_accuracy"]
        lines.append(
            f"| Part II solver, same quadrature ({se_res['n_nodes']}⁴ nodes) | authors' algorithm (BFGS per node) "
            f"| **{se_res['speedup_same_quadrature']:.0f}×** faster | ≥ 50× |"
        )
        if eq:
            lines.append(
                f"| Part II solver, equal or better accuracy ({eq['n_nodes']}⁴ vs {se_res['n_nodes']}⁴ nodes) "
                f"| same | **{se_res['speedup_equal_accuracy']:.0f}×** faster | ≥ 50× |"
            )
    if pd_res:
        lines.append(
            f"| Part II {pd_res['n_alpha']}×{pd_res['n_omega']} phase diagram, {pd_res['n_jobs']} workers "
            f"| (absolute) | {pd_res['time']:.0f} s | ≤ 60 s |"
        )
    if th_res:
        for name in ("alpha_c", "alpha_l"):
            r = th_res[name]
            lines.append(
                f"| Part II `{name}({th_res['omega']})`, {th_res['n_nodes']}⁴ nodes, one process "
                f"| same root finder, every α solved cold | **{r['speedup']:.1f}×** ({r['time']:.1f} s) | ≤ 10 s |"
            )
        lines_res = th_res.get("lines")
        if lines_res:
            lines.append(
                f"| Part II α_c(ω), α_l(ω) at {lines_res['n_omega']} ω, {lines_res['n_nodes']}⁴ nodes, "
                f"{lines_res['n_jobs']} workers | (absolute) | {lines_res['time']:.0f} s | ≤ 120 s |"
            )
        for r in (th_res.get("prox") or {}).get("rows", []):
            lines.append(
                f"| Part II prox, compiled kernel, the {r['points']} nodes of one {r['n_nodes']}⁴ solve "
                f"| the same algorithm in numpy | **{r['speedup']:.1f}×** | (none) |"
            )
    if icl_res:
        for p, r in icl_res["params"].items():
            lines.append(
                f"| Part III trainer, {icl_res['n_layers']}-layer {p.upper()}, batch {icl_res['batch_size']}, "
                f"{icl_res['threads']} thread(s), fresh data | naive token-form loop (autograd, torch Adam), same threads "
                f"| **{r['speedup_fresh']:.1f}×** (fixed batch {r['speedup_fixed']:.1f}×) | ≥ 3× |"
            )
            lines.append(
                f"| Part III trainer, {icl_res['n_layers']}-layer {p.upper()}, fixed batch | float32 matmul peak, same run and threads "
                f"| **{100 * r['trainer_flops_s_fixed'] / icl_res['peak']:.0f}%** of peak | ≥ 25% |"
            )
            lines.append(
                f"| Part III trainer, {icl_res['n_layers']}-layer {p.upper()}, {icl_res['batched_models']} models in one call "
                f"| same trainer, one model at a time | **{r['batched_vs_one_at_a_time']:.2f}×** model-steps/s | > 1× |"
            )
    return "\n".join(lines)


def render(
    se_res,
    pd_res,
    icl_res,
    book_res,
    quick: bool,
    wall: float,
    load=None,
    th_res=None,
    build_res=None,
    carried=(),
) -> str:
    """The Markdown report; ``carried`` names the parts kept from an earlier run (not measured now)."""
    if load is None:
        load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    out = [
        "# Benchmark results",
        "",
        "Written by `make bench` (`python -m benchmarks"
        + (" --quick" if quick else "")
        + (" --book" if book_res and "book" not in carried else "")
        + (" --build" if build_res and "build" not in carried else "")
        + "`); do not edit by hand. The raw numbers are in `RESULTS.json` beside it.",
        "Every ratio compares two codes timed in the same run, alternately, on the same machine.",
        "",
        f"- Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"torch {torch.__version__} ({torch.get_num_threads()} threads by default); load average at the end "
        f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1 / 5 / 15 min). Absolute times on a shared machine are "
        "only indicative; the ratios are what the benchmarks measure.",
        "- No GPU was available: every number here is CPU-only. `--device cuda` paths are not benchmarked.",
        f"- Wall time of this run: {wall:.0f} s."
        + (
            f" Not measured in this run, kept from the last run that measured them: {', '.join(carried)}."
            if carried
            else ""
        ),
        "",
        "## Summary",
        "",
        summary_table(se_res, pd_res, icl_res, th_res, build_res),
        "",
    ]
    if se_res:
        b, ref = se_res["baseline"], se_res["ref"]
        out += [
            "## Part II: state-evolution solver",
            "",
            f"One fixed point (α = {se_res['alpha']}, ω = {se_res['omega']}, {se_res['branch']} branch, σ = 0.5, λ = 0.01). "
            f"**Accuracy** is the largest relative error of ε_g and ε_t against a reference solution "
            f"(the library's solver with {se_res['ref_nodes']}⁴ Gauss–Hermite nodes, tolerance 1e-9: "
            f"ε_g = {ref['eps_g']:.6g}, ε_t = {ref['eps_t']:.6g}). "
            "The baseline (`benchmarks/se_baseline.py`) is the authors' algorithm: a scipy BFGS per quadrature node "
            "started at 0, direct averages for the hats, damped iteration (0.8) to an absolute tolerance 1e-4 on "
            "(q, m, θ); it uses the solver's product rule and solves each node's prox once per iteration (the authors' "
            "notebook solves it once per hat, four times), both in its favour.",
            "",
            "| Code | Nodes | Time (s) | Iterations | ε_g | ε_t | Error vs reference |",
            "|---|---|---|---|---|---|---|",
            f"| baseline (BFGS per node) | {se_res['n_nodes']}⁴ | {b['time']:.2f} | {b['iterations']} | {b['eps_g']:.6g} "
            f"| {b['eps_t']:.6g} | {b['error']:.2e} |",
        ]
        for r in se_res["solver"]:
            out.append(
                f"| `phase_transition.solve` | {r['n_nodes']}⁴ | {r['time']:.3f} | {r['iterations']} | "
                f"{r['eps_g']:.6g} | {r['eps_t']:.6g} | {r['error']:.2e} |"
            )
        eq = se_res["equal_accuracy"]
        out += [
            "",
            f"Same quadrature: **{se_res['speedup_same_quadrature']:.0f}×**. "
            + (
                f"Equal or better accuracy (the fewest solver nodes whose error ≤ the baseline's "
                f"{b['error']:.1e}: {eq['n_nodes']}⁴, error {eq['error']:.1e}): "
                f"**{se_res['speedup_equal_accuracy']:.0f}×**."
                if eq
                else "No candidate node count reached the baseline's accuracy."
            ),
            "",
        ]
    if pd_res:
        out += [
            "## Part II: the 20×20 phase diagram",
            "",
            f"`pt_phase_diagram` at paper scale ({pd_res['n_alpha']} α × {pd_res['n_omega']} ω, both branches, "
            f"{pd_res['n_nodes']}⁴ nodes, tolerance {pd_res['tol']:g}, {pd_res['n_jobs']} joblib workers, no cache): "
            f"**{pd_res['time']:.1f} s** (target ≤ 60 s: {'met' if pd_res['time'] <= 60 else 'NOT met'} under "
            f"this load); {100 * pd_res['converged']:.1f}% of the {2 * pd_res['points']} fixed points converged.",
            "",
        ]
        one = next((r for r in (se_res or {}).get("solver", []) if r["n_nodes"] == pd_res["n_nodes"]), None)
        if one:
            cpu = 2 * pd_res["points"] * one["time"]
            out += [
                f"For scale: one {one['n_nodes']}⁴ solve took {one['time']:.2f} s in the Part II benchmark of this run, so "
                f"the grid's {2 * pd_res['points']} solves are about {cpu:.0f} CPU-seconds, about {cpu / pd_res['n_jobs']:.0f} s "
                f"on {pd_res['n_jobs']} idle cores (an estimate from this run, not a measurement of the grid).",
                "",
            ]
    if th_res:
        out += [
            "## Part II: the thresholds",
            "",
            f"`alpha_c` and `alpha_l` at ω = {th_res['omega']} on {th_res['n_nodes']}⁴ nodes (scan of 4 points on "
            "(0.1, 3.0), Brent's method to 1e-4), one process, against the plain root finder: the same scan and Brent's "
            "method with every α solved cold from the branch's starting point (the library before warm starts). "
            f"Median of {th_res['repeats']} alternated run(s).",
            "",
            "| Threshold | Library (s) | Plain (s) | Ratio | Root (library) | Root (plain) |",
            "|---|---|---|---|---|---|",
        ]
        for name in ("alpha_c", "alpha_l"):
            r = th_res[name]
            out.append(
                f"| `{name}` | {r['time']:.1f} | {r['plain_time']:.1f} | {r['speedup']:.1f}× | {r['root']:.6f} | {r['plain_root']:.6f} |"
            )
        out += [
            "",
        ]
        lines_res = th_res.get("lines")
        if lines_res:
            pts = lines_res["points"]
            slow = max(pts, key=lambda p: p["cpu"])
            out += [
                f"The whole α_c(ω), α_l(ω) curve: both thresholds at {lines_res['n_omega']} values of ω on "
                f"[0, {pts[-1]['omega']:.3g}], {lines_res['n_nodes']}⁴ nodes, bracket {tuple(lines_res['bracket'])} scanned on "
                f"{lines_res['n_grid']} points, tolerance {lines_res['xtol']:g}, one job per threshold on "
                f"{lines_res['n_jobs']} workers: **{lines_res['time']:.0f} s** (target ≤ 120 s: "
                f"{'met' if lines_res['time'] <= 120 else 'NOT met'} under this load); the slowest threshold "
                f"`{slow['name']}({slow['omega']:.3g})` took {slow['cpu']:.1f} CPU-seconds, the median "
                f"{statistics.median(p['cpu'] for p in pts):.1f} (nan: no root in the bracket).",
                "",
                "| ω | α_c | CPU (s) | α_l | CPU (s) |",
                "|---|---|---|---|---|",
            ]
            by = {(p["omega"], p["name"]): p for p in pts}
            for w in sorted({p["omega"] for p in pts}):
                c, lo = by[w, "alpha_c"], by[w, "alpha_l"]
                out.append(
                    f"| {w:.3f} | {c['root']:.5f} | {c['cpu']:.1f} | {lo['root']:.5f} | {lo['cpu']:.1f} |"
                )
            out.append("")
        prox_res = th_res.get("prox")
        if prox_res and prox_res["rows"]:
            out += [
                "The prox, compiled (`prox_kernel.c`) against the same algorithm in numpy, alternately, on the nodes of "
                "one solve (semantic fixed point at α = 2, ω = 0.3; the starts of a fresh iteration: u, -u and the "
                "previous solution); medians of the repeats:",
                "",
                "| Nodes | Points | Kernel (ms) | numpy (ms) | Ratio | Largest difference of the minima |",
                "|---|---|---|---|---|---|",
            ]
            for r in prox_res["rows"]:
                out.append(
                    f"| {r['n_nodes']}⁴ | {r['points']} | {1e3 * r['kernel']:.1f} | {1e3 * r['numpy']:.1f} "
                    f"| {r['speedup']:.1f}× | {r['max_diff']:.1e} |"
                )
            out.append("")
    if icl_res:
        out += [
            "## Part III: the trainer",
            "",
            f"Adam steps at batch {icl_res['batch_size']}, d = {icl_res['d']}, n = {icl_res['n']}, "
            f"{icl_res['n_layers']} layers, one head, float32, **every code on {icl_res['threads']} torch thread(s)**; "
            f"milliseconds ({'CPU time of the process' if icl_res.get('clock') == 'cpu' else 'wall time'}) per step, median of {icl_res['repeats']} interleaved runs of {icl_res['steps']} steps "
            "(spread (max - min) / median in brackets). Trainer: `attnlab.icl_training.train_icl` (Gram form with a "
            "hand-written backward pass in the compiled kernel `attnlab.models.gram_kernel`; the library's loop and "
            "Adam); fixed batch: the same "
            "step on one batch (no sampling). Naive: one `LinearTransformer` through its token form, autograd, "
            "`torch.optim.Adam` (`benchmarks/icl_reference.py: train_naive`); reference: the per-head token form "
            f"(`train_reference`). Batched: {icl_res['batched_models']} models (noise settings) in one `train_icl` call, "
            "per model-step.",
            "",
            "Useful FLOPs are counted analytically (`benchmarks/bench.py: flops_trainer`, `flops_tokens`; "
            "multiply-add = 2); the matmul peak is the best float32 1024×1024 matmul of this run at the same thread "
            f"count: {icl_res['peak'] / 1e9:.1f} GFLOP/s. The rate of one `torch.bmm` of {icl_res['batch_size']} "
            f"independent {icl_res['d'] + 2}×{icl_res['d'] + 2} products, the kind the trainer's per-sequence "
            f"products are, was {icl_res.get('small_matmul', float('nan')) / 1e9:.1f} GFLOP/s "
            f"({100 * icl_res.get('small_matmul', float('nan')) / icl_res['peak']:.0f}% of the peak). The kernel "
            "takes blocks of 8 sequences through every layer and back while they stay in the cache; for the "
            "training loss (`GramHalfMSE`) it does a block's forward and backward passes together, once; the "
            "weights' gradients are summed per lane and added up across the lanes once per model. It also "
            "computes the context Gram matrices `EᵀE` the Gram form starts from, 8 sequences at a time. "
            + (
                f"Building the kernel (the C compiler, once per dtype and d, then cached) took "
                f"{icl_res['kernel_build_s']:.1f} s in this run."
                if icl_res.get("kernel_build_s") is not None
                else "The kernel could not be built on this machine: the trainer ran the torch code."
            ),
            "",
            "| Model | Trainer fresh | Naive fresh | Ratio | Trainer fixed | Naive fixed | Ratio | Reference fresh (ratio) "
            "| Batched per model (vs one at a time) | Trainer GFLOP/s fixed (% of peak) |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for p, r in icl_res["params"].items():
            t, sp = r["s_per_step"], r["spread"]

            def ms(k, t=t, sp=sp):
                return f"{1e3 * t[k]:.1f} ({100 * sp[k]:.0f}%)"

            out.append(
                f"| {icl_res['n_layers']}-layer {p.upper()} | {ms('trainer_fresh')} | {ms('naive_fresh')} | "
                f"{r['speedup_fresh']:.1f}× | {ms('trainer_fixed')} | {ms('naive_fixed')} | {r['speedup_fixed']:.1f}× | "
                f"{ms('reference_fresh')} ({r['speedup_vs_reference']:.1f}×) | {ms('batched_fresh')} "
                f"({r['batched_vs_one_at_a_time']:.2f}×) | {r['trainer_flops_s_fixed'] / 1e9:.1f} "
                f"({100 * r['trainer_flops_s_fixed'] / icl_res['peak']:.0f}%) |"
            )
        out.append("")
    out += ["## The whole book", ""]
    if book_res:
        out += [
            "Every chapter executed with jupytext + nbclient (working directory: the chapter's folder), one after the other, from an empty experiment cache (as `make test` does).",
            "",
            "| Chapter | Time (s) | Ran |",
            "|---|---|---|",
        ]
        out += [
            f"| `{r['chapter']}` | {r['time']:.1f} | {'yes' if r['ok'] else 'FAILED'} |"
            for r in book_res["chapters"]
        ]
        out += [
            f"| **Total** | **{book_res['total']:.0f}** | within 10 minutes: "
            f"**{'yes' if book_res['within_10_min'] else 'no'}** |",
            "",
        ]
    else:
        out += [
            "Not run in this invocation (pass `--book`: it executes every chapter, about ten minutes).",
            "",
        ]
    out += [
        "## Paper-scale Part III table: one command",
        "",
        "```bash",
        "python -m attnlab.experiments run icl_mixed_noise --scale paper [--device cuda] --out DIR",
        "```",
        "",
        "`train_icl` trains every (parameterization, depth) × noise setting × seed of the table in one batched "
        "loop. The `paper` configuration is the reduced CPU run the book's chapters show; the paper's "
        "optimisation (200k Adam steps at batch 2048, lr 1e-4, 5 seeds) is "
        "`--set steps=200000 --set batch_size=2048 --set lr=0.0001 --set lr_schedule=constant --set n_seeds=5`, "
        "meant for `--device cuda`. No GPU was available to this benchmark, so no GPU number is reported.",
        "",
        "The `--device cuda` path was checked by reading the code only: training (parameters, data generators, "
        "Adam) runs on the device; the trained models are evaluated in float64 on the CPU (`icl_training.evaluate` "
        "moves them there, and kept weights are copied to the CPU). `icl_baselines` and `icl_decay` run on the CPU "
        "whatever `--device` says.",
        "",
    ]
    return "\n".join(out + cpu_table_time())


def cpu_table_time() -> list[str]:
    """The report's lines on the committed CPU-scale Table 1 run: its wall time (recorded in its JSON
    when it ran, not measured by this benchmark) against the 4-hour target of issue 13."""
    from attnlab.experiments import load_result
    from attnlab.experiments.in_context import per_model

    res = load_result("icl_mixed_noise", "cpu")
    t, cfg = res.meta["timing"], res.config
    n = sum(1 for r in res.rows if r["kind"] == "table")
    steps = cfg["steps"]
    if isinstance(steps, dict):  # steps per model: name the models that differ from the most common
        per = {(p, L): int(per_model(steps, p, L)) for p, Ls in cfg["depths"].items() for L in Ls}
        common = max(set(per.values()), key=list(per.values()).count)
        other = ", ".join(f"{v} for {p} {L}L" for (p, L), v in per.items() if v != common)
        steps_text = f"{common} steps ({other})"
    else:
        steps_text = f"{steps} steps"
    schedule = cfg["lr_schedule"]
    if isinstance(schedule, dict):  # a schedule per model: name the models that differ as above
        per = {(p, L): per_model(schedule, p, L) for p, Ls in cfg["depths"].items() for L in Ls}
        common = max(set(per.values()), key=list(per.values()).count)
        other = ", ".join(f"{v} for {p} {L}L" for (p, L), v in per.items() if v != common)
        steps_text += f", learning-rate schedule {common} ({other})"
    else:
        steps_text += f", learning-rate schedule {schedule}"
    runs = t.get("parts", [t]) if not t.get("parallel") else [t]

    def how(run: dict) -> str:
        name = f"`{run['run']}` " if "run" in run else ""
        return f"{name}{run['wall_s'] / 3600:.2f} h"

    return [
        "## CPU-scale Part III table (committed run)",
        "",
        f"`icl_mixed_noise --scale cpu`: {n} trained models ({cfg['n_seeds']} seeds, {steps_text} at "
        f"batch {cfg['batch_size']}; the time includes the re-runs of failed models). "
        + (
            res.meta["note"][0].upper() + res.meta["note"][1:] + ". "
            if "spliced" in res.meta.get("note", "")
            else ""
        )
        + f"Runs one after another ({'; '.join(how(r) for r in runs)}), each in processes side by side on "
        f"a 2-core machine: **{t['wall_s'] / 3600:.2f} h** of wall time "
        f"({t['cpu_s'] / 3600:.2f} h of CPU time), against a target of at most 4 h on 2 cores "
        f"(met: **{'yes' if t['wall_s'] <= 4 * 3600 else 'no'}**). Recorded in the result's JSON when it ran, "
        "not re-measured here. The commands:",
        "",
        "```bash",
        *res.meta["commands"],
        "```",
        "",
    ]


#: The parts of a run's JSON that make up the README's table, in :func:`summary_table`'s order.
TABLE_PARTS = ("state_evolution", "phase_diagram", "icl", "thresholds", "build")


def with_last_measured(raw: dict, previous: dict, keys: bool = False):
    """The table's parts of ``raw``, each one not measured in this run taken from ``previous``.

    Returns the parts in :data:`TABLE_PARTS` order, or (``keys=True``) ``raw`` with them filled in.
    """
    filled = {k: raw.get(k) if raw.get(k) is not None else previous.get(k) for k in TABLE_PARTS}
    return {**raw, **filled} if keys else [filled[k] for k in TABLE_PARTS]


def update_readme(table: str, readme: Path = ROOT / "README.md") -> bool:
    """Replace the block between the benchmark markers in the README with ``table``."""
    start, end = "<!-- bench:start -->", "<!-- bench:end -->"
    text = readme.read_text()
    if start not in text or end not in text:
        return False
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    readme.write_text(f"{head}{start}\n{table}\n{end}{tail}")
    return True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smallest configurations (smoke test, seconds)")
    parser.add_argument("--book", action="store_true", help="also execute every chapter (about ten minutes)")
    parser.add_argument(
        "--build", action="store_true", help="also time `make book` and `make test` (about twenty minutes)"
    )
    parser.add_argument(
        "--only",
        choices=["se", "phase", "thresholds", "icl", "book", "build"],
        action="append",
        help="run only these",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="Markdown results file (default benchmarks/RESULTS.md; with --quick _build/benchmarks/RESULTS-quick.md)",
    )
    parser.add_argument("--render", metavar="JSON", help="only rewrite the report from a run's JSON")
    args = parser.parse_args(argv)
    if args.out is None:  # a quick run never overwrites the committed results
        args.out = str(ROOT / "_build" / "benchmarks" / "RESULTS-quick.md") if args.quick else str(RESULTS)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    if args.render:
        raw = json.loads(Path(args.render).read_text())
        parts = [raw[k] for k in ("state_evolution", "phase_diagram", "icl", "book")]
        th_res, build_res = raw.get("thresholds"), raw.get("build")
        carried = raw.get("carried_over", [])
        text = render(*parts, raw["quick"], raw["wall"], raw["load"], th_res, build_res, carried=carried)
        Path(args.out).write_text(text)
        if not raw["quick"] and args.out == str(RESULTS):
            update_readme(summary_table(*parts[:3], th_res, build_res))
        print(f"wrote {args.out}")
        return 0
    extra = (["book"] if args.book else []) + (["build"] if args.build else [])
    which = set(args.only or ["se", "phase", "thresholds", "icl"] + extra)
    t0 = time.perf_counter()
    q = args.quick
    se_res = pd_res = th_res = icl_res = book_res = build_res = None
    if "se" in which:
        se_res = (
            bench_state_evolution(n_nodes=2, ref_nodes=8, candidates=(2, 4), repeats=1, baseline_max_iter=5)
            if q
            else bench_state_evolution()
        )
        print(
            f"Part II solver: {se_res['speedup_same_quadrature']:.0f}x (same quadrature), "
            f"{se_res['speedup_equal_accuracy']:.0f}x (equal accuracy)",
            flush=True,
        )
    if "phase" in which:
        pd_res = bench_phase_diagram(n_alpha=3, n_omega=2) if q else bench_phase_diagram()
        print(f"Phase diagram {pd_res['n_alpha']}x{pd_res['n_omega']}: {pd_res['time']:.1f} s", flush=True)
    if "thresholds" in which:
        th_res = bench_thresholds(n_nodes=6) if q else bench_thresholds()
        th_res["prox"] = bench_prox(n_nodes=(4,), repeats=1) if q else bench_prox()
        th_res["lines"] = bench_transition_lines(n_omega=2, n_nodes=6) if q else bench_transition_lines()
        print(
            f"alpha_c, alpha_l at {th_res['lines']['n_omega']} omegas: {th_res['lines']['time']:.1f} s",
            flush=True,
        )
        for name in ("alpha_c", "alpha_l"):
            r = th_res[name]
            print(
                f"{name}({th_res['omega']}): {r['time']:.1f} s, {r['speedup']:.1f}x the plain root finder",
                flush=True,
            )
    if "icl" in which:
        icl_res = (
            bench_icl(n_layers=2, batch_size=64, steps=2, repeats=1, batched_models=2) if q else bench_icl()
        )
        for p, r in icl_res["params"].items():
            print(
                f"Part III {p}: {r['speedup_fresh']:.1f}x naive (fresh data), {r['speedup_fixed']:.1f}x (fixed batch), "
                f"{100 * r['trainer_flops_s_fixed'] / icl_res['peak']:.0f}% of peak, batched "
                f"{r['batched_vs_one_at_a_time']:.2f}x one at a time",
                flush=True,
            )
    if "book" in which:
        book_res = bench_book()
        print(f"Book: {book_res['total']:.0f} s (within 10 min: {book_res['within_10_min']})", flush=True)
    if "build" in which:
        build_res = bench_build()
        print(
            f"make book: chapters executed in {build_res['book']['execution']:.0f} s; "
            f"make test: {build_res['test']['wall']:.0f} s",
            flush=True,
        )
    wall = time.perf_counter() - t0
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    raw = {
        "quick": q,
        "wall": wall,
        "load": list(load),
        "state_evolution": se_res,
        "phase_diagram": pd_res,
        "thresholds": th_res,
        "icl": icl_res,
        "book": book_res,
        "build": build_res,
    }
    previous_json = Path(args.out).with_suffix(".json")
    previous = json.loads(previous_json.read_text()) if previous_json.exists() else {}
    # The parts this run did not measure are kept from the last run that did, and named as such,
    # in the JSON, the report and the README's table alike.
    carried = [k for k in (*TABLE_PARTS, "book") if raw.get(k) is None and previous.get(k) is not None]
    stored = raw | {k: previous[k] for k in carried} | {"carried_over": carried}
    parts = [stored[k] for k in ("state_evolution", "phase_diagram", "icl", "book")]
    text = render(*parts, q, wall, load, stored["thresholds"], stored["build"], carried=carried)
    Path(args.out).write_text(text)
    previous_json.write_text(json.dumps(stored, indent=1, default=float) + "\n")
    if not q and args.out == str(RESULTS):
        update_readme(summary_table(*with_last_measured(raw, previous)))
    print(f"wrote {args.out}")
    return 0
