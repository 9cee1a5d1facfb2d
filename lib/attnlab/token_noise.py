"""The Bayes posterior mean for per-token noise levels (Part III, chapter 06).

A prompt of the heteroscedastic task (``"token:0.5,5@0.8,0.2"``) draws ``w ~ N(0, I_d)`` and,
for every context token on its own, a level ``z_j`` with probability ``π_{z_j}``:

.. math::  y_j = x_j^\\top w + s_{z_j}\\,\\xi_j, \\qquad \\xi_j \\sim \\mathcal N(0, 1).

Given the levels ``z = (z_1, …, z_n)`` the posterior of ``w`` is Gaussian, with precision
``A_z = I + XᵀW_zX`` and mean ``m_z = A_z⁻¹XᵀW_zy`` (``W_z = diag(s_{z_j}⁻²)``, the weighted ridge
of chapter 06's oracle); the levels themselves have the posterior

.. math::  p(z \\mid X, y) \\propto \\prod_j \\pi_{z_j}\\;
           \\mathcal N\\bigl(y;\\, 0,\\, XX^\\top + \\operatorname{diag}(s_{z_j}^2)\\bigr),

so the Bayes posterior mean of the query's target, the lowest mean squared error any function of
the prompt can reach, is ``E_{z | X, y}[x_tᵀ m_z]``. :func:`bayes_per_token` computes it

- ``method="exact"``: by summing over all ``K^n`` assignments of levels (small ``n`` only);
- ``method="gibbs"``: by Gibbs sampling the levels one token at a time, several chains per prompt.
  A token's conditional given the others is ``π_k N(y_j; x_jᵀm_{-j}, v_j + s_k²)``, with the
  leave-one-out mean ``m_{-j}`` and variance ``v_j = x_jᵀA_{-j}⁻¹x_j``; every update of a level is
  a rank-one (Sherman–Morrison) change of ``A⁻¹``, refreshed by a Cholesky factorisation at the
  start of every sweep. Each sweep records the Rao–Blackwellised prediction (the average over
  tokens of ``E[x_tᵀm_z | z_{-j}]``, exact in ``z_j``); the estimate is the mean over chains of
  the sweeps after ``burn_in``, and its Monte Carlo standard error comes from batch means.
"""

from __future__ import annotations

import math

import torch

from attnlab.spectral import _check_grid, _out, _problem
from attnlab.validation import check_choice, check_int, make_generator

__all__ = ["bayes_per_token", "gibbs_trace"]

#: The largest number of assignments ``K^n`` that ``method="exact"`` enumerates.
MAX_ASSIGNMENTS = 2**22


def _posterior_given_levels(X, y, q, W):
    """``(A⁻¹, m, A⁻¹x_t, x_tᵀm)`` of the weighted ridge for per-token precisions ``W [N, n]``."""
    d = X.shape[-1]
    A = X.mT @ (W[..., None] * X) + torch.eye(d, dtype=X.dtype, device=X.device)
    P = torch.cholesky_inverse(torch.linalg.cholesky(A))  # [N, d, d]
    m = (P @ (X.mT @ (W * y)[..., None]))[..., 0]  # [N, d]
    Pq = (P @ q[..., None])[..., 0]  # [N, d]
    return P, m, Pq, (q * m).sum(-1)


def _gibbs_chunk(X, y, q, s2, log_prior, n_chains, n_sweeps, gen):
    """Rao–Blackwellised predictions of every sweep ``[n_chains, n_sweeps, B]`` for one chunk."""
    B, n, _ = X.shape
    R = n_chains
    dev = X.device
    Xr, yr, qr = (t.expand(R, *t.shape).reshape(R * B, *t.shape[1:]) for t in (X, y, q))
    cum = torch.cumsum(log_prior.exp(), 0)[:-1].to(dev)  # the prior's CDF for drawing levels

    def draw(u, probs_cdf):  # a level index from uniforms u and a CDF (last edge 1 implied)
        return (u[..., None] > probs_cdf).sum(-1)

    u0 = torch.rand(R * B, n, generator=gen, dtype=torch.float64, device=gen.device).to(dev)
    z = draw(u0, cum)  # [N, n]: the chains start from the prior
    trace = torch.empty(n_sweeps, R * B, dtype=torch.float64, device=dev)
    for sweep in range(n_sweeps):
        W = 1.0 / s2[z]  # [N, n]
        P, m, Pq, f = _posterior_given_levels(Xr, yr, qr, W)
        u = torch.rand(R * B, n, generator=gen, dtype=torch.float64, device=gen.device).to(dev)
        rb = torch.zeros(R * B, dtype=torch.float64, device=dev)
        for j in range(n):
            x, yj, w = Xr[:, j], yr[:, j], W[:, j]
            Px = (P @ x[..., None])[..., 0]
            h, mu, c = (x * Px).sum(-1), (x * m).sum(-1), (Pq * x).sum(-1)
            den = 1.0 - w * h  # > 0: the prior keeps A_{-j} positive definite
            v, mu_loo = h / den, (mu - w * h * yj) / den  # leave-one-out variance and mean of x_jᵀw
            f_loo = f + w * c * (mu_loo - yj)
            var = v[:, None] + s2  # [N, K]
            r = yj - mu_loo
            logits = log_prior - 0.5 * torch.log(var) - 0.5 * r[:, None] ** 2 / var
            p = torch.softmax(logits, -1)
            rb += (p * (f_loo[:, None] + (c / den)[:, None] * r[:, None] / var)).sum(-1)
            k = draw(u[:, j], torch.cumsum(p, -1)[:, :-1])
            z[:, j] = k
            delta = 1.0 / s2[k] - w
            g = delta / (1.0 + delta * h)  # Sherman–Morrison for A + Δ x xᵀ
            P.addcmul_(Px[:, :, None], (-g[:, None] * Px)[:, None, :])  # in place: P ← P − g·Px Pxᵀ
            m = m + (g * (yj - mu))[:, None] * Px
            Pq = Pq - (g * c)[:, None] * Px
            f = f + g * c * (yj - mu)
            W[:, j] = 1.0 / s2[k]
        trace[sweep] = rb / n
    return trace.reshape(n_sweeps, R, B).transpose(0, 1)


def _exact_chunk(X, y, q, s2, log_prior, block):
    """``E_{z | X, y}[x_tᵀ m_z]`` for one chunk by summing over every assignment of levels."""
    B, n, d = X.shape
    dev = X.device
    outer = (X[..., :, None] * X[..., None, :]).reshape(B, n, d * d)  # [B, n, d²]
    Xy, eye = X * y[..., None], torch.eye(d, dtype=X.dtype, device=dev)
    run_max = torch.full((B,), -math.inf, dtype=torch.float64, device=dev)
    run_w = torch.zeros(B, dtype=torch.float64, device=dev)
    run_f = torch.zeros(B, dtype=torch.float64, device=dev)
    K = s2.numel()
    digits = K ** torch.arange(n, device=dev)  # assignment number a has level (a // K^j) % K at token j
    for start in range(0, K**n, block):
        a = torch.arange(start, min(start + block, K**n), device=dev)
        Z = (a[:, None] // digits) % K  # [C, n]
        W = 1.0 / s2[Z]  # [C, n]
        A = (W @ outer).reshape(B, -1, d, d) + eye  # [B, C, d, d]
        L = torch.linalg.cholesky(A)
        b = W @ Xy  # [B, C, d]
        m = torch.cholesky_solve(b[..., None], L)[..., 0]
        quad = W @ (y**2)[..., None] - (b * m).sum(-1)[..., None]  # yᵀ(XXᵀ + D)⁻¹y by Woodbury
        logdet = 2 * torch.log(torch.diagonal(L, dim1=-2, dim2=-1)).sum(-1) - torch.log(W).sum(-1)
        logp = log_prior[Z].sum(-1) - 0.5 * (quad[..., 0] + logdet)  # [B, C]
        f = (m * q[:, None, :]).sum(-1)  # [B, C]
        new_max = torch.maximum(run_max, logp.max(-1).values)
        scale, e = torch.exp(run_max - new_max), torch.exp(logp - new_max[:, None])
        run_w = run_w * scale + e.sum(-1)
        run_f = run_f * scale + (e * f).sum(-1)
        run_max = new_max
    return run_f / run_w


def _setup(X, y, x_query, sigmas, probs, chunk):
    Xt, yt, qt, like = _problem(X, y, x_query)
    s, p = _check_grid(sigmas, probs)
    dev = Xt.device
    s2 = (s**2).to(dev)
    log_prior = torch.log(p).to(dev)  # a level of probability 0 is never drawn
    chunk = check_int("chunk", chunk, minimum=1)
    return Xt, yt, qt, like, s2, log_prior, chunk


def _chunks(Xt, yt, qt, chunk):
    """``(X, y, x_query)`` of ``chunk`` prompts at a time."""
    for i in range(0, Xt.shape[0], chunk):
        yield Xt[i : i + chunk], yt[i : i + chunk], qt[i : i + chunk]


def gibbs_trace(X, y, x_query, sigmas, probs, *, n_sweeps=400, n_chains=4, generator=0, chunk=2_000):
    """The Gibbs sampler's Rao–Blackwellised prediction after every sweep: ``[n_chains, n_sweeps, B]``.

    Burn-in included, for diagnostics (autocorrelation, agreement of chains); the arguments are
    those of :func:`bayes_per_token`. Every chain starts from levels drawn from the prior.
    """
    Xt, yt, qt, like, s2, log_prior, chunk = _setup(X, y, x_query, sigmas, probs, chunk)
    n_sweeps = check_int("n_sweeps", n_sweeps, minimum=1)
    n_chains = check_int("n_chains", n_chains, minimum=1)
    gen = make_generator(generator, device=Xt.device)
    parts = [_gibbs_chunk(*c, s2, log_prior, n_chains, n_sweeps, gen) for c in _chunks(Xt, yt, qt, chunk)]
    return _out(torch.cat(parts, dim=-1), like)


def bayes_per_token(
    X,
    y,
    x_query,
    sigmas,
    probs,
    *,
    method: str = "gibbs",
    n_sweeps: int = 400,
    burn_in: int = 50,
    n_chains: int = 4,
    n_batches: int = 5,
    generator=0,
    chunk: int = 2_000,
    return_se: bool = False,
):
    """Bayes posterior mean of ``x_tᵀw`` when every context token has its own noise level.

    Each token's std is drawn independently from ``sigmas`` (> 0) with probabilities ``probs``,
    and ``w ~ N(0, I)`` (module docstring); ``X [B, n, d]``, ``y [B, n]``, ``x_query [B, d]``,
    numpy in and numpy out or torch in and torch out (on the tensors' device).

    ``method="exact"`` sums over the ``K^n`` assignments of levels (at most ``2**22``);
    ``method="gibbs"`` runs ``n_chains`` chains of ``n_sweeps`` sweeps per prompt from the prior,
    drops the first ``burn_in`` sweeps and averages the rest. ``generator`` (an int seed or a
    ``torch.Generator``) draws every chain; ``chunk`` prompts are sampled at a time.
    ``return_se=True`` also returns the Monte Carlo standard error of every prediction ``[B]``:
    each chain's kept sweeps are cut into ``n_batches`` consecutive batches and the standard error
    is that of the mean of the ``n_chains · n_batches`` batch means (zero for ``"exact"``). It is
    honest when a batch is much longer than the chain's autocorrelation time (on chapter 06's
    prompts about 2 sweeps for the median prompt, up to about 35 for the slowest of 400); for short
    runs take ``n_batches=1`` (independent chain means) and more chains.
    """
    method = check_choice("method", method, ("exact", "gibbs"))
    Xt, yt, qt, like, s2, log_prior, chunk = _setup(X, y, x_query, sigmas, probs, chunk)
    B, n, _ = Xt.shape
    if method == "exact":
        if s2.numel() ** n > MAX_ASSIGNMENTS:
            raise ValueError(
                f"n must keep K^n <= {MAX_ASSIGNMENTS} for method='exact', got K={s2.numel()}, n={n}; "
                "use method='gibbs'"
            )
        budget = 2**27 if Xt.device.type == "cuda" else 2**21  # numbers held per step: 1 GB or 16 MB
        block = max(1, budget // (min(chunk, B) * Xt.shape[-1] ** 2))
        pred = torch.cat([_exact_chunk(*c, s2, log_prior, block) for c in _chunks(Xt, yt, qt, chunk)])
        se = torch.zeros_like(pred)
    else:
        n_sweeps = check_int("n_sweeps", n_sweeps, minimum=2)
        burn_in = check_int("burn_in", burn_in, minimum=0, maximum=n_sweeps - 1)
        n_chains = check_int("n_chains", n_chains, minimum=1)
        n_batches = check_int("n_batches", n_batches, minimum=1, maximum=n_sweeps - burn_in)
        if n_chains * n_batches < 2:
            raise ValueError("n_chains * n_batches must be >= 2 to estimate a standard error")
        gen = make_generator(generator, device=Xt.device)
        size = (n_sweeps - burn_in) // n_batches
        preds, ses = [], []
        for c in _chunks(Xt, yt, qt, chunk):
            tr = _gibbs_chunk(*c, s2, log_prior, n_chains, n_sweeps, gen)  # [R, S, b]
            kept = tr[:, n_sweeps - size * n_batches :]  # the remainder of the division joins the burn-in
            means = kept.reshape(n_chains * n_batches, size, -1).mean(1)  # [R·n_batches, b]
            preds.append(means.mean(0))
            ses.append(means.std(0) / math.sqrt(means.shape[0]))
        pred, se = torch.cat(preds), torch.cat(ses)
    if return_se:
        return _out(pred, like), _out(se, like)
    return _out(pred, like)
