"""How the committed CPU table was made, and how to make it again.

:func:`merge_parts` joins the results of processes that each ran part of an experiment;
:func:`splice` joins the base run of the table with the runs that replace some of its models and
records the learning-rate sweeps; ``CPU_TABLE_RUNS`` names the runs, :func:`table_commands`
gives their command lines, :func:`splice_table` splices them and :func:`reproduce_table` runs
them all from scratch.
"""

from __future__ import annotations

import json
import os

from attnlab.experiments.in_context.lr_sweep import lr_choice
from attnlab.experiments.in_context.recipe import model_settings, per_model
from attnlab.validation import check_int

# How the committed CPU table (icl_mixed_noise-cpu) was made, for reproduce_table: each run of
# the recipe as two processes side by side (--set part=0/2 and 1/2) joined by merge_parts,
# icl_table_6k as two such runs one after the other (seeds 0-2, then 3 and 4), and splice joining
# the runs: the base's models except those a replacement run gives, the rates of the sweeps.
CPU_TABLE_RUNS = {
    "base": "icl_table_6k",
    "replacements": {
        "icl_table_long": [("diag", 5), ("full", 3), ("full", 4)],
        "icl_table_rates": [("diag", 3), ("diag", 4), ("gdpp", 3), ("gdpp", 4), ("gdpp", 5)],
        "icl_table_full7": [("full", 7)],
    },
    "lr_sweep": ["icl_lr_sweep", "icl_full7_sweep"],
    "seed_splits": {"icl_table_6k": [{"n_seeds": 3}, {"seed_start": 3, "n_seeds": 2}]},
}


def table_commands(runs: dict = CPU_TABLE_RUNS, scale: str = "cpu", parts: int = 2) -> list[list[str]]:
    """The command lines of the runs that make the table ``runs`` describes (``CPU_TABLE_RUNS``),
    in order: one list per batch of ``parts`` processes run side by side, as a result records them.
    """
    parts = check_int("parts", parts, minimum=1)
    names = [runs["base"], *runs["replacements"], *runs["lr_sweep"]]
    batches = []
    for name in names:
        for sets in runs["seed_splits"].get(name, [{}]):
            extra = "".join(f" --set {key}={value}" for key, value in sets.items())
            run = f"python -m attnlab.experiments run {name} --scale {scale}"
            batches.append([f"{run} --set part={k}/{parts}{extra} --no-cache" for k in range(parts)])
    return batches


def splice_table(folders: dict, out, runs: dict = CPU_TABLE_RUNS, scale: str = "cpu", recipe=None):
    """:func:`splice` the runs of ``runs`` (``CPU_TABLE_RUNS``) from ``folders``, ``{run name:
    folder}`` of their merged results, into the table at ``out`` (``recipe`` as in
    :func:`splice`). Returns the path of its CSV."""
    names = [runs["base"], *runs["replacements"], *runs["lr_sweep"]]
    if missing := [n for n in names if n not in folders]:
        raise ValueError(f"folders must have a folder for each of {names}; missing {missing}")
    return splice(
        (runs["base"], folders[runs["base"]]),
        [(name, folders[name], models) for name, models in runs["replacements"].items()],
        out,
        scale=scale,
        recipe=recipe,
        lr_sweep=[(name, folders[name]) for name in runs["lr_sweep"]] or None,
    )


def reproduce_table(
    out, workdir, runs: dict = CPU_TABLE_RUNS, scale: str = "cpu", parts: int = 2, recipe=None
):
    """Make the table again from scratch as the committed one was made: run the commands of
    :func:`table_commands` (each batch as ``parts`` processes side by side, results in
    ``workdir``), merge each run's parts with :func:`merge_parts`, and :func:`splice_table` them
    into ``out`` (``recipe`` as in :func:`splice`). At the CPU scale this takes hours (the
    committed run's wall time is in its JSON). Returns the path of the table's CSV.
    """
    import shlex
    import subprocess
    import sys
    from pathlib import Path

    workdir = Path(workdir)
    folders, batches = {}, iter(table_commands(runs, scale, parts))
    for name in [runs["base"], *runs["replacements"], *runs["lr_sweep"]]:
        merged = []
        for j in range(len(runs["seed_splits"].get(name, [{}]))):
            dirs = [workdir / f"{name}-{j}-part{k}" for k in range(parts)]
            procs = [
                subprocess.Popen([sys.executable, *shlex.split(cmd)[1:], "--out", str(d)])
                for cmd, d in zip(next(batches), dirs, strict=True)
            ]
            if failed := [p.args for p in procs if p.wait() != 0]:
                raise RuntimeError(f"these runs failed: {failed}")
            merged.append(
                merge_parts(dirs, workdir / f"{name}-{j}", name=name, scale=scale, parallel=True).parent
            )
        folders[name] = (
            merged[0]
            if len(merged) == 1
            else merge_parts(merged, workdir / name, name=name, scale=scale).parent
        )
    return splice_table(folders, out, runs, scale, recipe)


def merge_parts(
    directories, out, name: str = "icl_mixed_noise", scale: str = "paper", parallel: bool = False
):
    """Merge the results of a run split into processes into one file.

    ``directories`` are the ``--out`` folders of the parts, in order (or folders holding earlier
    merged results). A run is split by noise settings or parameterizations (``--set part=k/m`` or
    ``part=PARAM``) or by seeds (``--set seed_start=S --set n_seeds=N``: the seeds must join into
    one range). The merged configuration is the common one with ``part`` naming the parts and
    ``seed_start``, ``n_seeds`` the joined range; the best seed of every cell (``best``) is chosen
    again among all of them, and only its per-noise profile is kept. The JSON keeps every part's
    command under ``commands``; the wall time is the sum of the parts' (they ran one after
    another) or, with ``parallel``, the longest part's (side by side, one process per core).
    Returns the path of the merged CSV.
    """
    from attnlab.experiments import Result, load_result, write_result

    parts = [load_result(name, scale, directory=d) for d in directories]
    if not parts:
        raise ValueError("directories must name at least one part")
    seed_ranges = sorted({(int(p.config.get("seed_start", 0)), int(p.config["n_seeds"])) for p in parts})
    seeds = [s for start, n in seed_ranges for s in range(start, start + n)]
    if seeds != list(range(seeds[0], seeds[0] + len(seeds))):
        raise ValueError(f"the parts' seeds must join into one range without overlap, got {seed_ranges}")
    config = dict(parts[0].config)
    for p in parts[1:]:
        for key, value in p.config.items():
            if key not in ("part", "seed_start", "n_seeds") and value != config[key]:
                raise ValueError(f"parts differ in {key!r}: {value!r} != {config[key]!r}")
    config["part"] = "all (merged: " + ", ".join(str(p.config["part"]) for p in parts) + ")"
    config["seed_start"], config["n_seeds"] = seeds[0], len(seeds)
    commands = [c for p in parts for c in p.meta.get("commands", [p.meta.get("command")])]
    meta = {"commands": commands, "note": "merged with attnlab.experiments.in_context.merge_parts"}
    timings = [p.meta["timing"] for p in parts if "timing" in p.meta]
    if timings:
        walls = [t["wall_s"] for t in timings]
        meta["timing"] = {
            "wall_s": round(max(walls) if parallel else sum(walls), 1),
            "parallel": bool(parallel),
            "cpu_count": os.cpu_count(),  # of the machine that merged the parts (and ran them)
            "cpu_s": round(sum(t["cpu_s"] for t in timings), 1),
            "parts": timings,
        }
    if any("reruns" in p.meta for p in parts):
        meta["reruns"] = [r for p in parts for r in p.meta.get("reruns", [])]
    rows = []
    for p in parts:
        best = {_cell(r): r["seed"] for r in p.rows if r["kind"] == "table" and _flag(r["best"])}
        # profiles written before they named their seed are of their part's best seed
        for r in p.rows:
            unnamed = r["kind"] == "profile" and r.get("seed") in ("", None)
            rows.append({**r, "seed": best[_cell(r)]} if unnamed else dict(r))
    table = [r for r in rows if r["kind"] == "table"]
    best = {}
    for r in table:
        key = _cell(r)
        if key not in best or float(r["adjusted"]) < float(best[key]["adjusted"]):
            best[key] = r
    for r in table:
        r["best"] = r is best[_cell(r)]
    rows = [r for r in rows if r["kind"] != "profile" or int(r["seed"]) == int(best[_cell(r)]["seed"])]
    merged = Result(name, scale, config, rows, parts[0].version, meta=meta)
    return write_result(merged, out, command=" && ".join(c or "?" for c in commands))


def splice(
    base, replacements, out, name: str = "icl_mixed_noise", scale: str = "cpu", recipe=None, lr_sweep=None
):
    """Replace whole models of a table by the same models from other runs of its recipe.

    ``base`` is ``(result_name, folder)`` of a run of the whole table; ``replacements`` are
    ``(result_name, folder, models)`` with ``models`` a list of ``(param, n_layers)``: the rows of
    those models (table and profiles) come from that result instead (an ``arm`` column is dropped).
    The training curves stay in the runs' own results. The
    spliced configuration is ``recipe``, by default the registered one of ``name`` at ``scale``;
    every run must have
    trained its models with that recipe's learning rate, steps, schedule and dtype (a run from
    before the dtype setting trained in float32) and the other settings equal,
    or a ValueError says which setting differs. The JSON keeps every run's commands, the re-runs of
    the models each run contributed, and the wall time as the sum of the runs' (one after another).
    ``lr_sweep``, ``(result_name, folder)`` of a learning-rate sweep of the recipe
    (``icl_lr_sweep``) or a list of them, is checked like the runs and its wall time counts: each
    model's rate comes from the last sweep that trained it, which must have trained it with the
    recipe's steps and schedule, and every model's rate in the recipe must be the one that sweep
    chooses (:func:`lr_choice` from the sweep's own rates, with the recipe's re-run factor); the
    JSON records under ``lr_sweep`` each model's sweep, its rate before the sweep, the chosen one,
    its gain and the sweep's scores.
    Returns the path of the spliced CSV.
    """
    from attnlab.experiments import Result, load_result, write_result
    from attnlab.experiments._core import _REGISTRY

    config = dict(getattr(_REGISTRY[name], scale) if recipe is None else recipe)
    base_res = load_result(base[0], scale, directory=base[1])
    runs = [(base_res, None)] + [(load_result(n, scale, directory=d), {tuple(m) for m in models})
                                 for n, d, models in replacements]  # fmt: skip
    replaced = set().union(*(models for _, models in runs[1:]))
    per_model_keys = ("steps", "lr", "lr_schedule", "dtype")
    free = ("params", "depths", "part", "profile_noise", "arms", "seed_start", "n_seeds") + per_model_keys
    rows, reruns, commands, timings = [], [], [], []
    if lr_sweep is not None and isinstance(lr_sweep[0], str):
        lr_sweep = [lr_sweep]
    sweeps = [load_result(n, scale, directory=d) for n, d in lr_sweep or ()]
    swept_by = {}  # (param, L): the last sweep that trained the model
    for sweep in sweeps:
        for param in sweep.config["params"]:
            for L in sweep.config["depths"][param]:
                swept_by[(param, int(L))] = sweep

    def check_model(res, param, L, keys):
        for key in keys:
            if key == "dtype":
                got, want = model_settings(res.config, param, L).dtype, model_settings(config, param, L).dtype
            else:
                got, want = per_model(res.config[key], param, L), per_model(config[key], param, L)
            if (float(got) != float(want)) if key in ("steps", "lr") else (got != want):
                raise ValueError(
                    f"{res.name} trained ({param}, {L}) with {key}={got}, the recipe's is {want}"
                )

    for (param, L), sweep in swept_by.items():
        if param in config["depths"] and L in config["depths"][param]:
            check_model(sweep, param, L, ("steps", "lr_schedule", "dtype"))
    for res in [res for res, _ in runs] + sweeps:
        for key, value in config.items():
            if key not in free + (("noise", "reruns") if res in sweeps else ()) and _as_json(
                res.config.get(key)
            ) != _as_json(value):
                raise ValueError(
                    f"{res.name} differs from the recipe in {key!r}: {res.config.get(key)!r} != {value!r}"
                )
    for res, models in runs:
        if models is None:  # the base: its models that no other run replaces
            models = {_cell(r)[:2] for r in res.rows if r["kind"] == "table"} - replaced
        for param, L in sorted(models):
            check_model(res, param, L, per_model_keys)
        for r in res.rows:
            if r["kind"] in ("table", "profile") and (r["param"], int(r["n_layers"])) in models:
                rows.append({k: v for k, v in r.items() if k != "arm"})
        reruns += [r for r in res.meta.get("reruns", []) if (r["param"], int(r["n_layers"])) in models]
        commands += res.meta.get("commands", [res.meta.get("command")])
        timings.append({"run": res.name, **res.meta["timing"]})
    rates = {}
    for sweep in sweeps:
        choice = lr_choice(sweep.rows, current=sweep.config["lr"], rerun_lr_factor=config["rerun_lr_factor"])
        for (param, L), row in choice.iterrows():
            if swept_by[(param, int(L))] is not sweep:
                continue  # a later sweep trained this model
            rate = model_settings(config, param, int(L)).lr
            if float(row["chosen"]) != rate:
                raise ValueError(
                    f"the recipe trains ({param}, {L}) at {rate}, {sweep.name} chooses {row['chosen']}"
                )
            scores = {
                k.removeprefix("score@"): float(v)
                for k, v in row.items()
                if k.startswith("score@") and v == v
            }  # v == v: the rates the sweep tried for this model (a rate it did not is NaN)
            rates.setdefault(param, {})[int(L)] = {
                "sweep": sweep.name,
                "before": float(row["current"]),
                "chosen": float(row["chosen"]),
                "gain": float(row["gain"]),
                "scores": scores,
            }
        commands += sweep.meta.get("commands", [sweep.meta.get("command")])
        timings.append({"run": sweep.name, **sweep.meta["timing"]})
    config["part"] = "all (spliced: " + ", ".join(res.name for res, _ in runs) + ")"
    seeds = sorted({int(r["seed"]) for r in rows if r["kind"] == "table"})
    config["seed_start"], config["n_seeds"] = seeds[0], len(seeds)
    meta = {
        "commands": commands,
        "note": "spliced with attnlab.experiments.in_context.splice: "
        + "; ".join(
            ", ".join(f"{p} {L}L" for p, L in sorted(models)) + " from " + res.name
            for res, models in runs[1:]
        )  # fmt: skip
        + "; the others from "
        + base_res.name
        + (f"; the learning rates swept by {', '.join(s.name for s in sweeps)}" if sweeps else ""),
        "timing": {
            "wall_s": round(sum(t["wall_s"] for t in timings), 1),
            "parallel": False,
            "cpu_s": round(sum(t["cpu_s"] for t in timings), 1),
            "parts": timings,
        },
        "reruns": reruns,
    }
    if sweeps:
        meta["lr_sweep"] = {"results": [s.name for s in sweeps], "rates": rates}
    spliced = Result(name, scale, config, rows, base_res.version, meta=meta)
    return write_result(spliced, out, command=" && ".join(c or "?" for c in commands))


def _as_json(value):
    """``value`` after a round trip through JSON (dict keys as strings, tuples as lists)."""
    return json.loads(json.dumps(value))


def _cell(row: dict) -> tuple:
    return (row["param"], int(row["n_layers"]), row["noise"])


def _flag(value) -> bool:
    """A boolean of a result row, from a run (bool) or a result file (bool or its text)."""
    return value in (True, "True", "true", 1)
