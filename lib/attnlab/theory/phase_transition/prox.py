"""The scalar channel of Part II's fixed-point equations: the two-token loss ℓ(h; h*) and its prox.

With L = 2 tokens, rank r = 1 and Σ_ℓ = σ² I, the student's pre-activations h ∈ R² enter through
``S(h) = softmax_row(h hᵀ)`` and the target is ``T(h*) = (1 - ω) S(h*) + ω A`` (chapter 01,
eq-pt-target); ω is the weight of the positional part ``A`` of the target.

``prox(u, h_star, V, omega, sigma=0.5, A=None, start=None) -> (h, value)``
    ``argmin_h ‖h - u‖²/V + ℓ(h; h*)`` and its minimum, batched over any number of points.

Numerics: the prox is solved for all nodes at once by a batched Newton method on the 2-D problem
with an eigenvalue-shifted Hessian (a descent direction even where the problem is non-convex) and
a backtracking Armijo line search. Converged nodes leave the active set. Several starting points
(u, its mirror image -u, 0 and the previous solution) are tried and the lowest objective is kept,
so the prox is the global minimizer, not a local one; stationary points that are not minima are
escaped by small kicks. The same algorithm runs node by node in a compiled kernel,
``prox_kernel.c`` (built at first use, see :mod:`attnlab.ccompile`), about ten times faster than
numpy's step-by-step batches; where it cannot be built, or with ``ATTNLAB_PROX_KERNEL=0``, the
numpy code runs.
"""

from __future__ import annotations

import ctypes
import functools
import os
from pathlib import Path

import numpy as np
from scipy.special import expit

from attnlab import ccompile
from attnlab.validation import check_finite, check_real, check_shape

__all__ = ["DEFAULT_A", "prox"]

DEFAULT_A = np.array([[0.6, 0.4], [0.4, 0.6]])


def _check_A(A) -> np.ndarray:
    if A is None:
        return DEFAULT_A.copy()
    if not isinstance(A, np.ndarray):
        try:
            A = np.asarray(A, dtype=float)
        except (TypeError, ValueError) as err:
            raise ValueError("A must be a 2x2 array of real numbers") from err
    check_shape("A", A, (2, 2))
    A = np.asarray(A, dtype=float)
    check_finite("A", A)
    return A


def _check_common(alpha, omega, sigma, lam, A):
    alpha = check_real("alpha", alpha, minimum=0.0, strict_minimum=True)
    omega = check_real("omega", omega, minimum=0.0, maximum=1.0)
    sigma = check_real("sigma", sigma, minimum=0.0, strict_minimum=True)
    lam = check_real("lam", lam, minimum=0.0, strict_minimum=True)
    return alpha, omega, sigma, lam, _check_A(A)


# ----------------------------------------------------------------------------------------------
# The two-token softmax, the target and the loss ℓ(h; h*)
# ----------------------------------------------------------------------------------------------


_sigmoid = expit  # 1 / (1 + exp(-z)), a fast ufunc


def _softmax_diag(h1, h2):
    """Diagonal (a, b) of S(h) = softmax_row(h hᵀ) for L = 2: S = [[a, 1-a], [1-b, b]]."""
    return _sigmoid(h1 * (h1 - h2)), _sigmoid(h2 * (h2 - h1))


def _target(hs1, hs2, omega, A):
    """Entries (T11, T12, T21, T22) of T = (1 - ω) S(h*) + ω A."""
    a, b = _softmax_diag(hs1, hs2)
    return (
        (1 - omega) * a + omega * A[0, 0],
        (1 - omega) * (1 - a) + omega * A[0, 1],
        (1 - omega) * (1 - b) + omega * A[1, 0],
        (1 - omega) * b + omega * A[1, 1],
    )


def _loss(a, b, T, s2):
    """ℓ = Tr[S Σ Sᵀ] - 2 Tr[T Σ Sᵀ] + Tr[T Σ Tᵀ] = σ² ‖S - T‖_F² with Σ = σ² I."""
    T11, T12, T21, T22 = T
    return s2 * ((a - T11) ** 2 + (1 - a - T12) ** 2 + (1 - b - T21) ** 2 + (b - T22) ** 2)


def _objective(h1, h2, u1, u2, V, T, s2):
    a, b = _softmax_diag(h1, h2)
    return ((h1 - u1) ** 2 + (h2 - u2) ** 2) / V + _loss(a, b, T, s2)


def _grad_hess(h1, h2, u1, u2, V, T, s2):
    """Gradient and Hessian of ‖h - u‖²/V + ℓ(h) (chain rule through z₁ = h₁(h₁-h₂), z₂)."""
    T11, T12, T21, T22 = T
    a, b = _softmax_diag(h1, h2)
    pa, pb = a * (1 - a), b * (1 - b)
    La = 2 * s2 * (2 * a - 1 - T11 + T12)  # dℓ/da
    Lb = 2 * s2 * (2 * b - 1 - T22 + T21)  # dℓ/db
    z1_1, z1_2 = 2 * h1 - h2, -h1  # ∇z₁
    z2_1, z2_2 = -h2, 2 * h2 - h1  # ∇z₂
    ca, cb = La * pa, Lb * pb  # dℓ/dz₁, dℓ/dz₂
    G1 = 2 * (h1 - u1) / V + ca * z1_1 + cb * z2_1
    G2 = 2 * (h2 - u2) / V + ca * z1_2 + cb * z2_2
    ka = 4 * s2 * pa**2 + La * pa * (1 - 2 * a)  # d²ℓ/dz₁²
    kb = 4 * s2 * pb**2 + Lb * pb * (1 - 2 * b)
    # Hessians of z₁ and z₂: [[2, -1], [-1, 0]] and [[0, -1], [-1, 2]].
    H11 = 2 / V + ka * z1_1**2 + kb * z2_1**2 + 2 * ca
    H12 = ka * z1_1 * z1_2 + kb * z2_1 * z2_2 - ca - cb
    H22 = 2 / V + ka * z1_2**2 + kb * z2_2**2 + 2 * cb
    return G1, G2, H11, H12, H22


def _newton(h1, h2, u1, u2, V, T, s2, max_iter=60, gtol=1e-9):
    """Batched safeguarded Newton for the 2-D prox; returns (h1, h2, n_unconverged)."""
    h1, h2 = h1.copy(), h2.copy()
    idx = np.arange(h1.size)
    floor = 0.1 / V  # smallest eigenvalue allowed in the (shifted) Newton matrix
    for _ in range(max_iter):
        a1, a2, b1, b2 = h1[idx], h2[idx], u1[idx], u2[idx]
        Ts = tuple(t[idx] for t in T)
        G1, G2, H11, H12, H22 = _grad_hess(a1, a2, b1, b2, V, Ts, s2)
        done = np.abs(G1) + np.abs(G2) < gtol
        lmin = 0.5 * (H11 + H22) - np.sqrt(0.25 * (H11 - H22) ** 2 + H12**2)
        shift = np.where(lmin < floor, floor - lmin, 0.0)
        H11, H22 = H11 + shift, H22 + shift
        det = H11 * H22 - H12**2
        p1 = -(H22 * G1 - H12 * G2) / det
        p2 = -(H11 * G2 - H12 * G1) / det
        f0 = _objective(a1, a2, b1, b2, V, Ts, s2)
        slope = G1 * p1 + G2 * p2  # < 0: the shifted matrix is positive definite
        # Where the predicted decrease is at rounding level, the point has converged.
        done |= -slope <= 1e-13 * (np.abs(f0) + 1e-300)
        t = np.ones_like(a1)
        pend = np.flatnonzero(~done)
        for _ls in range(30):  # backtracking (Armijo), only on the points still pending
            f = _objective(
                a1[pend] + t[pend] * p1[pend],
                a2[pend] + t[pend] * p2[pend],
                b1[pend],
                b2[pend],
                V,
                tuple(x[pend] for x in Ts),
                s2,
            )
            ok = f <= f0[pend] + 1e-4 * t[pend] * slope[pend]
            pend = pend[~ok]
            if pend.size == 0:
                break
            t[pend] *= 0.5
        t[pend] = 0.0
        t[done] = 0.0
        h1[idx], h2[idx] = a1 + t * p1, a2 + t * p2
        tiny = np.abs(t * p1) + np.abs(t * p2) <= 1e-12 * (1 + np.abs(a1) + np.abs(a2))
        idx = idx[~(done | tiny)]
        if idx.size == 0:
            break
    return h1, h2, idx.size


@functools.cache
def _kernel():
    """The compiled ``prox_batch`` of ``prox_kernel.c``, or ``None`` (not built, or turned off)."""
    if os.environ.get("ATTNLAB_PROX_KERNEL", "1") == "0":
        return None
    flags = ("-O2", "-ffp-contract=off", "-std=c11", "-fPIC", "-shared")
    lib = ccompile.load(Path(__file__).with_name("prox_kernel.c"), "prox_kernel", flags + ("-lm",))
    if lib is None:  # make bench: the kernel is 2.5-3.2x numpy's prox on the nodes of one solve
        ccompile.warn_fallback("prox_kernel", "Part II's fixed-point solves run about 2.5 to 3 times slower")
        return None
    p = ctypes.c_void_p
    real = ctypes.c_double
    lib.prox_batch.argtypes = [ctypes.c_ssize_t, p, p, real, p, p, p, p, real, ctypes.c_int, p, p, p, p]
    lib.prox_batch.restype = None
    return lib


def _global_starts(u1, u2):
    """The starting points of the global prox: ``u``, its mirror image ``-u`` and ``0``.

    ``ℓ(-h) = ℓ(h)``, so the prox objective has a valley near ``u`` and a mirror valley near
    ``-u``; from ``u`` and ``0`` alone Newton misses the lower one at some points (chapter 02).
    Every average of the map over the prox (quadrature, Monte Carlo, replicon) starts from these.
    """
    return [(u1, u2), (-u1, -u2), (np.zeros_like(u1), np.zeros_like(u2))]


def _prox_batch(u1, u2, V, T, s2, starts):
    """Global prox over a list of starting points: keep the lowest objective per node.

    Runs the compiled kernel when it is built (the same algorithm as :func:`_prox_batch_numpy`).
    """
    lib = _kernel()
    if lib is None:
        return _prox_batch_numpy(u1, u2, V, T, s2, starts)
    arrays = [np.ascontiguousarray(x, dtype=float) for x in (u1, u2, *T)]
    st = [np.ascontiguousarray(x, dtype=float) for start in starts for x in start]
    ptrs = (ctypes.c_void_p * len(st))(*(x.ctypes.data for x in st))
    h1, h2, f = (np.empty(arrays[0].size) for _ in range(3))
    u_ptrs, T_ptrs = (x.ctypes.data for x in arrays[:2]), (x.ctypes.data for x in arrays[2:])
    out = (h1.ctypes.data, h2.ctypes.data, f.ctypes.data)
    lib.prox_batch(arrays[0].size, *u_ptrs, float(V), *T_ptrs, float(s2), len(starts), ptrs, *out)
    return [h1, h2, f]


def _prox_batch_numpy(u1, u2, V, T, s2, starts):
    """Global prox over a list of starting points: keep the lowest objective per node.

    A start can sit on a stationary point that is not a minimum (at u = 0 the origin is one,
    by the symmetry h -> -h); nodes whose result has a Hessian that is not positive definite are
    restarted from small kicks around it, and the lowest value is kept.
    """
    best = None
    for s1, s2_ in starts:
        h1, h2, _ = _newton(s1, s2_, u1, u2, V, T, s2)
        f = _objective(h1, h2, u1, u2, V, T, s2)
        if best is None:
            best = [h1, h2, f]
        else:
            better = f < best[2] - 1e-14
            best = [np.where(better, h1, best[0]), np.where(better, h2, best[1]), np.minimum(f, best[2])]
    _, _, H11, H12, H22 = _grad_hess(best[0], best[1], u1, u2, V, T, s2)
    lmin = 0.5 * (H11 + H22) - np.sqrt(0.25 * (H11 - H22) ** 2 + H12**2)
    bad = np.flatnonzero(lmin <= 1e-12)
    if bad.size:
        sub = (u1[bad], u2[bad])
        Tb = tuple(t[bad] for t in T)
        for k1, k2 in ((0.3, -0.3), (-0.3, 0.3), (0.3, 0.3), (-0.3, -0.3)):
            h1, h2, _ = _newton(best[0][bad] + k1, best[1][bad] + k2, *sub, V, Tb, s2)
            f = _objective(h1, h2, *sub, V, Tb, s2)
            better = f < best[2][bad] - 1e-14
            best[0][bad] = np.where(better, h1, best[0][bad])
            best[1][bad] = np.where(better, h2, best[1][bad])
            best[2][bad] = np.minimum(f, best[2][bad])
    return best


def prox(u, h_star, V, omega, sigma=0.5, A=None, start=None):
    """Batched prox ``argmin_h ‖h - u‖²/V + ℓ(h; h*)`` and its value (chapter 02, eq-pt-se-prox).

    ``u`` and ``h_star`` have shape ``[N, 2]``; returns ``h`` of shape ``[N, 2]`` and the minimum
    value ``[N]``. Starts from ``u``, from ``-u``, from 0 and (if given) from ``start``
    ``[N, 2]``, and keeps the lowest value: the global minimum.
    """
    u = np.asarray(u, dtype=float)
    h_star = np.asarray(h_star, dtype=float)
    check_shape("u", u, (None, 2))
    check_shape("h_star", h_star, (u.shape[0], 2))
    check_finite("u", u)
    check_finite("h_star", h_star)
    V = check_real("V", V, minimum=0.0, strict_minimum=True)
    omega = check_real("omega", omega, minimum=0.0, maximum=1.0)
    sigma = check_real("sigma", sigma, minimum=0.0, strict_minimum=True)
    A = _check_A(A)
    u1, u2 = u[:, 0].copy(), u[:, 1].copy()
    T = _target(h_star[:, 0], h_star[:, 1], omega, A)
    starts = _global_starts(u1, u2)
    if start is not None:
        start = np.asarray(start, dtype=float)
        check_shape("start", start, u.shape)
        starts.append((start[:, 0].copy(), start[:, 1].copy()))
    h1, h2, f = _prox_batch(u1, u2, V, T, sigma**2, starts)
    return np.stack([h1, h2], axis=1), f
