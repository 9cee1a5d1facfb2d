"""Part II: is a replica-symmetric fixed point stable against replica-symmetry breaking? (chapter 03)

``replicon(fp, A=None, *, n_nodes=None) -> Replicon``
    The replicon (de Almeida–Thouless) quantity ``R = α E ‖I - ∂h/∂u‖_F²`` of a fixed point,
    where ``h(u)`` is the prox at the nodes of the fixed point's quadrature, and how much of
    ``V̂`` comes from nodes where the prox jumps.

The fixed-point equations describe the minimiser of the empirical risk by one replica-symmetric
(RS) state. That description is self-consistent only while a small perturbation of the student
that differs between replicas dies out when it is sent once around the equations: a change ``δu``
of the two pre-activations of a sample (independent across its two tokens, whose inputs are
independent) moves the prox by ``(∂h/∂u) δu`` and the residual ``g = (h - u)/V`` by
``-(I - ∂h/∂u) δu / V``; the ridge step maps that back to the student with factor ``V`` (with
``V = σ²/(λ + σ² V̂)``), and the ``n = α d`` samples add up. The perturbation grows when

    R = α E ‖I - ∂h/∂u‖_F²  >  1,

the condition of de Almeida and Thouless for this ERM (for ridge regression with square loss it
gives ``R = 1/α`` at λ = 0: marginal exactly at the interpolation threshold α = 1). By the implicit
function theorem on the prox's stationarity condition ``2(h - u)/V + ∇ℓ(h) = 0``,
``∂h/∂u = (2/V) H⁻¹`` with ``H = 2I/V + ∇²ℓ(h)`` the Hessian of the prox's objective.

That linearisation exists only where the prox is differentiable. Where the prox jumps between two
minima, ``∂h/∂u`` has a part concentrated on the jump surface: it adds a finite amount to
``V̂ = α E tr(I - ∂h/∂u) / V`` (the solver's Stein form of the hat includes it) and is not counted
in ``R``. ``V_hat_smooth`` is ``V̂`` from the differentiable part alone, so
``jump_share = 1 - V_hat / V_hat_smooth`` measures the jumps' weight in ``V̂`` (zero where the prox
is smooth; it is subject to the quadrature error of an average over a function with a jump).
"""

from __future__ import annotations

from dataclasses import dataclass

from attnlab.theory.phase_transition.equations import FixedPoint, _Problem
from attnlab.theory.phase_transition.prox import _check_A, _global_starts, _grad_hess, _prox_batch, _target
from attnlab.validation import check_int

__all__ = ["Replicon", "replicon"]


@dataclass(frozen=True)
class Replicon:
    """The replicon quantity of a fixed point and the weight of the prox's jumps in ``V̂``."""

    replicon: float
    V_hat: float
    V_hat_smooth: float
    jump_share: float
    n_nodes: int

    @property
    def stable(self) -> bool:
        """``R < 1``: the RS point is stable against the replicon perturbation (smooth part)."""
        return self.replicon < 1


def _jacobian(h1, h2, u1, u2, V, T, s2):
    """``∂h/∂u = (2/V) H⁻¹`` at prox solutions ``h`` (H: Hessian of the prox's objective)."""
    _, _, H11, H12, H22 = _grad_hess(h1, h2, u1, u2, V, T, s2)
    c = 2 / V / (H11 * H22 - H12**2)
    return c * H22, -c * H12, c * H11  # J11, J12 = J21, J22 (H is symmetric)


def replicon(fp: FixedPoint, A=None, *, n_nodes: int | None = None) -> Replicon:
    """The replicon ``R = α E‖I - ∂h/∂u‖_F²`` of a converged fixed point, and the jumps' share of V̂.

    ``A`` must be the positional matrix ``fp`` was solved with (a :class:`FixedPoint` does not
    record it; default: the paper's). The averages use the Gauss–Hermite product rule with
    ``n_nodes`` per dimension (default: the fixed point's own) and the global prox (all starts).
    """
    if not isinstance(fp, FixedPoint):
        raise ValueError(f"fp must be a FixedPoint from solve(), got {type(fp).__name__}")
    if not fp.converged or fp.rule != "gauss-hermite":
        raise ValueError("fp must be a converged fixed point of solve() (Gauss-Hermite rule)")
    A = _check_A(A)
    n_nodes = fp.n_nodes if n_nodes is None else check_int("n_nodes", n_nodes, minimum=2, maximum=60)
    prob = _Problem(fp.alpha, fp.omega, fp.sigma, fp.lam, A, n_nodes, 1e-10, fp.branch)
    u1, u2, hs1, hs2, _ = prob.fields(fp.q, fp.m, fp.theta)
    T = _target(hs1, hs2, fp.omega, A)
    h1, h2, _ = _prox_batch(u1, u2, fp.V, T, prob.s2, _global_starts(u1, u2))
    J11, J12, J22 = _jacobian(h1, h2, u1, u2, fp.V, T, prob.s2)
    M11, M22 = 1 - J11, 1 - J22  # I - ∂h/∂u; its off-diagonal entries are -J12
    W = prob.W
    R = fp.alpha * float(W @ (M11**2 + 2 * J12**2 + M22**2))
    V_hat_smooth = fp.alpha * float(W @ (M11 + M22)) / fp.V
    return Replicon(R, fp.V_hat, V_hat_smooth, 1 - fp.V_hat / V_hat_smooth, n_nodes)
