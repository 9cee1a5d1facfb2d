"""Baselines for in-context linear regression with mixed noise (Part III, chapter 04).

Every predictor here reads one regression problem per row of a batch, ``X [B, n, d]``,
``y [B, n]`` and a query ``x_query [B, d]``, and returns its prediction ``[B]`` for the query
(numpy in, numpy out; torch in, torch out). All are ridge regressions

.. math::  \\hat y = x_t^\\top (\\Sigma + \\hat\\sigma^2 I)^{-1} \\alpha,
           \\qquad \\Sigma = \\sum_i x_i x_i^\\top,\\; \\alpha = \\sum_i y_i x_i,

that differ only in the variance estimate ``σ̂²`` (chapter 04, eq. ``eq-ridge``):

- :func:`oracle_ridge`: the true σ of each sequence. With the prior ``w ~ N(0, I)`` and a known
  σ this is the posterior mean of ``w``, hence the best possible predictor given σ; the paper's
  *adjusted loss* (:func:`adjusted_loss`) subtracts its loss.
- :func:`ols`: ``σ̂² = 0``.
- :class:`ConstRR`: one scalar ``σ̂²`` for the whole task, tuned on held-out data.
- :func:`ada_ridge` (AdaRR): ``σ̂² = Σ_j (y_j − ŷ_j^OLS)² / (n − d)``, the unbiased estimate.
- :class:`TunedRR`: ``σ̂² = min(c · σ̂²_AdaRR, τ)``, with the multiplier ``c`` and the cap ``τ``
  tuned on held-out data (the paper tunes "a multiplicative adjustment" and "a maximum threshold";
  it does not give the formula, this is our reading of it).

:func:`bayes_optimal` is the baseline none of the paper's baselines reach: the posterior mean of
``w`` when σ itself is unknown and drawn from a prior (a discrete grid, or a continuous uniform
prior discretised by :func:`uniform_sigma_grid`). It mixes the ridge solutions for every σ on the
grid with the posterior weights of σ (computed with a log-sum-exp).

With one noise level per *token* (chapter 06), :func:`em_reweighted_ridge` fits the posterior mode
of ``w`` by EM, and :func:`bayes_per_token` (from :mod:`attnlab.token_noise`) is the Bayes
posterior mean, the floor no predictor beats on average.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy import optimize

from attnlab.spectral import Spectral, _as_torch, _check_grid, _out, _per_sequence, _problem, _ridge_t, _stats
from attnlab.token_noise import bayes_per_token
from attnlab.validation import (
    check_finite,
    check_int,
    check_positive,
    check_real,
    check_shape,
)

__all__ = [
    "ConstRR",
    "Spectral",
    "TunedRR",
    "ada_ridge",
    "adjusted_loss",
    "bayes_optimal",
    "bayes_per_token",
    "em_reweighted_ridge",
    "half_mse",
    "implied_ridge",
    "noise_variance_ols",
    "ols",
    "oracle_ridge",
    "ridge",
    "sigma_posterior",
    "uniform_sigma_grid",
]


# ------------------------------------------------------------------------------------------------
# Ridge family.
# ------------------------------------------------------------------------------------------------


def ridge(X, y, x_query, lam):
    """Ridge prediction ``x_tᵀ(Σ + lam·I)⁻¹α`` (chapter 04, eq. ``eq-ridge``).

    ``lam`` (a variance, σ̂²) is a non-negative scalar or one value per sequence ``[B]``;
    ``lam = 0`` gives least squares (the pseudo-inverse when ``Σ`` is singular).
    """
    Xt, yt, qt, like = _problem(X, y, x_query)
    lam_t = _per_sequence("lam", lam, Xt.shape[0])
    return _out(_ridge_t(Xt, yt, qt, lam_t), like)


def oracle_ridge(X, y, x_query, sigma):
    """Ridge with the true noise variance ``σ²`` of each sequence (``sigma`` is a std, [B]).

    ``sigma [B, n]``, one std per context token (heteroscedastic prompts, chapter 06), gives the
    weighted ridge ``x_tᵀ(XᵀWX + I)⁻¹XᵀWy`` with ``W = diag(σ_j⁻²)`` (every ``σ_j > 0``): the
    posterior mean of ``w ~ N(0, I)`` when the levels are known.
    """
    Xt, yt, qt, like = _problem(X, y, x_query)
    B, n = yt.shape
    if isinstance(sigma, (np.ndarray, torch.Tensor)) and sigma.ndim == 2:
        check_shape("sigma", sigma, (B, n))
        s = _as_torch("sigma", sigma)
        check_finite("sigma", s)
        if bool((s <= 0).any()):
            raise ValueError("sigma must be > 0 for every token when it is given per token [B, n]")
        return _out(_ridge_t(Xt / s[..., None], yt / s, qt, torch.ones(B, dtype=torch.float64)), like)
    s = _per_sequence("sigma", sigma, B)
    return _out(_ridge_t(Xt, yt, qt, s**2), like)


def ols(X, y, x_query):
    """Ordinary least squares (``σ̂² = 0``)."""
    Xt, yt, qt, like = _problem(X, y, x_query)
    return _out(_ridge_t(Xt, yt, qt, torch.zeros(Xt.shape[0], dtype=torch.float64)), like)


def _ada_sigma2(X, y):
    B, n, d = X.shape
    if n <= d:
        raise ValueError(f"X must have n > d for AdaRR, got n={n}, d={d}")
    Sigma, alpha = _stats(X, y)
    w = torch.linalg.solve(Sigma, alpha[..., None])[..., 0]
    r = y - (X @ w[..., None])[..., 0]
    return (r**2).sum(-1) / (n - d)


def noise_variance_ols(X, y):
    """The unbiased noise-variance estimate ``Σ_j (y_j − ŷ_j^OLS)² / (n − d)`` per sequence [B]."""
    Xt, yt, _, like = _problem(X, y)
    return _out(_ada_sigma2(Xt, yt), like)


def ada_ridge(X, y, x_query):
    """AdaRR: ridge with the OLS estimate of the noise variance (needs ``n > d``)."""
    Xt, yt, qt, like = _problem(X, y, x_query)
    return _out(_ridge_t(Xt, yt, qt, _ada_sigma2(Xt, yt)), like)


def half_mse(prediction, target) -> float:
    """``½·mean((prediction − target)²)``, the loss of the paper's Table 1."""
    p, t = _as_torch("prediction", prediction), _as_torch("target", target)
    if p.shape != t.shape:
        raise ValueError(
            f"prediction and target must have the same shape, got {list(p.shape)}, {list(t.shape)}"
        )
    return float(0.5 * ((p - t) ** 2).mean())


def trimmed_mean(values, drop: float = 1e-4) -> float:
    """Mean of ``values`` without the largest ``ceil(drop · len(values))`` of them.

    A robust companion of the mean for heavy-tailed per-prompt losses: in chapter 04 a handful
    of the 100,000 evaluation prompts can dominate a trained model's mean adjusted loss.
    """
    v = _as_torch("values", values).reshape(-1)
    if v.numel() == 0:
        raise ValueError("values must not be empty")
    drop = check_real("drop", drop, minimum=0.0, maximum=1.0)
    k = math.ceil(drop * v.numel())
    if k >= v.numel():
        raise ValueError(f"drop must leave at least one value, got drop={drop} for {v.numel()} values")
    return float(torch.sort(v).values[: v.numel() - k].mean())


def adjusted_loss(prediction, target, X, y, x_query, sigma) -> float:
    """The paper's *adjusted loss*: ``½·MSE(prediction) − ½·MSE(oracle ridge)`` on the same data.

    Subtracting the oracle ridge loss (the true σ per sequence) removes the irreducible part, so a
    model that is as good as knowing σ scores 0 (chapter 04, eq. ``eq-adjusted``).
    """
    return half_mse(prediction, target) - half_mse(oracle_ridge(X, y, x_query, sigma), target)


# ------------------------------------------------------------------------------------------------
# Tuned baselines.
# ------------------------------------------------------------------------------------------------


def _fit_inputs(X, y, x_query, target):
    """``(Spectral, target)`` from raw arrays, or a ready :class:`Spectral` passed as ``X``."""
    if isinstance(X, Spectral):
        sp = X
        if sp.qv is None:
            raise ValueError("X must be a Spectral built with x_query to fit a baseline")
    else:
        sp = Spectral(X, y, x_query)
    B = sp.y.shape[0]
    check_shape("target", target, (B,))
    tt = _as_torch("target", target)
    check_finite("target", tt)
    return sp, tt


def _mse(pred, target) -> float:
    return float(0.5 * ((pred - target) ** 2).mean())


class ConstRR:
    """Ridge with one constant ``σ̂²`` for the whole task, tuned on held-out data.

    ``ConstRR().fit(X, y, x_query, target)`` chooses ``lam`` minimising the held-out ½·MSE (a
    grid over ``log lam`` refined by a bounded scalar search; ``lam = 0`` is a candidate);
    ``predict(X, y, x_query)`` applies it. ``lam`` may also be given directly. ``fit`` also
    accepts a :class:`Spectral` as ``X`` (then ``y`` and ``x_query`` are ignored).
    """

    def __init__(self, lam: float | None = None):
        self.lam = None if lam is None else check_real("lam", lam, minimum=0.0)

    def fit(self, X, y=None, x_query=None, target=None, *, lam_max: float = 1e3) -> ConstRR:
        sp, tt = _fit_inputs(X, y, x_query, target)
        lam_max = check_positive("lam_max", lam_max)

        qb, ev, t = sp._qb.numpy(), sp.evals.numpy(), tt.numpy()  # numpy: many tiny evaluations

        def loss(lam):
            return float(0.5 * np.mean(((qb / (ev + lam)).sum(-1) - t) ** 2))

        grid = np.concatenate([[0.0], np.geomspace(1e-4, lam_max, 29)])
        losses = [loss(v) for v in grid]
        k = int(np.argmin(losses))
        self.lam = float(grid[k])
        if k > 0:
            lo, hi = np.log(grid[max(k - 1, 1)]), np.log(grid[min(k + 1, len(grid) - 1)])
            res = optimize.minimize_scalar(
                lambda t: loss(np.exp(t)), bounds=(lo, hi), method="bounded", options={"xatol": 1e-4}
            )
            if res.fun <= losses[k]:
                self.lam = float(np.exp(res.x))
        return self

    def predict(self, X, y, x_query):
        if self.lam is None:
            raise ValueError("lam is not set: call fit(...) first or pass lam to ConstRR(lam)")
        return ridge(X, y, x_query, self.lam)


class TunedRR:
    """AdaRR with a tuned multiplier and cap: ``σ̂² = min(c · σ̂²_AdaRR, τ)``.

    The paper tunes "a multiplicative adjustment to the noise estimator" and "a maximum threshold
    for the estimated variance" without giving the formula; this is our reading of it. ``fit``
    chooses ``(c, τ)`` on held-out data: a coarse grid, then Nelder–Mead on ``(log c, log τ)``.
    """

    def __init__(self, c: float | None = None, tau: float | None = None):
        self.c = None if c is None else check_positive("c", c)
        self.tau = None if tau is None else check_positive("tau", tau)

    @staticmethod
    def _rule(s2, c, tau):
        return torch.clamp(c * s2, max=tau)

    def fit(self, X, y=None, x_query=None, target=None) -> TunedRR:
        sp, tt = _fit_inputs(X, y, x_query, target)
        s2 = sp.ada_sigma2().numpy()
        qb, ev, t = sp._qb.numpy(), sp.evals.numpy(), tt.numpy()  # numpy: many tiny evaluations

        def loss(log_c_tau):
            c, tau = np.exp(log_c_tau)
            lam = np.minimum(c * s2, tau)
            return float(0.5 * np.mean(((qb / (ev + lam[:, None])).sum(-1) - t) ** 2))

        top = float(np.quantile(s2, 0.99)) * 2 + 1e-3
        start = min(
            (
                (np.log(c), np.log(tau))
                for c in np.geomspace(0.5, 2, 7)
                for tau in np.geomspace(1e-2, top, 12)
            ),
            key=loss,
        )
        res = optimize.minimize(
            loss,
            np.asarray(start),
            method="Nelder-Mead",
            options={"xatol": 1e-3, "fatol": 1e-10, "maxiter": 200},
        )
        self.c, self.tau = (float(v) for v in np.exp(res.x))
        return self

    def predict(self, X, y, x_query):
        if self.c is None or self.tau is None:
            raise ValueError("c and tau are not set: call fit(...) first or pass them to TunedRR(c, tau)")
        Xt, yt, qt, like = _problem(X, y, x_query)
        lam = self._rule(_ada_sigma2(Xt, yt), self.c, self.tau)
        return _out(_ridge_t(Xt, yt, qt, lam), like)


# ------------------------------------------------------------------------------------------------
# Bayes-optimal predictor for a prior on σ.
# ------------------------------------------------------------------------------------------------


def uniform_sigma_grid(sigma_max: float, n_nodes: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Gauss–Legendre nodes and weights for the uniform prior ``σ ~ U(0, sigma_max)``.

    Returns ``(sigmas, probs)``, ``probs`` summing to one, to pass to :func:`bayes_optimal`: the
    integral over σ of the posterior becomes a weighted sum over the nodes (chapter 04,
    eq. ``eq-bayes``). The nodes avoid σ = 0, where the likelihood of a noisy sequence vanishes.
    """
    sigma_max = check_positive("sigma_max", sigma_max)
    n_nodes = check_int("n_nodes", n_nodes, minimum=1)
    t, w = np.polynomial.legendre.leggauss(n_nodes)
    return sigma_max * (t + 1) / 2, w / w.sum()


def sigma_posterior(X, y, sigmas, probs):
    """Posterior probabilities of every σ on the grid given each sequence: [B, G].

    ``p(σ_g | X, y) ∝ probs_g · N(y; 0, XXᵀ + σ_g² I)`` (the prior ``w ~ N(0, I)`` integrated out).
    """
    _, _, _, like = _problem(X, y)
    s, p = _check_grid(sigmas, probs)
    post, _ = Spectral(X, y).bayes(s, p)
    return _out(post, like)


def verify_sigma_posterior(post, X, y, sigmas, probs, *, atol: float = 1e-6) -> str:
    """Exercise checker (chapter 04): posterior weights ``post [B, G]`` of a grid prior on σ.

    The answer must be ``p(σ_g | X, y) ∝ probs_g · N(y; 0, XXᵀ + σ_g² I)``, normalised over the
    grid, within ``atol`` of :func:`sigma_posterior` on every prompt; raises ``AssertionError`` with
    a hint otherwise.
    """
    want = torch.as_tensor(sigma_posterior(X, y, sigmas, probs), dtype=torch.float64)
    got = torch.as_tensor(post, dtype=torch.float64)
    if got.shape != want.shape:
        raise ValueError(f"post must have shape {list(want.shape)} (prompts, levels), got {list(got.shape)}")
    atol = float(atol)
    if (got.sum(-1) - 1).abs().max() > atol:
        raise AssertionError("the weights of a prompt do not sum to one: normalise over the grid")
    err = float((got - want).abs().max())
    if err <= atol:
        return f"Correct: the posterior of every prompt agrees to {err:.1e}"
    flat = sigma_posterior(X, y, sigmas, np.full(len(np.atleast_1d(sigmas)), 1 / len(np.atleast_1d(sigmas))))
    if float((got - torch.as_tensor(flat, dtype=torch.float64)).abs().max()) <= atol:
        raise AssertionError("these are the weights of a uniform prior: multiply by probs_g")
    raise AssertionError(
        f"off by up to {err:.3g}: p(sigma_g | X, y) is proportional to probs_g N(y; 0, XX^T + sigma_g^2 I)"
    )


def bayes_optimal(X, y, x_query, sigmas, probs, *, return_w: bool = False):
    """Bayes-optimal prediction for ``w ~ N(0, I)`` and σ drawn from a grid prior.

    The posterior mean of ``w`` is ``Σ_g p(σ_g | X, y) (Σ + σ_g² I)⁻¹ α`` (chapter 04,
    eq. ``eq-bayes``); the prediction is its inner product with ``x_query``, which minimises the
    expected squared error among all functions of ``(X, y, x_query)``. ``sigmas`` (standard
    deviations, > 0) and ``probs`` (summing to one) describe the prior: a categorical prior
    directly, a uniform prior ``U(0, σ_max)`` through :func:`uniform_sigma_grid`. Vectorised over
    the batch and the grid; the posterior is normalised with a log-sum-exp. Returns the
    prediction ``[B]``, and also the posterior mean of ``w`` ``[B, d]`` when ``return_w=True``.
    """
    _, _, qt, like = _problem(X, y, x_query)
    s, p = _check_grid(sigmas, probs)
    _, w = Spectral(X, y).bayes(s, p)
    pred = (w * qt).sum(-1)
    if return_w:
        return _out(pred, like), _out(w, like)
    return _out(pred, like)


def implied_ridge(prediction, X, y, x_query, *, lam_max: float = 1e4) -> float:
    """The constant ``σ̂²`` whose ridge predictions are closest to ``prediction`` (least squares).

    Reads a trained model as a ridge regression (chapter 05): on prompts of one noise level,
    a model that adapts to the noise should imply a larger ``σ̂²`` for noisier prompts, while a
    fixed algorithm (GD++) implies about the same one at every noise level.
    """
    sp = Spectral(X, y, x_query)
    B = sp.y.shape[0]
    check_shape("prediction", prediction, (B,))
    p = _as_torch("prediction", prediction).numpy()
    lam_max = check_positive("lam_max", lam_max)
    qb, ev = sp._qb.numpy(), sp.evals.numpy()

    def gap(t):
        return float(np.mean(((qb / (ev + np.exp(t))).sum(-1) - p) ** 2))

    grid = np.linspace(np.log(1e-4), np.log(lam_max), 60)
    k = int(np.argmin([gap(t) for t in grid]))
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]
    res = optimize.minimize_scalar(gap, bounds=(lo, hi), method="bounded", options={"xatol": 1e-5})
    return float(np.exp(res.x))


# ------------------------------------------------------------------------------------------------
# Per-token noise with a known discrete prior: reweighted ridge by EM.
# ------------------------------------------------------------------------------------------------


def em_reweighted_ridge(X, y, x_query, sigmas, probs, *, n_iter: int = 50, return_w: bool = False):
    """Reweighted ridge for per-token noise levels drawn from a known prior, fitted by EM (chapter 06).

    Every context token ``j`` has its own noise std ``σ_j``, drawn independently from the grid
    ``sigmas`` with probabilities ``probs`` (e.g. the two levels of ``"token:0.5,5@0.8,0.2"``), and
    ``w ~ N(0, I)``. Expectation–maximisation for the posterior mode of ``w``, the levels being
    the hidden variables, maximises

    .. math::  -\\tfrac12\\lVert w\\rVert^2 + \\sum_j \\log \\sum_k p_k\\,
               \\mathcal N(y_j - x_j^\\top w;\\, 0, \\sigma_k^2)

    by alternating, from the prior's responsibilities ``r_jk = p_k``,

    - M-step: the weighted ridge ``w = (XᵀWX + I)⁻¹XᵀWy``, ``W = diag(Σ_k r_jk / σ_k²)``;
    - E-step: ``r_jk ∝ p_k N(y_j − x_jᵀw; 0, σ_k²)`` (normalised with a log-sum-exp),

    ``n_iter`` times; no step lowers the objective. It is not the Bayes-optimal predictor
    (:func:`bayes_per_token`, which averages over the ``K^n`` assignments of levels) but uses the
    tokens one by one, which no function of the Gram matrix can. Returns the prediction ``x_tᵀw``
    ``[B]``, and ``w [B, d]`` with ``return_w=True``.
    """
    Xt, yt, qt, like = _problem(X, y, x_query)
    s, p = _check_grid(sigmas, probs)
    n_iter = check_int("n_iter", n_iter, minimum=1)
    d = Xt.shape[-1]
    eye = torch.eye(d, dtype=torch.float64)
    log_prior = torch.log(p)  # a level of probability 0 keeps weight 0
    r = p.expand(*yt.shape, -1)  # [B, n, K]
    for it in range(n_iter + 1):
        W = (r / s**2).sum(-1)  # [B, n]
        A = Xt.mT @ (W[..., None] * Xt) + eye
        w = torch.linalg.solve(A, (Xt.mT @ (W * yt)[..., None]))[..., 0]  # [B, d]
        if it == n_iter:
            break
        res = yt - (Xt @ w[..., None])[..., 0]  # [B, n]
        logr = log_prior - torch.log(s) - 0.5 * (res[..., None] / s) ** 2
        r = torch.softmax(logr, dim=-1)
    pred = (w * qt).sum(-1)
    if return_w:
        return _out(pred, like), _out(w, like)
    return _out(pred, like)
