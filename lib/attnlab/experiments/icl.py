"""Part III experiments: mixed-noise in-context regression (paper C, section 6; chapters 04, 05).

One module per concern; this one keeps every public name importable from one place:

- :mod:`~attnlab.experiments.icl_core`: the task, the baselines (``icl_baselines``), evaluation
  and the batched trainer with its re-run rule; :func:`per_model` reads a per-model setting.
- :mod:`~attnlab.experiments.icl_table1`: Table 1's values and the target a cell must meet.
- :mod:`~attnlab.experiments.icl_recipe`: ``icl_mixed_noise`` at its ``book``, ``paper``
  (reduced) and ``cpu`` scales, the CPU recipe as one setting per model, the runs the committed
  table joins, and the learning-rate sweeps with :func:`lr_choice`.
- :mod:`~attnlab.experiments.icl_reproduce`: how the table was made and how to make it again
  (:func:`merge_parts`, :func:`splice`, ``CPU_TABLE_RUNS``, :func:`table_commands`,
  :func:`splice_table`, :func:`reproduce_table`).
- :mod:`~attnlab.experiments.icl_side`: side studies of the recipe (guards, basins, 7-layer
  FULL and DIAG, float64, the draw of the evaluation prompts), loaded by Part III's lab notes.
- :mod:`~attnlab.experiments.icl_trained`: chapter 05's trained models (:func:`trained_model`)
  and decayed attention (``icl_decay``).
"""

from attnlab.experiments.icl_core import (
    _dtype_of,
    _lr_of,
    _steps_of,
    _train_once,
    icl_baselines,
    per_model,
)
from attnlab.experiments.icl_recipe import (
    icl_full7_sweep,
    icl_lr_sweep,
    icl_lr_sweep_seeds,
    icl_mixed_noise,
    icl_table_6k,
    icl_table_6k_again,
    icl_table_diag3,
    icl_table_diag7_float64,
    icl_table_full3,
    icl_table_full7,
    icl_table_full7_weights,
    icl_table_long,
    icl_table_rates,
    lr_choice,
)
from attnlab.experiments.icl_reproduce import (
    CPU_TABLE_RUNS,
    merge_parts,
    reproduce_table,
    splice,
    splice_table,
    table_commands,
)
from attnlab.experiments.icl_side import (
    icl_diag7_float64,
    icl_diag7_rate,
    icl_diag7_schedule,
    icl_diag_deep_basins,
    icl_eval_sets,
    icl_full7_float64,
    icl_full7_long,
    icl_full7_longer,
    icl_full7_rates,
    icl_full7_schedule,
    icl_full_basins,
    icl_gdpp_basins,
    icl_seed_basins,
    icl_stability,
)
from attnlab.experiments.icl_table1 import TABLE1_NOISE
from attnlab.experiments.icl_trained import icl_decay, icl_trained_models, trained_model

__all__ = [
    "CPU_TABLE_RUNS",
    "TABLE1_NOISE",
    "_dtype_of",
    "_lr_of",
    "_steps_of",
    "_train_once",
    "icl_baselines",
    "icl_decay",
    "icl_diag7_float64",
    "icl_diag7_rate",
    "icl_diag7_schedule",
    "icl_diag_deep_basins",
    "icl_eval_sets",
    "icl_full7_float64",
    "icl_full7_long",
    "icl_full7_longer",
    "icl_full7_rates",
    "icl_full7_schedule",
    "icl_full7_sweep",
    "icl_full_basins",
    "icl_gdpp_basins",
    "icl_lr_sweep",
    "icl_lr_sweep_seeds",
    "icl_mixed_noise",
    "icl_seed_basins",
    "icl_stability",
    "icl_table_6k",
    "icl_table_6k_again",
    "icl_table_diag3",
    "icl_table_diag7_float64",
    "icl_table_full3",
    "icl_table_full7",
    "icl_table_full7_weights",
    "icl_table_long",
    "icl_table_rates",
    "icl_trained_models",
    "lr_choice",
    "merge_parts",
    "per_model",
    "reproduce_table",
    "splice",
    "splice_table",
    "table_commands",
    "trained_model",
]
