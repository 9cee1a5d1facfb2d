"""Part III's experiments (``icl_*``): linear transformers learn in context (paper C, chapters 01–06).

The modules, in the order a run of the table goes through them:

- :mod:`.table1`: Table 1's values, the target a cell must meet (:func:`within`), labels.
- :mod:`.recipe`: the configurations of ``icl_mixed_noise`` (``BOOK``, ``PAPER``, ``CPU``,
  ``CPU_TABLE``) and :class:`Recipe`, which decides a run before it trains (the trainer's plan,
  per-model settings, the re-run rule and its validation prompts, the evaluation).
- :mod:`.evaluate`: :func:`evaluate` measures a trained run, :func:`score` writes its rows.
- :mod:`.table`: ``icl_mixed_noise`` (:func:`table_rows`: recipe → train → evaluate → score) and
  the runs the committed CPU table joins.
- :mod:`.lr_sweep`: the learning-rate sweeps and :func:`lr_choice`.
- :mod:`.reproduce`: how the committed table was made and how to make it again
  (:func:`merge_parts`, :func:`splice`, ``CPU_TABLE_RUNS``, :func:`table_commands`,
  :func:`reproduce_table`).
- :mod:`.scoring`: ``icl_scoring``, the table scored on held-out prompts by chapter 04's rule.
- :mod:`.tail_cause`: ``icl_tail_cause``, the cause of a deep model's heavy tail (its largest
  eigenvalue beyond the model's edge) shown by moving that eigenvalue.
- :mod:`.baselines`: ``icl_baselines``, the ridge baselines and the Bayes-optimal predictor.
- :mod:`.side`: side studies of the recipe, loaded by Part III's lab notes.
- :mod:`.trained`: chapter 05's trained models (:func:`trained_model`) and ``icl_decay``.
- :mod:`.beyond`: chapter 06's variants beyond the paper (``icl_beyond*``).

The tables of Part III's lab notes are built from these results in :mod:`attnlab.pages`.
"""

from attnlab.experiments.in_context import (
    baselines,
    beyond,
    lr_sweep,
    scoring,
    side,
    table,
    tail_cause,
    trained,
)
from attnlab.experiments.in_context.evaluate import evaluate, score
from attnlab.experiments.in_context.lr_sweep import lr_choice
from attnlab.experiments.in_context.recipe import Recipe, model_settings, per_model
from attnlab.experiments.in_context.reproduce import (
    CPU_TABLE_RUNS,
    merge_parts,
    reproduce_table,
    splice,
    splice_table,
    table_commands,
)
from attnlab.experiments.in_context.table import table_rows
from attnlab.experiments.in_context.table1 import TABLE1, TABLE1_NOISE, within
from attnlab.experiments.in_context.trained import trained_gated_model, trained_model

__all__ = [
    "CPU_TABLE_RUNS",
    "TABLE1",
    "TABLE1_NOISE",
    "Recipe",
    "baselines",
    "beyond",
    "evaluate",
    "lr_choice",
    "lr_sweep",
    "merge_parts",
    "model_settings",
    "per_model",
    "reproduce_table",
    "score",
    "scoring",
    "side",
    "splice",
    "splice_table",
    "table",
    "tail_cause",
    "table_commands",
    "table_rows",
    "trained",
    "trained_gated_model",
    "trained_model",
    "within",
]
