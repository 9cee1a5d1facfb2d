"""Argument checks shared by the modules of :mod:`attnlab.theory.diagonal_net`.

Each returns its argument as float64 numpy after checking shape and finiteness, and raises
``ValueError`` naming the argument otherwise: ``M`` the target ``[d, d]``, ``(Q, v)`` a point of
the diagonal network (optionally with a leading time axis), ``S`` the moment tensor (or an int
``N``), ``t`` the times of a trajectory.
"""

from __future__ import annotations

import numbers

import numpy as np

from attnlab.tasks.histogram import count_moments
from attnlab.validation import check_finite, check_int, check_shape

__all__ = ["as_M", "as_Qv", "as_S", "as_t"]


def as_M(M) -> np.ndarray:
    M = np.asarray(M, dtype=float)
    if M.ndim != 2 or M.shape[0] != M.shape[1] or M.shape[0] == 0:
        raise ValueError(f"M must be a square [d, d] matrix, got shape {list(M.shape)}")
    check_finite("M", M)
    return M


def as_Qv(Q, v, d: int | None = None, *, batched: bool = True):
    Q = np.asarray(Q, dtype=float)
    v = np.asarray(v, dtype=float)
    if Q.ndim < 2 or Q.shape[-1] != Q.shape[-2] or (not batched and Q.ndim != 2):
        raise ValueError(f"Q must have shape [d, d]{' or [T, d, d]' if batched else ''}, got {list(Q.shape)}")
    if d is not None and Q.shape[-1] != d:
        raise ValueError(f"Q must have shape [{d}, {d}] to match M, got {list(Q.shape)}")
    if v.shape != Q.shape[:-1]:
        raise ValueError(f"v must have shape {list(Q.shape[:-1])} to match Q, got {list(v.shape)}")
    check_finite("Q", Q)
    check_finite("v", v)
    return Q, v


def as_S(S, d: int) -> np.ndarray:
    """``S`` is the moment tensor ``[d, d, d]`` or an int ``N`` (uniform tokens)."""
    if isinstance(S, numbers.Integral) and not isinstance(S, bool):
        return count_moments(check_int("S", S, minimum=1), d)
    S = np.asarray(S, dtype=float)
    check_shape("S", S, (d, d, d))
    check_finite("S", S)
    return S


def as_t(t) -> np.ndarray:
    t = np.atleast_1d(np.asarray(t, dtype=float))
    if t.ndim != 1 or t.size == 0:
        raise ValueError("t must be a non-empty 1-D array of times")
    check_finite("t", t)
    if t[0] < 0 or np.any(np.diff(t) < 0):
        raise ValueError("t must be non-negative and non-decreasing")
    return t
