"""Part II (pt = phase transition): the high-dimensional limit of the tied low-rank attention model.

This package solves the fixed-point (state-evolution) equations of Cui, Behrens, Krzakala &
Zdeborová (2024), "A phase transition between positional and semantic learning in a solvable
model of dot-product attention", in the setting of every main figure: L = 2 tokens, rank r = 1,
Σ_ℓ = σ² I, a target ``T(h*) = (1 - ω) softmax(h* h*ᵀ) + ω A`` (ω is the mixing weight of the
positional part A). Chapter ``book/phase-transition/02-high-dim-limit.md`` derives the equations;
chapters 03 and 04 use the solver. One concept per module:

* :mod:`.cubature` – Gaussian rules: the solver's Gauss–Hermite products and the authors' rules;
* :mod:`.prox` – the two-token loss ℓ(h; h*) and its prox (batched Newton, saddle escape);
* :mod:`.equations` – the fixed-point map (hats, overlaps, Φ, ε_g) and :class:`FixedPoint`;
* :mod:`.fixed_point` – the solver (damped iteration + Anderson), both branches;
* :mod:`.authors` – the authors' own procedure, to reproduce their published numbers;
* :mod:`.thresholds` – ε_lin, α_c, α_l and the branch curves over α;
* :mod:`.constrained` – the training loss with the order parameter held fixed, and its slope;
* :mod:`.replicon` – the stability of a fixed point against replica-symmetry breaking.

Public API (all importable from this package)
---------------------------------------------
``solve(alpha, omega, branch, sigma=0.5, lam=0.01, A=None, *, n_nodes=20, ...) -> FixedPoint``
    One fixed point. ``branch`` is ``"semantic"`` or ``"positional"`` (the two starting points of
    the authors). The result has ``.eps_g`` (= E‖f - y‖²/(2d)), ``.eps_t`` (= -Φ), ``.q``, ``.m``,
    ``.V``, ``.theta`` (and ``.theta_over_sigma2``), the conjugates ``.q_hat``, ``.m_hat``,
    ``.V_hat``, ``.theta_hat`` and the diagnostics ``.iterations``, ``.residual``,
    ``.converged`` and ``.mu_max`` (the largest real part of the eigenvalues of the map's
    Jacobian on the branch: < 1 for a point a damped iteration can converge to).
``continue_branch(alphas, omega, branch, ...) -> list[FixedPoint]``
    One branch followed along ``alphas`` by warm-started continuation; where it ends (a spinodal)
    ``mu_max`` rises towards 1 and the solves leave the branch (``on_branch(fp)`` is false:
    not converged, or collapsed onto the agnostic point).
``constrained(alpha, omega, branch, value, ...) -> Constrained``
    The training loss ``eps_t`` of the best student whose order parameter (θ/σ² on the semantic
    branch, m on the positional one) is held at ``value``, and its ``slope`` in that parameter
    (zero at a fixed point of the full map).
``replicon(fp, A=None, *, n_nodes=None) -> Replicon``
    The replicon (de Almeida–Thouless) quantity ``R = α E‖I - ∂h/∂u‖_F²`` of a fixed point (the
    replica-symmetric point is stable against replica-symmetry breaking while ``R < 1``) and
    ``jump_share``, the weight in ``V̂`` of the nodes where the prox jumps between two minima.
``solve_both(alpha, omega, ...) -> dict``
    ``{"semantic": FixedPoint, "positional": FixedPoint, "global": FixedPoint}``; the global
    minimum is the branch with the lower training loss ``eps_t``.
``global_minimum(alpha, omega, ...) -> FixedPoint``
    The branch with the lower ``eps_t``.
``branch_curves(alphas, omega, ...) -> dict``
    Theory curves over α for both branches (for plots against experiments):
    ``{"alpha": [n], "semantic": {"eps_g": [n], "eps_t": [n], "q", "m", "V", "theta",
    "theta_over_sigma2", "converged"}, "positional": {...}, "global": {... , "branch": [n] str},
    "eps_lin": float}``.
``eps_lin(omega, sigma=0.5, A=None, *, method="converged") -> float``
    Test error of the best purely positional linear model ``f_B(x) = B x`` (independent of α).
``alpha_c(omega, ..., method="converged")``, ``alpha_l(omega, ..., method="converged")``
    Root finding (``scipy.optimize.brentq``): α_c where the semantic branch's training loss
    drops below the positional one's; α_l where the semantic branch's test error drops below
    ``eps_lin``. ``method="authors"`` uses ``solve_authors`` and the authors' ``eps_lin``.
``solve_authors(alpha, omega, branch, sigma=0.5, lam=0.01, A=None, *, n_nodes=None) -> FixedPoint``
    The authors' own numerical procedure (low-order cubature, direct averages, their stopping
    rule), re-implemented so that the book can reproduce their published numbers and show where
    they differ from the converged ones (chapters 02, 03 and 04); it holds the branch as
    ``solve`` does. ``n_nodes`` puts its hats on a Gauss–Hermite rule instead of theirs.
``prox(u, h_star, V, omega, sigma=0.5, A=None, start=None) -> (h, value)``
    The 2-D proximal step, batched over any number of points (batched Newton).
``hat_variables(alpha, omega, q, m, V, theta, ..., monte_carlo=None) -> dict``
    One step of the fixed-point map (hats and new overlaps); ``monte_carlo=N`` evaluates the
    direct averages by sampling instead, as an independent check of the quadrature.
``product_rule(n_nodes, dim=4, prune=1e-10) -> (nodes [dim, N], weights [N])``
    Gauss–Hermite product rule for E over independent standard Gaussians.
``verify_eps_lin(answer, omega, sigma=0.5, A=None)``
    For exercises: raises ``ValueError`` with a message unless ``answer`` matches ``eps_lin``.
``verify_min_damping(answer, mu)``
    For exercises: the smallest damping of the iteration that converges at a Jacobian
    eigenvalue ``mu`` (``None`` where none does).
``verify_alpha_c(answer, omega, ..., n_nodes=8, atol=0.01)``
    For exercises: raises ``ValueError`` with a hint unless the two training losses cross within
    ``atol`` of ``answer``.
"""

from attnlab.theory.phase_transition import cubature
from attnlab.theory.phase_transition.authors import solve_authors
from attnlab.theory.phase_transition.constrained import Constrained, constrained
from attnlab.theory.phase_transition.cubature import product_rule
from attnlab.theory.phase_transition.equations import BRANCHES, STARTS, FixedPoint
from attnlab.theory.phase_transition.fixed_point import (
    continue_branch,
    global_minimum,
    hat_variables,
    on_branch,
    solve,
    solve_both,
    verify_min_damping,
)
from attnlab.theory.phase_transition.prox import DEFAULT_A, prox
from attnlab.theory.phase_transition.replicon import Replicon, replicon
from attnlab.theory.phase_transition.thresholds import (
    alpha_c,
    alpha_l,
    branch_curves,
    eps_lin,
    verify_alpha_c,
    verify_eps_lin,
)

__all__ = [
    "BRANCHES",
    "Constrained",
    "DEFAULT_A",
    "STARTS",
    "FixedPoint",
    "alpha_c",
    "alpha_l",
    "branch_curves",
    "constrained",
    "continue_branch",
    "verify_alpha_c",
    "verify_eps_lin",
    "verify_min_damping",
    "cubature",
    "eps_lin",
    "global_minimum",
    "hat_variables",
    "on_branch",
    "product_rule",
    "prox",
    "replicon",
    "Replicon",
    "solve",
    "solve_authors",
    "solve_both",
]
