"""Tests of attnlab.theory.diagonal_net.reduction: the losses l_df and l_tf, their gradients, the moments."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from attnlab.experiments.histogram import sequence_loss
from attnlab.models import LinearSelfAttention
from attnlab.tasks import histogram as th
from attnlab.theory import diagonal_net as dn

d, N = 4, 5


def rand_point(scale, seed, size=d):
    rng = np.random.default_rng(seed)
    return scale * rng.standard_normal((size, size)), scale * rng.standard_normal(size)


def finite_diff(fun, Q, v, eps=1e-6):
    gQ, gv = np.zeros_like(Q), np.zeros_like(v)
    for idx in np.ndindex(Q.shape):
        E = np.zeros_like(Q)
        E[idx] = eps
        gQ[idx] = (fun(Q + E, v) - fun(Q - E, v)) / (2 * eps)
    for k in range(v.size):
        e = np.zeros_like(v)
        e[k] = eps
        gv[k] = (fun(Q, v + e) - fun(Q, v - e)) / (2 * eps)
    return gQ, gv


@pytest.mark.parametrize("task", ["histogram", "next_letter", "classes"])
def test_l_tf_is_the_exact_population_loss_of_the_attention_layer(task):
    M = th.task_matrix(task, 3)
    Q, v = rand_point(0.7, 1, 3)
    model = LinearSelfAttention(3, W0=Q, v0=v)
    tokens = torch.tensor(list(itertools.product(range(3), repeat=4)))  # every sequence, N = 4
    X = th.one_hot(tokens, 3)
    with torch.no_grad():
        exact = 0.5 * ((model(X) - th.targets(X, M)) ** 2).sum(-1).mean().item()
    assert abs(dn.l_tf(Q, v, M, 4) - exact) < 1e-10 * max(1.0, exact)


def test_sequence_loss_over_every_sequence_is_l_tf_and_a_loop_by_hand():
    # generic O(1) unbalanced point and a generic task matrix; d = 3, N = 4: all 81 sequences
    rng = np.random.default_rng(7)
    dd, NN = 3, 4
    M = rng.standard_normal((dd, dd))
    W, v = rng.standard_normal((dd, dd)), 1.5 * rng.standard_normal(dd) + 0.5
    assert np.abs(dn.delta(W, v)).min() > 0.1  # unbalanced
    tokens = list(itertools.product(range(dd), repeat=NN))
    by_hand = 0.0  # 1/2 sum_i (f_i - y_i)^2, f_i = sum_j W[x_i, x_j] v[x_j], y_i = sum_j M[x_i, x_j]
    for x in tokens:
        by_hand += 0.5 * sum(sum(W[xi, xj] * v[xj] - M[xi, xj] for xj in x) ** 2 for xi in x)
    by_hand /= len(tokens)
    X = th.one_hot(torch.tensor(tokens), dd)
    model = LinearSelfAttention(dd, W0=W, v0=v)
    with torch.no_grad():
        sample = float(sequence_loss(model, X, th.targets(X, M)))
    assert abs(sample - by_hand) < 1e-12 * by_hand
    assert abs(float(dn.l_tf(W, v, M, NN)) - by_hand) < 1e-12 * by_hand


def test_gradients_match_finite_differences():
    M = th.task_matrix("histogram+next_letter", d)
    S = th.count_moments(N, d)
    Q, v = rand_point(0.5, 2)
    for grad, loss in [
        (dn.grad_df(Q, v, M), lambda Q, v: dn.l_df(Q, v, M)),
        (dn.grad_tf(Q, v, M, S), lambda Q, v: dn.l_tf(Q, v, M, S)),
    ]:
        gQ, gv = finite_diff(loss, Q, v)
        assert np.abs(grad[0] - gQ).max() < 1e-6 and np.abs(grad[1] - gv).max() < 1e-6


def test_moments_helpers():
    S = th.count_moments(N, d)
    ev = dn.moment_spectrum(S)
    assert ev.shape == (d, d) and np.all(ev > 0)
    assert np.isclose(dn.isotropic_constant(S), np.trace(S, axis1=1, axis2=2).sum() / d**2)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: dn.l_df(np.eye(3), np.ones(3), np.eye(4)), "Q"),
        (lambda: dn.l_df(np.eye(3), np.ones(2), np.eye(3)), "v"),
        (lambda: dn.l_df(np.eye(3), np.ones(3), np.ones((3, 2))), "M"),
        (lambda: dn.l_tf(np.eye(3), np.ones(3), np.eye(3), np.ones((3, 3))), "S"),
        (lambda: dn.l_tf(np.eye(3), np.ones(3), np.eye(3), 0), "S"),
        (lambda: dn.moment_spectrum(np.ones((3, 3))), "S"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
