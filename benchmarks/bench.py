# ruff: noqa: E501  (the report below is long Markdown lines built from f-strings)
"""Benchmarks of the book's library against straightforward baselines, measured side by side.

Run from the repository root (``make bench``)::

    python -m benchmarks [--quick] [--book] [--out benchmarks/RESULTS.md]

Each benchmark times the library and its baseline in the same process, alternating them, and
reports ratios; absolute times are printed only for context (the machine may be shared).

* ``bench_state_evolution``: Part II's solver (:func:`attnlab.theory.phase_transition.solve`)
  against :mod:`benchmarks.se_baseline` (the authors' algorithm: one scipy BFGS per node), at the
  same quadrature and at equal or better accuracy against a converged reference solution.
* ``bench_phase_diagram``: the paper-scale 20×20 (α, ω) grid ``pt_phase_diagram`` on 2 workers.
* ``bench_icl``: Part III's batched trainer (:func:`attnlab.icl_training.train_icl`) against
  :mod:`benchmarks.icl_reference` (token form, per-head loop, one model at a time), in steps/s, and
  its FLOP/s against a float32 matmul peak measured in the same run.
* ``bench_book`` (``--book``): execution time of every chapter (jupytext + nbclient) and the total.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
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


# ------------------------------------------------------------------------------------------------
# Part III: the batched trainer.
# ------------------------------------------------------------------------------------------------


def flops_gram(param: str, L: int, H: int, B: int, d: int, n: int) -> float:
    """FLOPs of one forward pass of one model in the library's Gram form (multiply-add = 2 FLOPs).

    The context Gram matrix ``EᵀE`` (2·B·n·D²), then per layer ``T = I + Σ_k P_k G Q_k`` (FULL:
    4·B·D³ per head; DIAG: ``Ω ∘ G`` and ``+ I``, 2·B·D²), ``T e_t`` (2·B·D²) and, except after
    the last layer, ``T G Tᵀ`` (4·B·D³).
    """
    D = d + 1
    per_layer = (4 * B * D**3 * H + B * D**2 * H if param == "full" else 2 * B * D**2) + 2 * B * D**2
    return 2 * B * n * D**2 + L * per_layer + (L - 1) * 4 * B * D**3


def flops_tokens(param: str, L: int, H: int, B: int, d: int, n: int) -> float:
    """FLOPs of one forward pass of the token-form reference (same conventions)."""
    D, N = d + 1, n + 1
    per_layer = 2 * B * D * N * N + 2 * B * D * D * N  # Z M, (Z M) Zᵀ
    per_layer += H * (2 * B * D**3 + 2 * B * D**3 + 2 * B * D * D * N + B * D * N)  # P S, ·Q, ·Z, +
    return L * (per_layer + B * D * N)


def matmul_peak(n: int = 1024, threads: int | None = None, repeats: int = 5) -> float:
    """Best float32 FLOP/s of an n×n matmul with ``threads`` torch threads (None: the default)."""
    prev = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        a, b = torch.randn(n, n), torch.randn(n, n)
        a @ b
        best = min(_timed(torch.matmul, a, b)[0] for _ in range(repeats))
    finally:
        torch.set_num_threads(prev)
    return 2 * n**3 / best


def bench_icl(
    *, params=("diag", "full"), n_layers=7, batch_size=2048, d=10, n=20, steps=10, repeats=2, batched_noise=10
) -> dict:
    """Steps/s of ``train_icl`` vs the reference trainer, one model and ``batched_noise`` models at once."""
    from attnlab import icl_training as it
    from benchmarks.icl_reference import train_reference

    noise1 = ["uniform:1"]
    noise_many = [f"uniform:{k % 8}" for k in range(batched_noise)]
    common = {"d": d, "n": n, "batch_size": batch_size, "steps": steps, "record_every": steps}
    out = {
        "n_layers": n_layers,
        "batch_size": batch_size,
        "d": d,
        "n": n,
        "steps": steps,
        "batched_models": batched_noise,
        "threads_default": torch.get_num_threads(),
        "params": {},
    }
    out["peak_1thread"] = matmul_peak(threads=1)
    out["peak_default"] = matmul_peak()
    for p in params:
        # Warm-up (first calls allocate and dispatch), then alternate library and reference.
        it.train_icl([p], [n_layers], noise1, [0], **{**common, "steps": 1})
        train_reference(p, n_layers, d=d, n=n, steps=1, batch_size=batch_size)
        t_lib, t_ref, t_many = [], [], []
        for _ in range(repeats):
            t_lib.append(_timed(it.train_icl, [p], [n_layers], noise1, [0], **common)[0])
            t_ref.append(
                _timed(train_reference, p, n_layers, d=d, n=n, steps=steps, batch_size=batch_size)[0]
            )
            t_many.append(_timed(it.train_icl, [p], [n_layers], noise_many, [0], **common)[0])
        lib, ref, many = (steps / statistics.median(t) for t in (t_lib, t_ref, t_many))
        f_lib = 3 * flops_gram(p, n_layers, 1, batch_size, d, n)  # forward + backward ≈ 3 × forward
        f_ref = 3 * flops_tokens(p, n_layers, 1, batch_size, d, n)
        out["params"][p] = {
            "lib_steps_s": lib,
            "ref_steps_s": ref,
            "lib_batched_model_steps_s": many * batched_noise,
            "speedup_one_model": lib / ref,
            "speedup_batched": many * batched_noise / ref,
            "lib_flops_s": lib * f_lib,
            "lib_batched_flops_s": many * batched_noise * f_lib,
            "ref_flops_s": ref * f_ref,
            "flops_per_step_lib": f_lib,
            "flops_per_step_ref": f_ref,
        }
    return out


# ------------------------------------------------------------------------------------------------
# The whole book.
# ------------------------------------------------------------------------------------------------


def chapters() -> list[Path]:
    return sorted((ROOT / "book").rglob("*.md"))


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


# ------------------------------------------------------------------------------------------------
# Report.
# ------------------------------------------------------------------------------------------------


def _g(x, fmt=".3g"):
    return format(x, fmt)


def summary_table(se_res, pd_res, icl_res) -> str:
    lines = ["| Benchmark | Baseline | Ratio (measured side by side) | Target |", "|---|---|---|---|"]
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
            f"| (absolute) | {pd_res['time']:.0f} s | ≤ 120 s |"
        )
    if icl_res:
        for p, r in icl_res["params"].items():
            lines.append(
                f"| Part III trainer, {icl_res['n_layers']}-layer {p.upper()}, one model "
                f"| token form, per-head loop | **{r['speedup_one_model']:.1f}×** steps/s | — |"
            )
            lines.append(
                f"| Part III trainer, {icl_res['n_layers']}-layer {p.upper()}, {icl_res['batched_models']} models at once "
                f"| same, one model at a time | **{r['speedup_batched']:.1f}×** model-steps/s | — |"
            )
    return "\n".join(lines)


def render(se_res, pd_res, icl_res, book_res, quick: bool, wall: float, load=None) -> str:
    if load is None:
        load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    out = [
        "# Benchmark results",
        "",
        "Written by `make bench` (`python -m benchmarks"
        + (" --quick" if quick else "")
        + (" --book" if book_res else "")
        + "`); do not edit by hand. The raw numbers are in `RESULTS.json` beside it.",
        "Every ratio compares two codes timed in the same run, alternately, on the same machine.",
        "",
        f"- Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"torch {torch.__version__} ({torch.get_num_threads()} threads by default); load average at the end "
        f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1 / 5 / 15 min). Absolute times on a shared machine are "
        "only indicative; the ratios are what the benchmarks measure.",
        "- No GPU was available: every number here is CPU-only. `--device cuda` paths are not benchmarked.",
        f"- Wall time of this run: {wall:.0f} s.",
        "",
        "## Summary",
        "",
        summary_table(se_res, pd_res, icl_res),
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
                f"| `state_evolution.solve` | {r['n_nodes']}⁴ | {r['time']:.3f} | {r['iterations']} | "
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
            f"**{pd_res['time']:.1f} s** (target ≤ 120 s: {'met' if pd_res['time'] <= 120 else 'NOT met'} under "
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
    if icl_res:
        out += [
            "## Part III: the batched trainer",
            "",
            f"Adam steps at batch {icl_res['batch_size']}, d = {icl_res['d']}, n = {icl_res['n']}, "
            f"{icl_res['n_layers']} layers, one head, float32, fresh data every step, median of alternated runs "
            f"of {icl_res['steps']} steps. Library: `attnlab.icl_training.train_icl` (Gram form, models batched, "
            f"1 torch thread by default). Reference (`benchmarks/icl_reference.py`): token form "
            f"`Z ← Z + Σ_k P_k Z M Zᵀ Q_k Z` with a loop over heads, one model, `loss.backward()` and "
            f'`torch.optim.Adam` ({icl_res["threads_default"]} torch threads). "Batched" trains '
            f"{icl_res['batched_models']} models (noise settings) in one call and counts model-steps/s.",
            "",
            "FLOPs are counted analytically for the forward pass that each code runs (multiply-add = 2; "
            "`benchmarks/bench.py: flops_gram, flops_tokens`) and tripled for forward + backward. Matmul peak: "
            f"best float32 1024×1024 matmul in this run, {icl_res['peak_1thread'] / 1e9:.1f} GFLOP/s on 1 thread "
            f"and {icl_res['peak_default'] / 1e9:.1f} GFLOP/s on {icl_res['threads_default']} threads.",
            "",
            "| Model | Library steps/s | Reference steps/s | Ratio | Batched model-steps/s | Ratio | "
            "Library GFLOP/s (% of 1-thread peak) | Batched GFLOP/s (% of peak) | Reference GFLOP/s |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for p, r in icl_res["params"].items():
            out.append(
                f"| {icl_res['n_layers']}-layer {p.upper()} | {r['lib_steps_s']:.2f} | {r['ref_steps_s']:.2f} | "
                f"{r['speedup_one_model']:.1f}× | {r['lib_batched_model_steps_s']:.2f} | {r['speedup_batched']:.1f}× | "
                f"{r['lib_flops_s'] / 1e9:.2f} ({100 * r['lib_flops_s'] / icl_res['peak_1thread']:.0f}%) | "
                f"{r['lib_batched_flops_s'] / 1e9:.2f} ({100 * r['lib_batched_flops_s'] / icl_res['peak_1thread']:.0f}%) | "
                f"{r['ref_flops_s'] / 1e9:.2f} |"
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
    return "\n".join(out)


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
        "--only", choices=["se", "phase", "icl", "book"], action="append", help="run only these"
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
        Path(args.out).write_text(render(*parts, raw["quick"], raw["wall"], raw["load"]))
        if not raw["quick"] and args.out == str(RESULTS):
            update_readme(summary_table(*parts[:3]))
        print(f"wrote {args.out}")
        return 0
    which = set(args.only or ["se", "phase", "icl"] + (["book"] if args.book else []))
    t0 = time.perf_counter()
    q = args.quick
    se_res = pd_res = icl_res = book_res = None
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
    if "icl" in which:
        icl_res = (
            bench_icl(n_layers=2, batch_size=64, steps=2, repeats=1, batched_noise=2) if q else bench_icl()
        )
        for p, r in icl_res["params"].items():
            print(
                f"Part III {p}: {r['speedup_one_model']:.1f}x one model, {r['speedup_batched']:.1f}x batched, "
                f"{r['lib_flops_s'] / 1e9:.2f} GFLOP/s",
                flush=True,
            )
    if "book" in which:
        book_res = bench_book()
        print(f"Book: {book_res['total']:.0f} s (within 10 min: {book_res['within_10_min']})", flush=True)
    wall = time.perf_counter() - t0
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    text = render(se_res, pd_res, icl_res, book_res, q, wall, load)
    Path(args.out).write_text(text)
    raw = {
        "quick": q,
        "wall": wall,
        "load": list(load),
        "state_evolution": se_res,
        "phase_diagram": pd_res,
        "icl": icl_res,
        "book": book_res,
    }
    Path(args.out).with_suffix(".json").write_text(json.dumps(raw, indent=1, default=float) + "\n")
    if not q and args.out == str(RESULTS):
        update_readme(summary_table(se_res, pd_res, icl_res))
    print(f"wrote {args.out}")
    return 0
