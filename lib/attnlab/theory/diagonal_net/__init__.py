"""Gradient flow of linear self-attention on histogram-like tasks as a diagonal linear network.

Part I of the book (chapters 2 and 3). This is the book's own reconstruction of the reduction in
the ICLR 2024 submission "Towards Analyzing Self-attention via Linear Neural Network" (OpenReview
4fVuBf5HE9), whose text and code are not public; every statement here is checked numerically in
the chapters and in ``tests/test_diagonal_net_*.py``.

Notation (columns ``q_k`` of ``Q``, ``m_k`` of ``M``; ``Q`` is the merged key-query matrix ``W``):

* ``l_df(Q, v) = 1/2 ||Q Diag(v) - M||_F^2``                         (eq. ``eq-ldf``)
* ``l_tf(Q, v) = 1/2 sum_a Delta_a S_a Delta_a^T``, ``Delta = Q Diag(v) - M`` with
  ``S_a = E[h_a h h^T]`` from :func:`attnlab.tasks.histogram.count_moments` (eq. ``eq-ltf``)
* conserved ``delta_k = v_k^2 - ||q_k||^2``                          (eq. ``eq-delta``)
* with ``a = q . m_hat``, ``r = a + v``, ``s = a - v``: ``z = r^2`` solves the Riccati equation
  ``z' = -z^2/2 + 2 ||m|| z + delta^2/2``                            (eq. ``eq-riccati``)
* exponential bounds ``l(t) <= l(t0) exp(-2 mu (t - t0))``           (thms. ``thm-exp-df``, ``thm-exp-tf``)
* the limit point ``v_k(inf)^2 = (delta_k + sqrt(delta_k^2 + 4 ||m_k||^2)) / 2``,
  ``q_k(inf) = m_k / v_k(inf)``                                      (eq. ``eq-limit``)

Everything is float64 numpy. Functions accept a leading time axis where that is natural
(``Q`` ``[T, d, d]``, ``v`` ``[T, d]``). One module per concept, all re-exported here:

- :mod:`~attnlab.theory.diagonal_net.reduction` — the losses ``l_df``, ``l_tf``, their gradients,
  the conserved ``delta``, the spectrum of the moments ``S_a``;
- :mod:`~attnlab.theory.diagonal_net.flow` — gradient flow and descent integrated numerically,
  the plateau length;
- :mod:`~attnlab.theory.diagonal_net.closed_form` — the r-s (Riccati) closed form and the closed
  form of a whole column;
- :mod:`~attnlab.theory.diagonal_net.rates` — exponential bounds, the Hessian, the asymptotic rate;
- :mod:`~attnlab.theory.diagonal_net.limit` — the limit point and the exercise checker;
- :mod:`~attnlab.theory.diagonal_net.escape` — escape from a small initialisation, the sign rule;
- :mod:`~attnlab.theory.diagonal_net.arguments` — the argument checks they share.
"""

from attnlab.theory.diagonal_net.closed_form import (
    closed_form_flow,
    column_flow,
    column_matrix,
    gamma,
    half_escape_times,
    riccati_z,
    rs_solution,
    verify_escape_times,
)
from attnlab.theory.diagonal_net.escape import (
    escape_alignment,
    escape_coordinates,
    escape_matrix,
    escape_rates,
    sign_df,
    sign_rule,
)
from attnlab.theory.diagonal_net.flow import (
    gradient_descent,
    gradient_flow,
    gradient_flow_tf,
    plateau_point,
    plateau_time,
)
from attnlab.theory.diagonal_net.limit import limit_point, verify_limit_point, verify_signs
from attnlab.theory.diagonal_net.rates import (
    asymptotic_rate,
    asymptotic_rate_df,
    bound_rate_df,
    bound_rate_tf,
    column_rates_df,
    exponential_bound_df,
    exponential_bound_tf,
    hessian,
    rate_constant,
    verify_asymptotic_rate,
)
from attnlab.theory.diagonal_net.reduction import (
    delta,
    grad_df,
    grad_tf,
    isotropic_constant,
    l_df,
    l_tf,
    moment_spectrum,
)

__all__ = [
    "l_df",
    "l_tf",
    "grad_df",
    "grad_tf",
    "gradient_flow",
    "gradient_flow_tf",
    "gradient_descent",
    "delta",
    "gamma",
    "riccati_z",
    "rs_solution",
    "closed_form_flow",
    "bound_rate_df",
    "bound_rate_tf",
    "exponential_bound_df",
    "exponential_bound_tf",
    "limit_point",
    "plateau_time",
    "plateau_point",
    "moment_spectrum",
    "isotropic_constant",
    "verify_limit_point",
    "verify_signs",
    "verify_asymptotic_rate",
    "verify_escape_times",
    "half_escape_times",
    "escape_matrix",
    "escape_rates",
    "escape_coordinates",
    "escape_alignment",
    "sign_rule",
    "sign_df",
    "hessian",
    "asymptotic_rate",
    "asymptotic_rate_df",
    "column_rates_df",
    "rate_constant",
    "column_matrix",
    "column_flow",
]
