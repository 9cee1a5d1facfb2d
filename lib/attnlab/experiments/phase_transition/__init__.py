"""Part II's experiments (pt = phase transition; paper B, Cui et al. 2024).

* :mod:`.engine` – :func:`train_batched`: GD / Adam from several starts and seeds in one batch,
  the helpers that turn its arrays into result rows (:func:`rows_from`, :func:`summarize`), and
  :func:`book_run`, the chapters' access to a book-scale experiment (committed, or run anew);
* :mod:`.simulations` – the registered finite-d experiments ``pt_gd``, ``pt_curves``,
  ``pt_finite_d``, ``pt_adam_random``, ``pt_untied``, ``pt_value``, ``pt_correlated``,
  ``pt_metastable``;
* :mod:`.theory` – ``pt_theory``, ``pt_phase_diagram``, ``pt_transition_lines``, ``pt_crossing_scan``,
  ``pt_branches``, ``pt_constrained``, ``pt_quadrature``
  (the fixed-point solver over grids);
* :mod:`.metastable` – ``pt_authors_rules``, ``pt_long_gd``: side studies of the metastable branches;
* :mod:`.histogram` – ``pt_histogram``, the bridge to Part I.

Experiment names start with ``pt_`` (phase transition); committed results are
``lib/attnlab/results/pt_*``.
"""

from attnlab.experiments.phase_transition import histogram, metastable, simulations, theory
from attnlab.experiments.phase_transition.engine import (
    INITS,
    alpha_grid,
    book_run,
    rows_from,
    run_alphas,
    summarize,
    train_batched,
)

__all__ = [
    "INITS",
    "alpha_grid",
    "book_run",
    "histogram",
    "rows_from",
    "metastable",
    "run_alphas",
    "simulations",
    "summarize",
    "theory",
    "train_batched",
]
