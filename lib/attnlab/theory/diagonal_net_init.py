"""How the initialisation shapes gradient flow of the diagonal network (Part I, chapters 2 and 3).

The names the chapters import as ``di``; they live in :mod:`attnlab.theory.diagonal_net` (and
are re-exported there too):

* escape from a small initialisation and the sign rule (prop. ``prop-sign-rule``):
  :mod:`~attnlab.theory.diagonal_net.escape`;
* the Hessian and the asymptotic rate at a minimum: :mod:`~attnlab.theory.diagonal_net.rates`;
* the closed form of a whole column with an orthogonal part (thm. ``thm-column``):
  :mod:`~attnlab.theory.diagonal_net.closed_form`.
"""

from attnlab.theory.diagonal_net.closed_form import column_flow, column_matrix
from attnlab.theory.diagonal_net.escape import escape_matrix, escape_rates, sign_rule
from attnlab.theory.diagonal_net.rates import asymptotic_rate, asymptotic_rate_df, hessian

__all__ = [
    "escape_matrix",
    "sign_rule",
    "escape_rates",
    "hessian",
    "asymptotic_rate",
    "asymptotic_rate_df",
    "column_matrix",
    "column_flow",
]
