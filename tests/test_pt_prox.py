"""Tests of attnlab.theory.phase_transition.prox (pt = phase transition, Part II): the 2-D prox."""

import numpy as np
import pytest

from attnlab.theory import phase_transition as se
from attnlab.theory.phase_transition.prox import _grad_hess, _objective, _target


def test_prox_matches_brute_force_global_minimum():
    # global minimum on a fine grid of h, for a few (u, h*) pairs
    rng = np.random.default_rng(0)
    u = rng.normal(0, 0.6, size=(6, 2))
    hs = rng.normal(0, 0.7, size=(6, 2))
    h, val = se.prox(u, hs, V=12.0, omega=0.3)
    grid = np.linspace(-4, 4, 801)
    H1, H2 = (g.ravel() for g in np.meshgrid(grid, grid, indexing="ij"))
    for i in range(len(u)):
        T = _target(np.full(1, hs[i, 0]), np.full(1, hs[i, 1]), 0.3, se.DEFAULT_A)
        f = _objective(H1, H2, u[i, 0], u[i, 1], 12.0, T, 0.25)
        assert val[i] <= f.min() + 1e-12
        assert f.min() - val[i] < 1e-4  # the grid minimum is close to the prox value
        assert np.hypot(*(h[i] - [H1[f.argmin()], H2[f.argmin()]])) < 0.05


def test_prox_is_stationary():
    rng = np.random.default_rng(1)
    u = rng.normal(0, 1.0, size=(500, 2))
    hs = rng.normal(0, 0.5, size=(500, 2))
    h, _ = se.prox(u, hs, V=10.0, omega=0.3)
    T = _target(hs[:, 0], hs[:, 1], 0.3, se.DEFAULT_A)
    G1, G2, *_ = _grad_hess(h[:, 0], h[:, 1], u[:, 0], u[:, 1], 10.0, T, 0.25)
    assert np.max(np.abs(G1) + np.abs(G2)) < 1e-7


def test_prox_escapes_the_symmetric_stationary_point():
    # at u = 0 the origin is a stationary point of the prox objective (h -> -h symmetry);
    # the prox must return the minimum, which is continuous in u
    t = np.linspace(-0.01, 0.01, 21)
    u = np.stack([t, -t], axis=1)
    _, val = se.prox(u, np.tile([1.0, -1.0], (t.size, 1)), 11.4, 0.3)
    assert np.max(np.abs(np.diff(val))) < 1e-3


def test_prox_rejects_bad_input():
    with pytest.raises(ValueError, match="u"):
        se.prox(np.zeros((3, 3)), np.zeros((3, 2)), 1.0, 0.3)
    with pytest.raises(ValueError, match="h_star"):
        se.prox(np.zeros((3, 2)), np.zeros((2, 2)), 1.0, 0.3)
    with pytest.raises(ValueError, match="V"):
        se.prox(np.zeros((3, 2)), np.zeros((3, 2)), -1.0, 0.3)


def test_prox_kernel_is_built_where_there_is_a_compiler():
    """Where the machine has a C compiler the compiled prox must be built (a silent fallback to
    numpy would only show as a slower solver)."""
    import importlib
    import shutil

    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    assert importlib.import_module("attnlab.theory.phase_transition.prox")._kernel() is not None


@pytest.mark.parametrize(
    "V, omega, A", [(0.3, 0.0, None), (2.0, 0.3, [[0.9, 0.1], [0.25, 0.75]]), (14.6, 0.7, None)]
)
def test_prox_kernel_equals_the_numpy_prox(V, omega, A):
    """The compiled kernel runs numpy's algorithm node by node: the same minimizers and values
    to rounding at generic nodes (u and h* of unequal scales, an unsymmetric A), from the starts
    the solver uses (u, -u, 0 and a previous solution), so that the kicks off the stationary
    point at the origin (start 0) are exercised too."""
    import importlib

    P = importlib.import_module("attnlab.theory.phase_transition.prox")
    if P._kernel() is None:
        pytest.skip("the kernel is not built here")
    rng = np.random.default_rng(7)
    n = 3000
    u1, u2 = rng.normal(0.1, 1.4, n), rng.normal(-0.2, 0.6, n)
    T = _target(rng.normal(0, 0.9, n), rng.normal(0, 0.4, n), omega, P._check_A(A))
    prev = (u1 + rng.normal(0, 0.3, n), -u2 + rng.normal(0, 0.3, n))
    starts = [(u1, u2), (-u1, -u2), (np.zeros(n), np.zeros(n)), prev]
    h1, h2, f = P._prox_batch(u1, u2, V, T, 0.25, starts)
    r1, r2, rf = P._prox_batch_numpy(u1, u2, V, T, 0.25, starts)
    np.testing.assert_allclose(f, rf, rtol=0, atol=1e-12)
    np.testing.assert_allclose(h1, r1, rtol=0, atol=1e-9)
    np.testing.assert_allclose(h2, r2, rtol=0, atol=1e-9)
    assert np.ptp(f) > 0.1 and len({round(x, 3) for x in h1}) > 100  # generic, not a degenerate case
