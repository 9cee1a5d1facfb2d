"""Tests of attnlab.theory.phase_transition.cubature (pt = phase transition): the Gaussian rules are exact."""

import numpy as np
import pytest

from attnlab.theory.phase_transition import cubature


@pytest.mark.parametrize(
    ("rule", "n", "degree"),
    [(cubature.stroud_secrest_vi, 12, 7), (cubature.rabinowitz_richter_2, 28, 11)],
)
def test_rule_is_exact_to_its_degree_and_no_further(rule, n, degree):
    nodes, weights = rule()
    assert nodes.shape == (2, n) and weights.shape == (n,)
    assert np.all(weights > 0)
    assert cubature.exact_degree((nodes, weights)) == degree


def test_rabinowitz_richter_weights_match_the_published_ones():
    # Rabinowitz & Richter (1969), rule 2 for exp(-x^2 - y^2), weights as published (times 1/pi):
    # NOT computed here; ours are solved from the moment equations.
    published = np.array([0.8176645817675417e-3, 0.4363323129985824e-1, 0.5373255214498174,
                          0.363610260832152e-2, 0.9817477042468103e-1]) / np.pi  # fmt: skip
    _, w = cubature.rabinowitz_richter_2()
    assert np.allclose(np.unique(np.round(w, 14)), np.sort(published), rtol=1e-12)


def test_nested_rule():
    ss = cubature.stroud_secrest_vi()
    nodes, weights = cubature.nested(ss, cubature.rabinowitz_richter_2())
    assert nodes.shape == (4, 12 * 28) and np.isclose(weights.sum(), 1.0)
    assert cubature.exact_degree((nodes, weights), max_degree=8) == 7
    # degree 16 in total, but a product that each factor rule integrates exactly:
    assert np.isclose(weights @ (nodes[0] ** 6 * nodes[3] ** 10), 15 * 945)
    with pytest.raises(ValueError, match="2-D rules"):
        cubature.nested(cubature.nested(ss, ss), ss)


def test_exact_degree_rejects_bad_input():
    with pytest.raises(ValueError, match="max_degree"):
        cubature.exact_degree(cubature.stroud_secrest_vi(), max_degree=-1)


def test_product_rule_moments():
    X, W = cubature.product_rule(8, dim=4, prune=0.0)
    assert X.shape == (4, 8**4) and W.shape == (8**4,)
    assert np.isclose(W.sum(), 1.0)
    assert np.allclose(X @ W, 0.0, atol=1e-12)
    assert np.allclose((X**2) @ W, 1.0)
    assert np.allclose((X**4) @ W, 3.0)
    assert np.isclose(W @ (X[0] ** 2 * X[1] ** 2), 1.0)


def test_product_rule_pruning_keeps_mass():
    X, W = cubature.product_rule(12, dim=4, prune=1e-10)
    assert W.size < 12**4
    assert np.isclose(W.sum(), 1.0)
    assert np.allclose((X**2) @ W, 1.0, rtol=1e-6)


def test_product_rule_rejects_bad_input():
    with pytest.raises(ValueError, match="n_nodes"):
        cubature.product_rule(0)
