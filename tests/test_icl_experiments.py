"""Smoke tests of the Part III experiments (tiny configurations) and of merging split runs."""

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from attnlab import experiments as ex
from attnlab.experiments import in_context as icl
from attnlab.experiments.in_context import merge_parts, trained_model
from attnlab.icl_training import train_plan
from attnlab.tasks.icl_regression import sample_regression


def _lr_of(value, param, L):
    return float(icl.per_model(value, param, L))


def _steps_of(value, param, L):
    return int(icl.per_model(value, param, L))


def _train_once(config, device, params, depths, noise, lr):
    """Train the models ``params`` x ``depths`` of ``config`` on ``noise`` at ``lr`` (no re-runs)."""
    recipe = icl.Recipe.from_config({**config, "params": params, "depths": depths, "noise": noise, "lr": lr})
    return train_plan(recipe.plan, device=device)


def test_baselines_experiment_rows_are_ordered_as_expected():
    res = ex.run(
        "icl_baselines",
        overrides={"noise": ["uniform:0", "uniform:2", "categorical:1,3"], "n_eval": 600, "n_tune": 400},
        cache=False,
    )
    assert [r["noise"] for r in res.rows] == ["uniform:0", "uniform:2", "categorical:1,3"]
    assert res.rows[0]["ada"] == pytest.approx(0.0, abs=1e-12)
    for row in res.rows[1:]:
        assert 0 < row["bayes"] < row["const"] and row["tuned"] > 0


def test_mixed_noise_experiment_and_merge(tmp_path):
    small = {
        "params": ["gdpp", "diag"],
        "depths": [1, 2],
        "steps": 2,
        "batch_size": 8,
        "n_eval": 200,
        "profile_n": 50,
        "profile_sigmas": [1.0],
        "record_every": 1,
        "keep_weights": False,
    }
    for k in range(2):
        res = ex.run("icl_mixed_noise", overrides={**small, "part": f"{k}/2"}, cache=False)
        ex.write_result(res, tmp_path / f"p{k}", command=f"part {k}")
    path = merge_parts([tmp_path / "p0", tmp_path / "p1"], tmp_path / "all", scale="book")
    merged = ex.load_result("icl_mixed_noise", "book", directory=path.parent)
    assert sorted(set(merged.column("noise", kind="table"))) == sorted(
        ["uniform:0", "uniform:1", "uniform:3", "uniform:5"]
    )
    assert merged.meta["commands"] == ["part 0", "part 1"]
    walls = [t["wall_s"] for t in merged.meta["timing"]["parts"]]
    assert merged.meta["timing"]["wall_s"] == pytest.approx(sum(walls), abs=0.1)
    side = merge_parts([tmp_path / "p0", tmp_path / "p1"], tmp_path / "side", scale="book", parallel=True)
    timing = ex.load_result("icl_mixed_noise", "book", directory=side.parent).meta["timing"]
    assert timing["parallel"] and timing["wall_s"] == pytest.approx(max(walls), abs=0.1)
    assert np.all(np.isfinite(merged.column("adjusted", kind="table")))
    with pytest.raises(ValueError, match="part"):
        ex.run("icl_mixed_noise", overrides={**small, "part": "3/2"}, cache=False)


def test_merge_joins_seed_ranges_and_chooses_the_best_seed_again(tmp_path):
    small = {
        "params": ["diag"],
        "depths": [1, 2],
        "noise": ["uniform:1", "uniform:5"],
        "steps": 3,
        "batch_size": 8,
        "n_eval": 200,
        "profile_n": 50,
        "profile_sigmas": [1.0, 2.0],
        "profile_noise": ["uniform:5"],
        "record_every": 1,
        "keep_weights": False,
    }
    runs = {"a": (0, 1), "b": (1, 2), "c": (3, 1)}
    for out, (start, n) in runs.items():
        res = ex.run("icl_mixed_noise", overrides={**small, "seed_start": start, "n_seeds": n}, cache=False)
        assert sorted(set(res.column("seed", kind="table"))) == list(range(start, start + n))
        ex.write_result(res, tmp_path / out, command=f"seeds {start}+{n}")
    # a merged result merges again (its commands are kept), and the parts come in any order
    merge_parts([tmp_path / "b", tmp_path / "a"], tmp_path / "ab", scale="book")
    merge_parts([tmp_path / "ab", tmp_path / "c"], tmp_path / "all", scale="book")
    merged = ex.load_result("icl_mixed_noise", "book", directory=tmp_path / "all")
    assert merged.config["seed_start"] == 0 and merged.config["n_seeds"] == 4
    assert merged.meta["commands"] == ["seeds 1+2", "seeds 0+1", "seeds 3+1"]
    table = [r for r in merged.rows if r["kind"] == "table"]
    assert len(table) == 2 * 2 * 4
    for L in (1, 2):
        for noise in small["noise"]:
            cell = [r for r in table if r["n_layers"] == L and r["noise"] == noise]
            assert sorted(r["seed"] for r in cell) == [0, 1, 2, 3]
            best = [r for r in cell if r["best"]]
            assert len(best) == 1 and best[0]["adjusted"] == min(r["adjusted"] for r in cell)
            profile = [r for r in merged.rows if r["kind"] == "profile" and r["n_layers"] == L]
            if noise == "uniform:5":
                assert len(profile) == 2 and {r["seed"] for r in profile} == {best[0]["seed"]}
    with pytest.raises(ValueError, match="join into one range"):
        merge_parts([tmp_path / "a", tmp_path / "c"], tmp_path / "gap", scale="book")
    with pytest.raises(ValueError, match="join into one range"):
        merge_parts([tmp_path / "ab", tmp_path / "b"], tmp_path / "twice", scale="book")


def test_decay_experiment_keeps_fixed_decays():
    res = ex.run("icl_decay", overrides={"steps": 3, "batch_size": 8, "n_eval": 100}, cache=False)
    fixed = [r for r in res.rows if r["variant"] == "fixed:0.8"]
    assert all(r["gamma_1"] == pytest.approx(0.8, abs=1e-6) for r in fixed)
    assert all(r["gamma_1"] == pytest.approx(1.0) for r in res.rows if r["variant"] == "none")


def test_trained_model_round_trips_through_a_result_file(tmp_path):
    """A model rebuilt from a written result predicts as the model rebuilt from the run's rows."""
    small = {"depths": {"gdpp": [1], "diag": [2], "full": [1]}, "steps": 2, "batch_size": 8, "n_eval": 100}
    res = ex.run("icl_trained_models", overrides=small, cache=False)
    ex.write_result(res, tmp_path)
    loaded = ex.load_result("icl_trained_models", "book", directory=tmp_path)
    b = sample_regression(5, 10, 20, noise="uniform:5", generator=0, dtype="float64")
    for param, L in (("diag", 2), ("full", 1)):
        ran, read = (trained_model(r, param, L, "uniform:5") for r in (res, loaded))
        pred = read.predict(b.X, b.y, b.x_query)
        assert torch.equal(ran.predict(b.X, b.y, b.x_query), pred) and pred.abs().max() > 0
    with pytest.raises(ValueError, match="seed"):
        trained_model(loaded, "diag", 2, "uniform:5", seed=7)


def test_eval_sets_set_zero_is_the_committed_evaluation():
    """Set 0 of icl_eval_sets is the table's evaluation: it reproduces the committed mean, trimmed
    mean and median of the stored model, and a fresh set differs from it."""
    src = {"icl_trained_models": {"models": {"diag": [3]}, "noise": ["uniform:1"], "seeds": [2]}}
    over = {"sources": src, "n_eval": 100_000, "n_sets": 1}
    res = ex.run("icl_eval_sets", overrides=over, cache=False)
    rows = ex.load_result("icl_trained_models", "cpu").rows
    cell = ("diag", 3, "uniform:1", 2)
    (stored,) = [
        r for r in rows if r["kind"] == "table" and (r["param"], r["n_layers"], r["noise"], r["seed"]) == cell
    ]
    zero, fresh = res.rows
    assert (zero["set"], zero["eval_seed"], fresh["eval_seed"]) == (0, 123, 1001)
    for key in ("adjusted", "adjusted_trimmed", "adjusted_median"):
        assert zero[key] == pytest.approx(stored[key], rel=1e-9), key
    assert fresh["adjusted_median"] != pytest.approx(zero["adjusted_median"], rel=1e-6)
    assert zero["source"] == "icl_trained_models" and 0 < zero["worst_share"] <= 1


# A tiny CPU-scale run at a rate that makes every model fail, so that each is re-run.
_FAILING = {
    "params": ["diag"],
    "depths": {"diag": [1, 2]},
    "noise": ["uniform:1", "uniform:3"],
    "steps": 6,
    "batch_size": 16,
    "lr": {"diag": 3e3},
    "n_eval": 300,
    "n_val": 200,
    "profile_n": 50,
    "profile_sigmas": [1.0],
    "profile_noise": [],
    "record_every": 3,
    "n_seeds": 1,
}


def test_cpu_scale_recipe_and_reruns():
    exp = ex.get("icl_mixed_noise")
    cpu = exp.config("cpu")
    assert cpu["batch_size"] == 512
    assert cpu["noise"] == exp.config("paper")["noise"] and len(cpu["noise"]) == 10
    assert cpu["depths"] == {"diag": [1, 2, 3, 4, 5, 7], "gdpp": [1, 2, 3, 4, 5, 7], "full": [1, 3, 4, 7]}
    assert cpu["n_seeds"] == 5 and cpu["seed_start"] == 0
    assert cpu["max_grad_norm"] == 100.0 and cpu["patience"] == 20
    assert _lr_of(cpu["lr"], "full", 7) == 3e-4 and _lr_of({"full": {"3": 0.1}}, "full", 3) == 0.1
    assert cpu["reruns"] == 1 and cpu["rerun_lr_factor"] == pytest.approx(1 / 3)
    longer = {("diag", 5), ("full", 3), ("full", 4)}
    for param, depths in cpu["depths"].items():
        for L in depths:
            # 7-layer FULL: eight times the steps with a cosine decay (icl_full7_schedule)
            steps = 48_000 if (param, L) == ("full", 7) else 24_000 if (param, L) in longer else 6000
            assert _steps_of(cpu["steps"], param, L) == steps, (param, L)
            schedule = "cosine" if (param, L) == ("full", 7) else "warmup_stable_decay"
            assert icl.per_model(cpu["lr_schedule"], param, L) == schedule, (param, L)
    # the sweep's choice: three times the pilot's rate for DIAG 3L, 4L and GD++ 3L, 4L, 5L
    moved = {("diag", 3), ("diag", 4), ("gdpp", 3), ("gdpp", 4), ("gdpp", 5)}
    base = ex.get("icl_table_6k").config("cpu")
    for param, depths in cpu["depths"].items():
        for L in depths:
            want = (3 if (param, L) in moved else 1) * _lr_of(base["lr"], param, L)
            assert _lr_of(cpu["lr"], param, L) == pytest.approx(want), (param, L)
    per_model = ("steps", "lr", "lr_schedule")
    assert base["steps"] == 6000 and base["lr_schedule"] == "warmup_stable_decay"
    assert {k: v for k, v in base.items() if k not in per_model} == {
        k: v for k, v in cpu.items() if k not in per_model
    }
    # A rate that makes every model blow up: each failed model is re-run once at a third of it.
    tiny = _FAILING
    res = ex.run("icl_mixed_noise", "cpu", overrides=tiny, cache=False)
    reruns = res.meta["reruns"]
    assert reruns and all(r["lr"] == pytest.approx(1e3) and r["attempt"] == 1 for r in reruns)
    table = [r for r in res.rows if r["kind"] == "table"]
    assert len(table) == 4
    for row in table:
        rerun = [r for r in reruns if (r["n_layers"], r["noise"]) == (row["n_layers"], row["noise"])]
        kept = bool(rerun) and rerun[0]["kept"]
        assert row["lr"] == pytest.approx(1e3 if kept else 3e3)
        assert row["adjusted_trimmed"] <= row["adjusted"] + 1e-12
        assert row["outliers"] == (row["adjusted"] > 2 * row["adjusted_trimmed"])
    assert set(res.meta["timing"]) >= {"wall_s", "cpu_s"}
    with pytest.raises(ValueError, match="part must be 'all', one of params"):
        ex.run("icl_mixed_noise", "cpu", overrides={**tiny, "part": "gdpp"}, cache=False)


def test_committed_cpu_result_records_its_recipe_and_wall_time():
    res = ex.load_result("icl_mixed_noise", "cpu")
    recipe = ex.get("icl_mixed_noise").config("cpu")
    for key in ("batch_size", "n_seeds", "reruns", "rerun_lr_factor", "fail_ratio"):
        assert res.config[key] == pytest.approx(recipe[key]), key
    assert res.meta["timing"]["wall_s"] > 60 and res.meta["timing"]["cpu_s"] > 60
    assert isinstance(res.meta["reruns"], list)
    table = [r for r in res.rows if r["kind"] == "table"]
    # every model of the recipe, every noise setting, every seed: once
    cells = [(r["param"], r["n_layers"], r["noise"], r["seed"]) for r in table]
    assert len(cells) == len(set(cells)) == sum(map(len, recipe["depths"].values())) * 10 * recipe["n_seeds"]
    for param, depths in recipe["depths"].items():
        for L in depths:
            steps = _steps_of(res.config["steps"], param, L)
            assert steps == _steps_of(recipe["steps"], param, L), (param, L)
            schedule = icl.per_model(res.config["lr_schedule"], param, L)
            assert schedule == icl.per_model(recipe["lr_schedule"], param, L), (param, L)
            assert _lr_of(res.config["lr"], param, L) == pytest.approx(_lr_of(recipe["lr"], param, L))
            swept = res.meta["lr_sweep"]["rates"][param][str(L)]  # the sweep chose the recipe's rate
            assert swept["chosen"] == pytest.approx(_lr_of(recipe["lr"], param, L)), (param, L)
            assert len(swept["scores"]) == 3
    for row in table:
        assert {"adjusted", "adjusted_median", "adjusted_trimmed", "outliers", "lr"} <= set(row)
        assert row["adjusted_trimmed"] <= row["adjusted"] + 1e-12


def test_stability_experiment_differs_from_the_cpu_recipe_only_in_its_guards():
    exp = ex.get("icl_stability")
    cpu, recipe = exp.config("cpu"), ex.get("icl_table_6k").config("cpu")
    same = ("steps", "batch_size", "lr", "lr_schedule", "betas", "n_eval", "eval_seed")
    assert all(cpu[k] == recipe[k] for k in same) and cpu["reruns"] == 0 and cpu["n_seeds"] == 3
    assert cpu["arms"] == {"plain": [None, 1], "guarded": [recipe["max_grad_norm"], recipe["patience"]]}
    res = ex.run("icl_stability", overrides={"n_eval": 300, "n_val": 100}, cache=False)
    table = [r for r in res.rows if r["kind"] == "table"]
    assert len(table) == 2 * 2 and [r["arm"] for r in table] == ["plain"] * 2 + ["guarded"] * 2
    assert all(r["skipped"] == 0 for r in table if r["arm"] == "plain")


def test_seed_basins_arms_change_only_what_they_name():
    exp = ex.get("icl_seed_basins")
    cpu, recipe = exp.config("cpu"), ex.get("icl_table_6k").config("cpu")
    same = ("batch_size", "lr", "betas", "max_grad_norm", "patience", "n_eval", "eval_seed", "trim")
    assert all(cpu[k] == recipe[k] for k in same) and cpu["reruns"] == 0 and cpu["n_seeds"] == 8
    assert cpu["arms"] == {
        "recipe": {},
        "4x steps": {"steps": 4 * recipe["steps"]},
        "constant rate": {"lr_schedule": "constant"},
    }
    res = ex.run("icl_seed_basins", overrides={"n_eval": 300, "n_val": 100}, cache=False)
    assert [r["arm"] for r in res.rows] == ["recipe"] * 2 + ["4x steps"] * 2
    assert all(r["kind"] == "table" and r["n_layers"] == 2 for r in res.rows)
    # the arms share their seeds and data but not their training: 4x the steps gives other models
    assert [r["seed"] for r in res.rows] == [0, 1, 0, 1]
    assert res.rows[0]["adjusted"] != res.rows[2]["adjusted"]


def test_full7_rates_differ_from_the_recipe_only_in_the_rate():
    exp = ex.get("icl_full7_rates")
    cpu, recipe = exp.config("cpu"), ex.get("icl_table_6k").config("cpu")
    same = ("steps", "batch_size", "lr_schedule", "betas", "max_grad_norm", "patience", "n_eval", "eval_seed")
    assert all(cpu[k] == recipe[k] for k in same) and cpu["reruns"] == 0
    assert cpu["depths"] == {"full": [7]} and _lr_of(recipe["lr"], "full", 7) == 3e-4
    assert [c["lr"]["full"] for c in cpu["arms"].values()] == [3e-4, 5e-4, 1e-3]
    res = ex.run("icl_full7_rates", overrides={"n_eval": 200, "n_val": 100}, cache=False)
    assert [(r["arm"], r["lr"]) for r in res.rows] == [(a, c["lr"]["full"]) for a, c in cpu["arms"].items()]


def test_full7_long_is_the_recipe_with_four_times_the_steps():
    exp = ex.get("icl_full7_long")
    cpu, recipe = exp.config("cpu"), ex.get("icl_table_6k").config("cpu")
    same = ("lr", "lr_schedule", "batch_size", "betas", "max_grad_norm", "patience", "reruns")
    same += ("rerun_lr_factor", "noise", "n_seeds", "n_eval", "eval_seed", "n_val")
    assert all(cpu[k] == recipe[k] for k in same) and cpu["steps"] == 4 * recipe["steps"]
    assert cpu["depths"] == {"full": [7]} and cpu["arms"] == {"4x steps": {}}
    res = ex.run("icl_full7_long", overrides={"n_eval": 200, "n_val": 100}, cache=False)
    assert all(r["kind"] == "table" and r["arm"] == "4x steps" and r["param"] == "full" for r in res.rows)


def test_deep_seven_experiments_change_only_what_they_name():
    recipe = ex.get("icl_table_6k").config("cpu")
    same = ("lr_schedule", "batch_size", "betas", "max_grad_norm", "patience", "n_eval", "eval_seed", "n_val")
    longer = ex.get("icl_full7_longer").config("cpu")
    assert all(longer[k] == recipe[k] for k in same) and longer["lr"] == recipe["lr"]
    assert longer["steps"] == 8 * recipe["steps"] and longer["reruns"] == 0
    assert longer["depths"] == {"full": [7]}
    assert (longer["seed_start"], longer["n_seeds"]) == (1, 1)
    rate = ex.get("icl_diag7_rate").config("cpu")
    assert all(rate[k] == recipe[k] for k in same) and rate["steps"] == recipe["steps"]
    assert rate["depths"] == {"diag": [7]} and rate["reruns"] == 0
    assert rate["arms"] == {
        "lr 3e-4": {"lr": {"diag": 3e-4}},
        "lr 3e-4, 4x steps": {"lr": {"diag": 3e-4}, "steps": 4 * recipe["steps"]},
    }
    res = ex.run("icl_diag7_rate", overrides={"n_eval": 200, "n_val": 100}, cache=False)
    assert [r["arm"] for r in res.rows] == ["lr 3e-4", "lr 3e-4, 4x steps"]
    assert all(r["lr"] == pytest.approx(3e-4) for r in res.rows)
    res = ex.run("icl_full7_longer", overrides={"n_eval": 200, "n_val": 100}, cache=False)
    assert [r["seed"] for r in res.rows] == [1]


@pytest.mark.parametrize(
    "name, param, depths",
    [
        ("icl_table_diag3", "diag", [1, 2, 3]),
        ("icl_table_full3", "full", [1, 3]),
        ("icl_table_full7_weights", "full", [7]),
    ],
)
def test_table_weights_runs_are_the_tables_recipe(name, param, depths):
    """icl_table_diag3, icl_table_full3 and icl_table_full7_weights train models as the table does
    (chapter 4 checks their rows equal those of the runs the table's come from, bit for bit) and
    differ from the recipe only by keeping the weights."""
    table, run = ex.get("icl_mixed_noise").config("cpu"), ex.get(name).config("cpu")
    assert run["depths"] == {param: depths} and run["params"] == [param] and run["keep_weights"]
    for key in ("steps", "lr", "lr_schedule"):
        for L in depths:
            assert icl.per_model(run[key], param, L) == icl.per_model(table[key], param, L), (key, L)
    assert {k for k in table if table[k] != run[k]} == {"params", "depths", "keep_weights"}


def test_table_full7_weights_are_the_tables_models():
    """icl_table_full7_weights trained icl_table_full7's models bit for bit (chapter 4 checks it too)."""
    key = ("param", "n_layers", "noise", "seed")

    def losses(name):
        rows = ex.load_result(name, "cpu").rows
        return {tuple(r[k] for k in key): (r["adjusted"], r["best"]) for r in rows if r["kind"] == "table"}

    kept = losses("icl_table_full7_weights")
    assert len(kept) == 50 and kept == losses("icl_table_full7")


def test_float64_experiments_change_only_the_dtype():
    recipe, table = ex.get("icl_table_6k").config("cpu"), ex.get("icl_mixed_noise").config("cpu")
    assert recipe["dtype"] == table["dtype"] == "float32"
    same = ("lr", "lr_schedule", "batch_size", "betas", "max_grad_norm", "patience")
    same += ("n_eval", "eval_seed", "n_val")
    d7 = ex.get("icl_diag7_float64").config("cpu")
    assert all(d7[k] == recipe[k] for k in same) and d7["steps"] == 4 * recipe["steps"]
    assert d7["depths"] == {"diag": [7]} and d7["reruns"] == 0 and (d7["seed_start"], d7["n_seeds"]) == (0, 4)
    assert d7["arms"] == {"float32": {"dtype": "float32"}, "float64": {"dtype": "float64"}}
    f7 = ex.get("icl_full7_float64").config("cpu")  # 7-layer FULL by the table's recipe
    for key in ("steps", "lr_schedule", "lr"):
        assert icl.per_model(f7[key], "full", 7) == icl.per_model(table[key], "full", 7), key
    assert all(f7[k] == table[k] for k in same if k not in ("lr", "lr_schedule"))
    assert f7["depths"] == {"full": [7]} and f7["reruns"] == 0
    assert f7["arms"] == {"float64": {"dtype": "float64"}}
    t7 = ex.get("icl_table_diag7_float64").config("cpu")  # the table's 7-layer DIAG in float64
    assert t7["depths"] == {"diag": [7]} and t7["dtype"] == "float64"
    assert {k for k in table if table[k] != t7[k]} == {"params", "depths", "dtype"}
    for dtype in ("float32", "float64"):  # the dtype reaches the trainer
        config = {**ex.get("icl_diag7_float64").config("book"), "dtype": dtype, "steps": 3}
        res = _train_once(config, "cpu", ["diag"], {"diag": [2]}, ["uniform:3"], 1e-3)
        assert all(g.weights.dtype == getattr(torch, dtype) for g in res.groups.values())
    config["dtype"] = {"diag": {1: "float32", 2: "float64"}}  # a dtype per model
    res = _train_once(config, "cpu", ["diag"], {"diag": [1, 2]}, ["uniform:3"], 1e-3)
    assert {L: g.weights.dtype for (_, L), g in res.groups.items()} == {1: torch.float32, 2: torch.float64}
    with pytest.raises(ValueError, match="dtype must be one value"):
        _train_once(config, "cpu", ["diag"], [1, 2], ["uniform:3"], 1e-3)
    res = ex.run("icl_diag7_float64", overrides={"n_eval": 200, "n_val": 100, "steps": 20}, cache=False)
    kinds = {(r["arm"], r["kind"]) for r in res.rows}
    assert kinds == {(a, k) for a in ("float32", "float64") for k in ("table", "curve")}


def test_splice_replaces_whole_models_and_checks_the_recipe(tmp_path):
    small = {
        "params": ["diag"],
        "depths": {"diag": [1, 2]},
        "noise": ["uniform:1", "uniform:5"],
        "steps": 2,
        "batch_size": 8,
        "n_eval": 200,
        "n_val": 100,
        "profile_n": 50,
        "profile_sigmas": [1.0],
        "profile_noise": ["uniform:5"],
        "record_every": 1,
        "keep_weights": False,
    }
    base = ex.run("icl_mixed_noise", overrides=small, cache=False)
    ex.write_result(base, tmp_path / "base", command="base")
    recipe = {**base.config, "steps": {"diag": {1: 2, 2: 4}}}
    longer = {**small, "depths": {"diag": [1, 2]}, "steps": recipe["steps"], "n_seeds": 2}
    long = ex.run("icl_mixed_noise", overrides=longer, cache=False)
    ex.write_result(long, tmp_path / "long", command="long")
    base_run = ("icl_mixed_noise", tmp_path / "base")
    long_run = ("icl_mixed_noise", tmp_path / "long", [("diag", 2)])
    path = icl.splice(base_run, [long_run], tmp_path / "out", scale="book", recipe=recipe)
    out = ex.load_result("icl_mixed_noise", "book", directory=path.parent)
    table = [r for r in out.rows if r["kind"] == "table"]
    # depth 1 from the base (one seed, 2 steps), depth 2 from the long run (two seeds, 4 steps)
    layers_seeds = sorted((r["n_layers"], r["seed"]) for r in table)
    assert layers_seeds == [(1, 0), (1, 0), (2, 0), (2, 0), (2, 1), (2, 1)]
    for run, L in ((base, 1), (long, 2)):
        want = [r["adjusted"] for r in run.rows if r["kind"] == "table" and r["n_layers"] == L]
        assert [r["adjusted"] for r in table if r["n_layers"] == L] == pytest.approx(want, rel=1e-12)
    assert {r["kind"] for r in out.rows} == {"table", "profile"}
    assert out.meta["commands"] == ["base", "long"]
    walls = [base.meta["timing"]["wall_s"], long.meta["timing"]["wall_s"]]
    assert out.meta["timing"]["wall_s"] == pytest.approx(sum(walls), abs=0.1)
    assert {r["n_layers"] for r in out.rows if r["kind"] == "profile"} == {1, 2}
    wrong = {**recipe, "steps": {"diag": {1: 2, 2: 3}}}
    with pytest.raises(ValueError, match="steps=4, the recipe's is 3"):
        icl.splice(base_run, [long_run], tmp_path / "bad", scale="book", recipe=wrong)
    with pytest.raises(ValueError, match="batch_size"):
        icl.splice(base_run, [long_run], tmp_path / "bad", scale="book", recipe={**recipe, "batch_size": 16})
    # the dtype is checked per model; a result from before the setting has none: it trained in float32
    f64 = ex.run("icl_mixed_noise", overrides={**longer, "dtype": "float64"}, cache=False)
    ex.write_result(f64, tmp_path / "f64", command="f64")
    f64_run = ("icl_mixed_noise", tmp_path / "f64", [("diag", 2)])
    with pytest.raises(ValueError, match=r"trained \(diag, 2\) with dtype=float64, the recipe's is float32"):
        icl.splice(base_run, [f64_run], tmp_path / "bad", scale="book", recipe=recipe)
    mixed = {**recipe, "dtype": {"diag": {1: "float32", 2: "float64"}}}
    path = icl.splice(base_run, [f64_run], tmp_path / "out_f64", scale="book", recipe=mixed)
    spliced = ex.load_result("icl_mixed_noise", "book", directory=path.parent).config
    assert [icl.model_settings(spliced, "diag", L).dtype for L in (1, 2)] == ["float32", "float64"]
    old = ex.load_result("icl_mixed_noise", "book", directory=tmp_path / "base")
    del old.config["dtype"]
    ex.write_result(old, tmp_path / "old", command="base")
    icl.splice(
        ("icl_mixed_noise", tmp_path / "old"), [long_run], tmp_path / "out_old", scale="book", recipe=recipe
    )
    with pytest.raises(ValueError, match=r"trained \(diag, 1\) with dtype=float32, the recipe's is float64"):
        icl.splice(("icl_mixed_noise", tmp_path / "old"), [f64_run], tmp_path / "bad", scale="book",
                   recipe={**recipe, "dtype": "float64"})  # fmt: skip
    # a learning-rate sweep of the recipe: its choice and its wall time go into the spliced result
    # the recipe's rate (3e-3) against one that cannot train (1e-9): the sweep keeps the recipe's
    rate = recipe["lr"]["diag"]
    arms = {"a": {"lr": rate}, "b": {"lr": {"diag": {1: 1e-9, 2: 1e-9}}}}
    sweep = ex.run("icl_lr_sweep", overrides={**recipe, "reruns": 0, "arms": arms}, cache=False)
    ex.write_result(sweep, tmp_path / "sweep", command="sweep")
    sweep_run = ("icl_lr_sweep", tmp_path / "sweep")
    path = icl.splice(
        base_run, [long_run], tmp_path / "out2", scale="book", recipe=recipe, lr_sweep=sweep_run
    )
    out = ex.load_result("icl_mixed_noise", "book", directory=path.parent)
    rates = out.meta["lr_sweep"]["rates"]["diag"]
    for L in (1, 2):
        assert rates[str(L)]["before"] == rates[str(L)]["chosen"] == rate
        assert set(rates[str(L)]["scores"]) == {"0.003", "1e-09"}
    assert out.meta["commands"] == ["base", "long", "sweep"]
    walls.append(sweep.meta["timing"]["wall_s"])
    assert out.meta["timing"]["wall_s"] == pytest.approx(sum(walls), abs=0.1)
    with pytest.raises(ValueError, match=r"icl_lr_sweep trained \(diag, 2\) with steps=4, the recipe's is 3"):
        icl.splice(base_run, [long_run], tmp_path / "bad", scale="book", recipe=wrong, lr_sweep=sweep_run)
    # two sweeps: each model's rate from the last that trained it, with the recipe's steps and
    # schedule (here a second sweep of the 2-layer model, whose recipe changes its schedule)
    assert recipe["lr_schedule"] == "cosine"  # the book scale's
    cosine = {**recipe, "lr_schedule": {"diag": {1: "cosine", 2: "warmup_stable_decay"}}}
    deep = {
        **cosine,
        "depths": {"diag": [2]},
        "lr_schedule": "warmup_stable_decay",
        "reruns": 0,
        "arms": arms,
    }
    sweep_deep = ex.run("icl_lr_sweep_seeds", overrides=deep, cache=False)
    ex.write_result(sweep_deep, tmp_path / "sweep_deep", command="sweep deep")
    long_cos = ex.run(
        "icl_mixed_noise", overrides={**longer, "lr_schedule": "warmup_stable_decay"}, cache=False
    )
    ex.write_result(long_cos, tmp_path / "long_cos", command="long cosine")
    long_cos_run = ("icl_mixed_noise", tmp_path / "long_cos", [("diag", 2)])
    both = [sweep_run, ("icl_lr_sweep_seeds", tmp_path / "sweep_deep")]
    path = icl.splice(base_run, [long_cos_run], tmp_path / "out3", scale="book", recipe=cosine, lr_sweep=both)
    out = ex.load_result("icl_mixed_noise", "book", directory=path.parent)
    assert out.meta["lr_sweep"]["results"] == ["icl_lr_sweep", "icl_lr_sweep_seeds"]
    rates = out.meta["lr_sweep"]["rates"]["diag"]
    assert (rates["1"]["sweep"], rates["2"]["sweep"]) == ("icl_lr_sweep", "icl_lr_sweep_seeds")
    assert out.meta["commands"] == ["base", "long cosine", "sweep", "sweep deep"]
    with pytest.raises(ValueError, match="with lr_schedule=cosine, the recipe's is warmup_stable_decay"):
        icl.splice(
            base_run, [long_cos_run], tmp_path / "bad", scale="book", recipe=cosine, lr_sweep=sweep_run
        )
    with pytest.raises(ValueError, match="with lr_schedule=cosine, the recipe's is warmup_stable_decay"):
        icl.splice(base_run, [long_run], tmp_path / "bad", scale="book", recipe=cosine, lr_sweep=both)
    # a sweep whose choice is not the recipe's rate: the same sweep with arm b's losses made tiny
    sweep.rows = [{**r, "adjusted_val": 1e-6} if r["arm"] == "b" else r for r in sweep.rows]
    ex.write_result(sweep, tmp_path / "sweep2", command="sweep")
    with pytest.raises(
        ValueError, match=r"the recipe trains \(diag, 1\) at 0.003, icl_lr_sweep chooses 1e-09"
    ):
        icl.splice(base_run, [long_run], tmp_path / "bad", scale="book", recipe=recipe,
                   lr_sweep=("icl_lr_sweep", tmp_path / "sweep2"))  # fmt: skip


def test_reruns_train_with_the_steps_of_their_model():
    """Steps per model (``{param: {L: steps}}``): each model and its re-run train for its own."""
    tiny = {**_FAILING, "noise": ["uniform:1"], "steps": {"diag": {1: 4, 2: 6}}, "record_every": 2}
    res = ex.run("icl_mixed_noise", "cpu", overrides=tiny, cache=False)
    assert res.meta["reruns"]
    curves = [r for r in res.rows if r["kind"] == "curve"]
    assert [r["step"] for r in curves if r["n_layers"] == 1] == [2, 4]
    assert [r["step"] for r in curves if r["n_layers"] == 2] == [2, 4, 6]
    with pytest.raises(ValueError, match="steps must be one value"):
        _train_once({**ex.get("icl_mixed_noise").config("book"), "steps": {"diag": {1: 4, 2: 6}}},
                        "cpu", ["diag"], [1, 2], ["uniform:1"], 1e-3)  # fmt: skip


def test_lr_sweep_is_the_table_recipe_at_three_rates():
    cpu, table = ex.get("icl_lr_sweep").config("cpu"), ex.get("icl_mixed_noise").config("cpu")
    same = ("params", "depths", "batch_size", "betas", "max_grad_norm", "patience")
    assert all(cpu[k] == table[k] for k in same + ("n_eval", "eval_seed", "n_val"))
    for param, depths in table["depths"].items():  # the table's steps and schedule, but 7-layer
        for L in depths:  # FULL's, whose recipe changed after this sweep (icl_full7_sweep sweeps it)
            for key in ("steps", "lr_schedule"):
                want = (24_000, "warmup_stable_decay") if (param, L) == ("full", 7) else None
                got = icl.per_model(cpu[key], param, L)
                assert got == (want[key == "lr_schedule"] if want else icl.per_model(table[key], param, L))
    full7 = ex.get("icl_full7_sweep").config("cpu")
    assert (full7["params"], full7["depths"]) == (["full"], {"full": [7]})
    for key in ("steps", "lr_schedule"):
        assert full7[key] == icl.per_model(table[key], "full", 7)
    assert {
        k: v for k, v in full7.items() if k not in ("params", "depths", "steps", "lr_schedule", "arms")
    } == {k: v for k, v in cpu.items() if k not in ("params", "depths", "steps", "lr_schedule", "arms")}
    assert [arm["lr"]["full"][7] for arm in full7["arms"].values()] == pytest.approx([1e-4, 3e-4, 9e-4])
    pilot = ex.get("icl_table_6k").config("cpu")["lr"]  # the sweep is around the pilot's rates
    assert cpu["lr"] == pilot
    assert cpu["reruns"] == 0 and (cpu["seed_start"], cpu["n_seeds"]) == (0, 1)
    assert list(cpu["arms"]) == ["lr/3", "lr", "3 lr"]
    for param, depths in table["depths"].items():
        for L in depths:
            rate = _lr_of(pilot, param, L)
            got = [_lr_of(arm["lr"], param, L) for arm in cpu["arms"].values()]
            assert got == pytest.approx([rate / 3, rate, 3 * rate], rel=2e-3), (param, L)
    res = ex.run("icl_lr_sweep", overrides={"n_eval": 200, "n_val": 100}, cache=False)
    assert [(r["arm"], r["param"], r["n_layers"]) for r in res.rows][:3] == [
        ("lr/3", "diag", 1),
        ("lr/3", "diag", 2),
        ("lr/3", "full", 1),
    ]
    assert len(res.rows) == 9 and len(icl.lr_choice(res.rows)) == 3
    seeds = ex.get("icl_lr_sweep_seeds").config("cpu")  # the same sweep on other seeds
    assert (seeds["seed_start"], seeds["n_seeds"]) == (1, 2) and seeds["arms"] == cpu["arms"]
    assert {k: v for k, v in seeds.items() if k not in ("params", "depths", "seed_start", "n_seeds")} == {
        k: v for k, v in cpu.items() if k not in ("params", "depths", "seed_start", "n_seeds")
    }


def test_lr_choice_takes_the_geometric_mean_over_noise_settings():
    rows = []
    # DIAG 3L: rate 1e-3 wins on the geometric mean (sqrt(0.1 * 0.4) = 0.2 < sqrt(0.2 * 0.3)) though
    # the arithmetic means tie (0.25) and 3e-3 wins one of the two noise settings
    values = {
        ("diag", 3): {1e-3: [0.1, 0.4], 3e-3: [0.2, 0.3], 3e-4: [0.15, 0.5]},
        ("full", 7): {3e-4: [0.01, 0.02], 9e-4: [0.001, np.inf], 1e-4: [0.02, 0.05]},  # other rates
    }
    for (param, L), by_rate in values.items():
        for lr, vals in by_rate.items():
            for noise, v in zip(["uniform:1", "uniform:7"], vals, strict=True):
                rows.append({"kind": "table", "param": param, "n_layers": L, "noise": noise, "lr": lr,
                             "diverged": False, "adjusted_val": v})  # fmt: skip
    rows.append({**rows[0], "kind": "profile", "adjusted_val": 0.0})  # other kinds are ignored
    out = icl.lr_choice(rows)
    assert out.loc[("diag", 3), "chosen"] == 1e-3 and out.loc[("full", 7), "chosen"] == 3e-4
    assert out.loc[("diag", 3), "score@0.001"] == pytest.approx(0.2)
    assert out.loc[("diag", 3), "runner_up"] == pytest.approx(np.sqrt(0.06) / 0.2)
    assert out.loc[("full", 7), "runner_up"] == pytest.approx(np.sqrt(1e-3 / 2e-4))
    assert out.loc[("full", 7), "score@0.0009"] == np.inf and out.loc[("full", 7), "nonfinite"] == 1
    assert np.isnan(out.loc[("full", 7), "score@0.001"]) and np.isnan(out.loc[("diag", 3), "score@0.0009"])
    # a diverged run scores inf whatever its loss
    rows[2]["diverged"] = True  # diag 3, rate 3e-3, uniform:1
    assert icl.lr_choice(rows).loc[("diag", 3), "score@0.003"] == np.inf
    rows[2]["diverged"] = False
    # with the re-run rule, full 7's diverged run at 9e-4 counts with its run at 3e-4 (0.02)
    fallback = icl.lr_choice(rows, rerun_lr_factor=1 / 3).loc[("full", 7)]
    assert fallback["score@0.0009"] == pytest.approx(np.sqrt(0.001 * 0.02)) and fallback["best"] == 9e-4
    assert fallback["nonfinite"] == 1
    # the fallback is the same seed's run: with a second seed whose run at 3e-4 is 0.5, full 7's
    # diverged run of seed 0 still counts with seed 0's 0.02
    seed1 = [{**r, "seed": 1, "adjusted_val": 0.5} for r in rows if r["param"] == "full"]
    two = icl.lr_choice(seed1 + [{**r, "seed": 0} for r in rows], rerun_lr_factor=1 / 3)  # seed 1 first
    assert two.loc[("full", 7), "score@0.0009"] == pytest.approx((0.001 * 0.02 * 0.5**2) ** 0.25)
    # a current rate is kept unless the best is more than margin better
    kept = icl.lr_choice(rows, current={"diag": 3e-3, "full": 3e-4}, margin=0.25)
    assert kept.loc[("diag", 3), "gain"] == pytest.approx(np.sqrt(0.06) / 0.2)  # 1.22 < 1.25: kept
    assert kept.loc[("diag", 3), "chosen"] == 3e-3 and kept.loc[("diag", 3), "best"] == 1e-3
    moved = icl.lr_choice(rows, current={"diag": 3e-3, "full": 3e-4}, margin=0.2)
    assert moved.loc[("diag", 3), "chosen"] == 1e-3 and moved.loc[("full", 7), "chosen"] == 3e-4
    with pytest.raises(ValueError, match="did not try"):
        icl.lr_choice(rows, current=2e-3)
    with pytest.raises(ValueError, match="margin"):
        icl.lr_choice(rows, margin=-0.1)
    with pytest.raises(ValueError, match="missing"):
        icl.lr_choice([{k: v for k, v in r.items() if k != "adjusted_val"} for r in rows])
    with pytest.raises(ValueError, match="same noise settings"):
        icl.lr_choice(rows[1:])
    with pytest.raises(ValueError, match="not be empty"):
        icl.lr_choice([])


def test_every_icl_experiment_has_depths_and_per_model_settings_for_each_of_its_models():
    """A scale whose ``depths`` dict lacks one of its ``params``, or whose per-model rate, steps or
    schedule lacks one of its models, fails only when run (icl_table_6k's book scale did once)."""
    for name in ex.names():
        if not name.startswith("icl_"):
            continue
        for scale in ex.get(name).scales:
            config = ex.get(name).config(scale)
            depths = config.get("depths")
            if not isinstance(depths, dict):
                continue
            arms = config.get("arms") or {}
            # an experiment of arms trains each arm's changes to the config (where they are a dict)
            configs = (
                [{**config, **arm} for arm in arms.values()]
                if arms and all(isinstance(arm, dict) for arm in arms.values())
                else [config]
            )
            for cfg in configs:
                for param in cfg["params"]:
                    assert param in cfg["depths"], (name, scale, param)
                    for L in cfg["depths"][param]:
                        for key in ("lr", "steps", "lr_schedule", "dtype"):
                            if key in cfg:
                                icl.per_model(cfg[key], param, L)  # a KeyError names the gap


def _csv(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def assert_same_numbers(got, want, rel=1e-12, where="top"):
    """``got`` equals ``want`` (nested lists, dicts, strings), numbers and numeric strings to ``rel``."""

    def number(x):
        if isinstance(x, bool):
            return None
        if isinstance(x, (int, float)):
            return float(x)
        try:
            return float(x) if isinstance(x, str) else None
        except ValueError:
            return None

    if isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), where
        for k in want:
            assert_same_numbers(got[k], want[k], rel, f"{where}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same_numbers(g, w, rel, f"{where}[{i}]")
    elif number(want) is not None and number(got) is not None and got != want:
        g, w = number(got), number(want)
        assert (math.isnan(g) and math.isnan(w)) or math.isclose(g, w, rel_tol=rel, abs_tol=0.0), (
            where,
            got,
            want,
        )
    else:
        assert got == want, (where, got, want)


def test_assert_same_numbers_fails_beyond_its_tolerance():
    assert_same_numbers({"a": [1.0, "0.06905173667763978", "x"]}, {"a": [1.0, "0.0690517366776398", "x"]})
    for got in ({"a": [1.0, "0.069051737", "x"]}, {"a": [1.0, "0.0690517366776398", "y"]}, {"b": []}):
        with pytest.raises(AssertionError):
            assert_same_numbers(got, {"a": [1.0, "0.0690517366776398", "x"]})


def test_the_committed_cpu_table_is_its_runs_spliced(tmp_path):
    # the table's recorded commands are table_commands', and splicing the committed runs as
    # CPU_TABLE_RUNS says gives the committed table: its text exactly, its numbers to 1e-12 relative
    # (splicing recomputes the learning-rate sweep's scores, whose last digit depends on the CPU)
    results = Path(icl.__file__).parents[2] / "results"
    committed = ex.load_result("icl_mixed_noise", "cpu")
    assert sum(icl.table_commands(), []) == committed.meta["commands"]
    runs = icl.CPU_TABLE_RUNS
    names = [runs["base"], *runs["replacements"], *runs["lr_sweep"]]
    path = icl.splice_table(dict.fromkeys(names, results), tmp_path)
    assert_same_numbers(_csv(path), _csv(results / "icl_mixed_noise-cpu.csv"))
    spliced = json.loads(path.with_suffix(".json").read_text())
    assert_same_numbers(spliced, json.loads((results / "icl_mixed_noise-cpu.json").read_text()))
    with pytest.raises(ValueError, match=r"missing \['icl_full7_sweep'\]"):
        icl.splice_table(dict.fromkeys(names[:-1], results), tmp_path)
    with pytest.raises(ValueError, match="parts must be"):
        icl.table_commands(parts=0)


def test_reproduce_table_runs_merges_and_splices(tmp_path):
    # the book scale: icl_table_6k in two seed splits, one model of icl_table_long replacing the base's
    runs = {
        "base": "icl_table_6k",
        "replacements": {"icl_table_long": [("diag", 2)]},
        "lr_sweep": [],
        "seed_splits": {"icl_table_6k": [{"n_seeds": 1}, {"seed_start": 1, "n_seeds": 1}]},
    }
    commands = icl.table_commands(runs, scale="book", parts=1)
    assert commands[1] == [
        "python -m attnlab.experiments run icl_table_6k --scale book --set part=0/1 --set seed_start=1 "
        "--set n_seeds=1 --no-cache"
    ]
    recipe = ex.get("icl_table_6k").config("book")
    path = icl.reproduce_table(
        tmp_path / "table", tmp_path / "work", runs, scale="book", parts=1, recipe=recipe
    )
    out = ex.load_result("icl_mixed_noise", "book", directory=path.parent)
    assert out.meta["commands"] == sum(commands, [])
    table = {(r["param"], r["n_layers"], r["seed"]): r for r in out.rows if r["kind"] == "table"}
    assert sorted(table) == [("diag", 1, 0), ("diag", 1, 1), ("diag", 2, 0), ("full", 1, 0), ("full", 1, 1)]
    long = ex.load_result("icl_table_long", "book", directory=tmp_path / "work" / "icl_table_long-0")
    (want,) = [r for r in long.rows if r["kind"] == "table" and r["n_layers"] == 2]
    assert table[("diag", 2, 0)]["adjusted"] == want["adjusted"]
    second = ex.load_result("icl_table_6k", "book", directory=tmp_path / "work" / "icl_table_6k-1")
    assert {r["seed"] for r in second.rows if r["kind"] == "table"} == {1}


def test_table_6k_again_is_icl_table_6k_with_only_the_models_the_table_keeps_and_their_company():
    again, base = ex.get("icl_table_6k_again").config("cpu"), ex.get("icl_table_6k").config("cpu")
    assert {k for k in base if base[k] != again[k]} == {"depths"}
    kept_from_base = {(p, L) for p, Ls in base["depths"].items() for L in Ls} - {
        m for ms in icl.CPU_TABLE_RUNS["replacements"].values() for m in ms
    }
    trained = {(p, L) for p, Ls in again["depths"].items() for L in Ls}
    assert kept_from_base <= trained
    # with every shallower model the re-run rule compared them with in icl_table_6k
    for p, L in kept_from_base:
        assert [d for d in base["depths"][p] if d < L] == [d for d in again["depths"][p] if d < L]


def test_table1_has_every_model_and_noise_distribution_of_the_paper():
    from attnlab.experiments.in_context.table1 import TABLE1, TABLE1_BASELINES, TABLE1_NOISE

    assert len(TABLE1_NOISE) == 10 and TABLE1_NOISE == icl.TABLE1_NOISE
    assert all(len(v) == len(TABLE1_NOISE) for v in [*TABLE1.values(), *TABLE1_BASELINES.values()])
    assert TABLE1[("diag", 7)][0] == 2.5e-12 and TABLE1[("full", 3)][-1] == 0.113
    assert TABLE1_BASELINES["tuned"][4] == 0.037


# Table 1 as the paper prints it (its text copied a second time, independently of table1.py's):
# a typo in one of the library's values makes the two differ.
PAPER_TABLE1 = """
1L GD++ 1.768 1.639 1.396 1.175 1.015 0.907 0.841 0.806 | 1.007 0.819
   DIAG 1.767 1.639 1.396 1.175 1.015 0.906 0.841 0.806 | 1.007 0.819
   FULL 1.768 1.640 1.397 1.176 1.016 0.907 0.842 0.806 | 1.008 0.820
2L GD++ 0.341 0.295 0.243 0.265 0.347 0.366 0.440 0.530 | 0.305 0.427
   DIAG 0.265 0.214 0.173 0.188 0.219 0.242 0.254 0.259 | 0.201 0.246
   FULL 0.264 0.215 0.173 0.188 0.220 0.245 0.259 0.263 | 0.202 0.276
3L GD++ 0.019 0.021 0.071 0.161 0.259 0.344 0.454 0.530 | 0.222 0.422
   DIAG 0.013 0.015 0.048 0.087 0.109 0.118 0.121 0.123 | 0.098 0.119
   FULL 0.012 0.015 0.049 0.075 0.101 0.117 0.124 0.127 | 0.076 0.113
4L GD++ 9.9e-5 0.014 0.066 0.160 0.258 0.344 0.454 0.530 | 0.222 0.422
   DIAG 1.2e-4 0.006 0.024 0.041 0.050 0.059 0.065 0.073 | 0.043 0.062
   FULL 1.6e-4 0.005 0.021 0.038 0.052 0.065 0.068 0.076 | 0.032 0.061
5L DIAG 1.8e-7 0.004 0.016 0.029 0.041 0.051 0.058 0.062 | 0.026 0.051
   FULL 1.8e-7 0.002 0.015 0.026 0.038 0.048 0.059 0.065 | 0.016 0.048
7L GD++ 2.7e-12 0.009 0.066 0.161 0.265 0.344 0.454 0.530 | 0.222 0.422
   DIAG 2.5e-12 0.002 0.014 0.027 0.040 0.047 0.052 0.059 | 0.018 0.046
   FULL 2.5e-12 0.002 0.010 0.025 0.035 0.047 0.050 0.057 | 0.010 0.035
ConstRR  0     0.009 0.066 0.161 0.265 0.365 0.454 0.530 | 0.222 0.422
AdaRR    0     0.003 0.016 0.034 0.053 0.068 0.081 0.092 | 0.051 0.084
TunedRR  0     0.002 0.010 0.023 0.037 0.049 0.060 0.068 | 0.021 0.054
"""


def test_table1_is_the_papers_table_value_for_value():
    from attnlab.experiments.in_context.table1 import TABLE1, TABLE1_BASELINES

    names = {"GD++": "gdpp", "DIAG": "diag", "FULL": "full"}
    baselines = {"ConstRR": "const", "AdaRR": "ada", "TunedRR": "tuned"}
    paper, L = {}, None
    for line in PAPER_TABLE1.strip().splitlines():
        words = line.replace("|", " ").split()
        if words[0] in baselines:
            paper[baselines[words[0]]] = [float(v) for v in words[1:]]
            continue
        if words[0][:-1].isdigit():
            L, words = int(words[0][:-1]), words[1:]
        paper[names[words[0]], L] = [float(v) for v in words[1:]]
    assert paper == {**TABLE1, **TABLE1_BASELINES}


def test_the_target_is_15_percent_or_0002_below_001():
    from attnlab.experiments.in_context.table1 import within

    assert within([0.114, 0.116, 0.0029, 0.0031], [0.1, 0.1, 0.001, 0.001]).tolist() == [
        True,
        False,
        True,
        False,
    ]
    assert within(0.0019, 2.5e-12)  # the absolute rule below 0.01
    with pytest.raises(ValueError, match="value and paper"):
        within([1.0, 2.0], [1.0])


def test_cells_are_the_best_seeds_that_table1_has_scored_by_the_target():
    from attnlab.experiments.in_context.table1 import cells, label

    res = ex.load_result("icl_mixed_noise", "cpu")
    df = cells(res)
    assert len(df) == 150 and df[["param", "L", "noise"]].drop_duplicates().shape[0] == 150
    assert not ((df.param == "gdpp") & (df.L == 5)).any()  # not in Table 1
    assert df.met.sum() == 134
    assert label("uniform:3") == "U(0, 3)" and label("categorical:1,3,5") == "{1, 3, 5}"
    with pytest.raises(ValueError, match="spec"):
        label("gauss:3")
    with pytest.raises(ValueError, match="result"):
        cells([1, 2])


def test_the_recipes_validation_prompts_are_the_committed_runs():
    # a stored 3-layer DIAG model evaluated on the recipe's validation prompts gives the validation
    # loss its run committed (float64, same prompts): a change of their seed or size fails
    from attnlab.experiments.in_context.recipe import Recipe

    res = ex.load_result("icl_table_diag3", "cpu")
    config = ex.get(res.name).config(res.scale, res.config)
    recipe = Recipe.from_config({**config, "part": "all"})  # the run was trained in parts, merged
    noise, seed = "uniform:3", 1
    (row,) = [
        r
        for r in res.rows
        if r["kind"] == "table"
        and (r["param"], r["n_layers"], r["noise"], r["seed"]) == ("diag", 3, noise, seed)
    ]
    model = trained_model(res, "diag", 3, noise, seed)
    val = float(recipe.validation.adjusted(model, noise)[0].mean())
    assert val == pytest.approx(row["adjusted_val"], rel=1e-9)
