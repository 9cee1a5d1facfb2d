"""Part III's table: ``icl_mixed_noise`` and the runs the committed table was made of.

One run of the table reads top to bottom in :func:`table_rows`: the configuration becomes a
:class:`~.recipe.Recipe` (every decision made before training), which
:func:`~attnlab.icl_training.train_plan` trains, :func:`~.evaluate.evaluate` measures and
:func:`~.evaluate.score` turns into result rows.

``icl_mixed_noise`` runs at three scales (:mod:`.recipe`: ``book``, a demo; ``paper``, the reduced
configuration of the committed paper-scale run, whose three ``--set part=k/3`` processes were
joined by :func:`~.reproduce.merge_parts`, and ``--set steps=200000 --set batch_size=2048 --set
lr=0.0001 --set lr_schedule=constant --set n_seeds=5`` restores the paper's optimisation on a
GPU; ``cpu``, the table's recipe). The runs the committed table joins (``icl_table_6k``,
``icl_table_long``, ``icl_table_rates``, ``icl_table_full7``) and the runs that kept weights are
registered here; :func:`recipe_variant` registers the side studies on variants of the recipe
(:mod:`.lr_sweep`, :mod:`.side`).
"""

from __future__ import annotations

from attnlab.experiments import experiment
from attnlab.experiments.in_context.evaluate import evaluate, score
from attnlab.experiments.in_context.recipe import BOOK, CPU, CPU_TABLE, PAPER, Recipe
from attnlab.icl_training import train_plan


def table_rows(config: dict, device: str) -> tuple[list[dict], dict]:
    """One run of Part III's table: recipe, training, evaluation, scoring, in that order."""
    recipe = Recipe.from_config(config)
    trained = train_plan(recipe.plan, recipe.retry, recipe.validation, device)
    evaluation = evaluate(trained, recipe)
    return score(evaluation, recipe)


@experiment(
    "icl_mixed_noise",
    book=BOOK,
    paper=PAPER,
    cpu=CPU_TABLE,
    description="Train GD++/DIAG/FULL linear transformers on mixed-noise regression (Table 1)",
)
def icl_mixed_noise(config: dict, device: str) -> tuple[list[dict], dict]:
    return table_rows(config, device)


def _smoke(config: dict, **changes) -> dict:
    """The book scale of a chapter-04 experiment on the CPU recipe: a smoke run of one noise
    setting, 60 steps at batch 64, evaluated on few prompts (the chapters load the cpu results)."""
    smoke = {"noise": ["uniform:3"], "steps": 60, "batch_size": 64}
    return {**config, **smoke, "n_eval": 2000, "n_val": 500, "chunk": 1000, **changes}


def recipe_variant(name: str, config: dict, description: str, fn=None, **book_changes):
    """Register a chapter-04 experiment on variants of the CPU recipe: the ``cpu`` and ``paper``
    scales are ``config``, the book scale its :func:`_smoke` run with ``book_changes``; ``fn``
    defaults to :func:`arm_rows` (one arm per entry of ``config["arms"]``)."""
    return experiment(
        name, book=_smoke(config, **book_changes), paper=config, cpu=config, description=description
    )(fn or arm_rows)


def arm_rows(config: dict, device: str, kinds=("table",)) -> tuple[list[dict], dict]:
    """The rows of ``kinds`` (table rows by default) of every arm ``{name: changes to the config}``
    of ``config["arms"]``."""
    rows = []
    for arm, changes in config["arms"].items():
        got, _ = table_rows({**config, **changes}, device)
        rows += [{"arm": arm, **r} for r in got if r["kind"] in kinds]
    return rows, {}


def arm_curve_rows(config: dict, device: str) -> tuple[list[dict], dict]:
    """:func:`arm_rows` with the training curves of every arm (kind ``"curve"``)."""
    return arm_rows(config, device, kinds=("table", "curve"))


# The book scale (a smoke run) of the 7-layer FULL experiments: 2 layers at 7-layer FULL's rate.
FULL7_BOOK = {"depths": {"full": [2]}, "lr": {"full": CPU["lr"]["full"][7]}, "n_seeds": 1}


# The first run of the whole table, every model at the base recipe's 6,000 steps (it ran as
# icl_mixed_noise before the table's recipe gave some models 24,000 steps; the table keeps its
# other models, and chapter 04 compares the replaced ones).
icl_table_6k = recipe_variant(
    "icl_table_6k",
    CPU,
    "every model of the CPU table at the base recipe's 6,000 steps (chapter 4)",
    table_rows,
    params=["diag", "full"],
    depths={"diag": [1, 2], "full": [1]},
    n_seeds=1,
)

# The models the table keeps from icl_table_6k (DIAG and GD++ with 1, 2 and 7 layers, FULL with 1),
# trained again by today's library, with the shallower models the re-run rule compared them with
# and the same two parts and two seed runs (CPU_TABLE_RUNS): does the table's base reproduce?
_SIX_K_AGAIN = dict(CPU, depths={"diag": [1, 2, 3, 4, 5, 7], "gdpp": [1, 2, 3, 4, 5, 7], "full": [1]})
icl_table_6k_again = recipe_variant(
    "icl_table_6k_again",
    _SIX_K_AGAIN,
    "the models of the CPU table from icl_table_6k, trained again by today's library (chapter 4)",
    table_rows,
    params=["diag", "full"],
    depths={"diag": [1, 2], "full": [1]},
    n_seeds=1,
)


def _table_cells(
    name: str, depths: dict, description: str, book_depths: dict, keep_weights: bool = False, **changes
):
    """Register a run of some models of the table's recipe (``CPU_TABLE``, with ``changes``),
    ``depths`` ``{param: [depths]}``, for :func:`splice` (or, with ``keep_weights``, to keep the
    weights the table's runs did not); its book scale is a smoke run at ``book_depths``."""
    config = dict(CPU_TABLE, params=list(depths), depths=depths, keep_weights=keep_weights, **changes)
    return recipe_variant(name, config, description, table_rows, depths=book_depths, steps=60, n_seeds=1)


# The cells of the table whose recipe changed to 24,000 steps (CPU_TABLE), except 7-layer FULL
# (icl_full7_long ran it): the recipe on DIAG with 5 layers and FULL with 3 and 4, with the
# shallower models the re-run rule compares them with (DIAG with 4 layers, FULL with 1, at the
# recipe's 6,000 steps; a run of the whole table would have DIAG with 1-4 layers for the rule).
icl_table_long = _table_cells(
    "icl_table_long",
    {"diag": [4, 5], "full": [1, 3, 4]},
    "the cells of the CPU table that train for 24,000 steps, with the shallower models of the "
    "re-run rule (chapter 4)",
    {"diag": [1, 2], "full": [1]},
)

# The cells of the table whose rate the sweep changed (CPU_TABLE): DIAG with 3 and 4 layers and
# GD++ with 3, 4 and 5 at three times the pilot's rate, with the shallower models of the re-run
# rule (DIAG and GD++ with 1 and 2 layers, at the pilot's rate).
icl_table_rates = _table_cells(
    "icl_table_rates",
    {"diag": [1, 2, 3, 4], "gdpp": [1, 2, 3, 4, 5]},
    "the cells of the CPU table whose learning rate the sweep changed, with the shallower models of "
    "the re-run rule (chapter 4)",
    {"diag": [1, 3], "gdpp": [1]},
)

# 7-layer FULL by the table's recipe (cosine decay, 48,000 steps), alone: with no shallower model in
# the run, only a diverged model is re-run.
icl_table_full7 = _table_cells(
    "icl_table_full7",
    {"full": [7]},
    "7-layer FULL by the CPU table's recipe: a cosine decay over 48,000 steps (chapter 4)",
    {"full": [7]},
)

# 7-layer DIAG by the table's recipe in float64, alone (only a diverged model is re-run): the
# table's run (float32, in icl_table_6k) misses {1, 3}, where float32's range cuts runs short
# (icl_diag7_float64, at 4x the steps). Does float64 at the recipe's steps meet it?
icl_table_diag7_float64 = _table_cells(
    "icl_table_diag7_float64",
    {"diag": [7]},
    "7-layer DIAG by the CPU table's recipe in float64 (chapter 4)",
    {"diag": [7]},
    dtype="float64",
)

# Models of the table again, with their weights, so that the table's own models can be evaluated
# on other prompts (icl_eval_sets): DIAG with 1-3 layers as in icl_table_rates, FULL with 1 and 3
# as in icl_table_long and FULL with 7 as in icl_table_full7, bit for bit (each with the shallower
# models its re-run rule compares with, run as the same two parts).
icl_table_diag3 = _table_cells(
    "icl_table_diag3",
    {"diag": [1, 2, 3]},
    "DIAG with 1-3 layers of the CPU table (as in icl_table_rates), with their weights (chapter 4)",
    {"diag": [1, 3]},
    keep_weights=True,
)
icl_table_full3 = _table_cells(
    "icl_table_full3",
    {"full": [1, 3]},
    "FULL with 1 and 3 layers of the CPU table (as in icl_table_long), with their weights (chapter 4)",
    {"full": [1, 3]},
    keep_weights=True,
)
icl_table_full7_weights = _table_cells(
    "icl_table_full7_weights",
    {"full": [7]},
    "7-layer FULL of the CPU table (as in icl_table_full7), with its weights for icl_eval_sets",
    {"full": [7]},
    keep_weights=True,
)

# Every model of the held-out scoring (icl_scoring) needs its weights. The table's models whose
# runs kept none, trained again with their weights by the same recipe, as the same two parts:
# DIAG with 4 layers and GD++ with 1-4 as in icl_table_rates, DIAG with 5 layers and FULL with 4
# as in icl_table_long (each with the shallower models of its re-run rule; the scoring checks that
# they are the table's models, twin_rtol).
icl_table_rates_weights = _table_cells(
    "icl_table_rates_weights",
    {"diag": [1, 2, 3, 4], "gdpp": [1, 2, 3, 4, 5]},
    "the models of icl_table_rates trained again with their weights, for the held-out scoring",
    {"diag": [1, 3], "gdpp": [1]},
    keep_weights=True,
)
icl_table_long_weights = _table_cells(
    "icl_table_long_weights",
    {"diag": [4, 5], "full": [1, 3, 4]},
    "the models of icl_table_long trained again with their weights, for the held-out scoring",
    {"diag": [1, 2], "full": [1]},
    keep_weights=True,
)

# DIAG and GD++ with 7 layers come from the table's first run (icl_table_6k), which kept neither
# weights nor validation losses, and today's library does not train the same models again
# (icl_table_6k_again). That run again, with its weights: the held-out scoring scores its 7-layer
# models, which are not the table's.
icl_table_6k_weights = recipe_variant(
    "icl_table_6k_weights",
    dict(_SIX_K_AGAIN, keep_weights=True),
    "icl_table_6k_again with its weights: DIAG and GD++ with 7 layers for the held-out scoring",
    table_rows,
    params=["diag", "full"],
    depths={"diag": [1, 2], "full": [1]},
    n_seeds=1,
)

# Table 1's FULL rows with 2 and 5 layers, which the CPU table did not train: the table's recipe,
# FULL with 2 layers as FULL (and DIAG) with 1 and 2 (6,000 steps), FULL with 5 as FULL with 3 and
# 4 (24,000 steps; as DIAG with 5), with FULL 1-4 for the re-run rule, and their weights.
_FULL_STEPS = {1: 6000, 2: 6000, 3: 24_000, 4: 24_000, 5: 24_000}
icl_table_full25 = _table_cells(
    "icl_table_full25",
    {"full": [1, 2, 3, 4, 5]},
    "FULL with 2 and 5 layers (Table 1's rows the CPU table lacks) by the table's recipe, with FULL "
    "1-4 for the re-run rule and their weights",
    {"full": [2]},
    keep_weights=True,
    lr={"full": dict.fromkeys(_FULL_STEPS, 1e-3)},
    steps={"full": _FULL_STEPS},
    lr_schedule={"full": dict.fromkeys(_FULL_STEPS, "warmup_stable_decay")},
)
