"""Part I's theory at a generic task: a random, non-symmetric task matrix and unequal letter
probabilities, where the histogram task's symmetries (``M = I``, uniform letters) would hide a
transposed index."""

from __future__ import annotations

import numpy as np

from attnlab.tasks import histogram as th
from attnlab.theory import diagonal_net as dn

d, N = 4, 5


def _generic(seed=0):
    rng = np.random.default_rng(seed)
    M = rng.standard_normal((d, d))
    probs = rng.dirichlet(np.ones(d) * 2)
    return M, th.count_moments(N, d, probs)


def test_escape_matrix_of_l_tf_is_minus_its_gradient_at_the_origin():
    """``c_k = -dl_tf/dp_k`` at ``P = 0``: the gradient ``dl/dQ`` at ``Q = 0, v = 1``."""
    M, S = _generic()
    assert not np.allclose(M, M.T)
    dQ, _ = dn.grad_tf(np.zeros((d, d)), np.ones(d), M, S)
    np.testing.assert_allclose(dn.escape_matrix(M, S), -dQ, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dn.escape_rates(M, S), np.linalg.norm(dQ, axis=0), rtol=1e-12)
