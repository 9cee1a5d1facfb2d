"""Heavy tails of per-prompt losses, and the extreme eigenvalues of a prompt (Part III, chapter 04).

A deep linear transformer is a polynomial of high degree in its prompt. It inverts the prompt's
``Sigma = X^T X`` well on the range of eigenvalues it was trained on and explodes on a rare prompt
whose largest eigenvalue falls beyond that range, so a mean over prompts can be carried by one of
them. This module holds the statistics that score such losses and the law of the prompts' extreme
eigenvalues:

- :func:`hill`: Hill's estimate of the tail index ``a`` of ``P(loss > s) ~ s^-a`` from the ``k``
  largest values (the mean is finite for ``a > 1``, the variance for ``a > 2``);
- :func:`trimmed`: the mean without the largest ``ceil(trim * N)`` values, with its standard
  error (from the variance of the values winsorised at the same point);
- :func:`tail_summary`: every statistic of the scoring rule of chapter 04 for one sample, and
  whether its tail allows a mean with a standard error (:func:`mean_allowed`);
- :func:`verdict`: a value with a standard error against a target ``paper +- halfwidth``;
- :func:`score`: chapter 04's scoring rule for one cell (the statistic its tail allows, and the
  verdict);
- :func:`with_top_eigenvalue`: the same prompts with only the largest eigenvalue of ``Sigma``
  moved (the counterfactual that removes, or makes, a catastrophic prompt);
- :func:`sample_given_lmax`: prompts of the task drawn exactly conditioned on ``lambda_max(Sigma)
  = t`` (the mean loss at a given extreme eigenvalue, however rare);
- :func:`sample_spiked`: prompts whose ``X`` has one column of variance ``s_j`` with probability
  ``pi_j``, with the weights ``p/q`` that make any mean over them unbiased for the task's
  (importance sampling that shows a trainer or an estimate the prompts with a large
  ``lambda_max``);
- :func:`lmax_tail_mean`: ``E[f; lambda_max > t_0]`` from a function's means at given
  ``lambda_max`` (with :func:`sample_given_lmax`, the far-tail part of a population mean that no
  sample of prompts reaches);
- :func:`stability_edge`: the largest ``lambda_max`` for which the x-steps ``s -> s (1 +
  omega_xx s)^2`` of a DIAG-like model keep contracting;
- :func:`wishart_lmax_sf`, :func:`wishart_lmin_cdf`: the exact tails of the largest and smallest
  eigenvalue of ``X^T X`` for ``X [n, d]`` with iid ``N(0, 1)`` entries (de Bruijn's Pfaffian of
  the eigenvalue density, computed as ``1 - sqrt(det(I - E))`` with ``E`` small, so that a tail
  probability far below float64's epsilon keeps its relative precision). The basis of the
  Pfaffian, Gamma densities of consecutive shapes, is ill-conditioned (condition number
  ``3e10`` for ``n = 20``, ``d = 10``): results carry a relative error up to about that times
  ``1e-16`` (measured: ``5e-7`` against 30-digit arithmetic), and sizes whose condition number
  exceeds ``1e12`` are refused.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy import integrate, optimize, special

from attnlab.tasks.icl_regression import Noise, RegressionBatch
from attnlab.validation import check_int, check_probabilities, check_real, make_generator, resolve_dtype

__all__ = [
    "hill",
    "lmax_tail_mean",
    "mean_allowed",
    "sample_given_lmax",
    "sample_spiked",
    "score",
    "stability_edge",
    "tail_summary",
    "trimmed",
    "verdict",
    "wishart_lmax_sf",
    "wishart_lmin_cdf",
    "with_top_eigenvalue",
]


def _sample(name: str, values, minimum: int = 2) -> np.ndarray:
    v = np.asarray(values, dtype=float).reshape(-1)
    if v.size < minimum:
        raise ValueError(f"{name} must hold at least {minimum} values, got {v.size}")
    if not np.isfinite(v).all():
        raise ValueError(f"{name} must be finite (a non-finite loss has no tail index)")
    return v


def hill(values, k):
    """Hill's tail index from the ``k`` largest of ``values``: ``1 / mean(log(v_(i) / v_(k+1)))``.

    ``v_(1) >= v_(2) >= ...`` are the values in decreasing order; the ``k + 1`` largest must be
    positive. For ``P(V > s) = (s / s_0)^-a`` the estimate tends to ``a`` with standard error
    about ``a / sqrt(k)``. ``k`` is an int (returns a float) or a sequence of ints (returns an
    array: the Hill plot, whose flatness over ``k`` says whether one power law fits the tail).
    """
    v = _sample("values", values)
    ks = np.atleast_1d(np.asarray(k))
    if ks.size == 0 or not np.issubdtype(ks.dtype, np.integer) or ks.min() < 1 or ks.max() >= v.size:
        raise ValueError(f"k must be an integer (or integers) in [1, {v.size - 1}], got {k!r}")
    top = -np.sort(-np.partition(v, v.size - ks.max() - 1)[v.size - ks.max() - 1 :])  # k_max + 1 largest
    if top[-1] <= 0:
        raise ValueError(f"the {ks.max() + 1} largest values must be positive, got {top[-1]:g}")
    logs = np.log(top)
    mean_log = np.cumsum(logs)[ks - 1] / ks
    with np.errstate(divide="ignore"):
        index = 1.0 / (mean_log - logs[ks])
    return float(index[0]) if np.ndim(k) == 0 else index


def trimmed(values, trim: float = 1e-4) -> tuple[float, float]:
    """``(mean, standard error)`` of ``values`` without the largest ``ceil(trim * N)`` of them.

    The standard error is that of an upper-trimmed mean, ``sd(w) / ((1 - trim) sqrt(N))`` with
    ``w`` the values winsorised at the largest value kept (its influence function); unlike the
    plain mean's it exists whatever the tail.
    """
    v = _sample("values", values)
    trim = check_real("trim", trim, minimum=0.0, maximum=0.5)
    k = math.ceil(trim * v.size)
    if k >= v.size - 1:
        raise ValueError(f"trim must leave at least two values, got trim={trim} for {v.size} values")
    s = np.sort(v)
    kept = s[: v.size - k]
    w = np.minimum(v, kept[-1])
    return float(kept.mean()), float(w.std(ddof=1) / ((1 - k / v.size) * math.sqrt(v.size)))


def mean_allowed(index: float, k: int, margin: float = 2.0) -> bool:
    """Whether a tail index ``index`` estimated from ``k`` values allows a mean with a standard
    error: the variance is finite (index > 2) by ``margin`` standard errors of the Hill estimate
    (``index / sqrt(k)``), i.e. ``index * (1 - margin / sqrt(k)) > 2``."""
    k = check_int("k", k, minimum=1)
    margin = check_real("margin", margin, minimum=0.0)
    return bool(np.isfinite(index) and index * (1 - margin / math.sqrt(k)) > 2)


def tail_summary(losses, trim: float = 1e-4, margin: float = 2.0) -> dict:
    """Every statistic of chapter 04's scoring rule for one sample of per-prompt losses.

    Returns ``n``; ``mean`` and ``se`` (``sd / sqrt(n)``); ``median``; ``trim``, ``trimmed`` and
    ``trimmed_se`` (:func:`trimmed`); ``k = ceil(trim * n)`` and ``index``, the Hill estimate
    from the ``k`` largest losses (the ones the trimmed mean drops), with ``index_se``;
    ``worst_share``, the largest loss over the sum; and ``mean_ok`` (:func:`mean_allowed`): whether
    the tail allows the mean to be reported with its standard error.
    """
    v = _sample("losses", losses)
    t_mean, t_se = trimmed(v, trim)
    k = max(math.ceil(trim * v.size), 1)
    index = hill(v, k)
    return {
        "n": int(v.size),
        "mean": float(v.mean()),
        "se": float(v.std(ddof=1) / math.sqrt(v.size)),
        "median": float(np.median(v)),
        "trim": float(trim),
        "trimmed": t_mean,
        "trimmed_se": t_se,
        "k": k,
        "index": index,
        "index_se": index / math.sqrt(k),
        "worst_share": float(v.max() / v.sum()) if v.sum() > 0 else float("nan"),
        "mean_ok": mean_allowed(index, k, margin),
    }


def verdict(value: float, se: float, paper: float, halfwidth: float, z: float = 2.0) -> str:
    """``"met"`` if ``value +- z se`` lies inside ``paper +- halfwidth``, ``"missed"`` if it lies
    wholly outside, ``"undecided"`` otherwise (the prompts do not decide)."""
    se = check_real("se", se, minimum=0.0)
    halfwidth = check_real("halfwidth", halfwidth, minimum=0.0, strict_minimum=True)
    z = check_real("z", z, minimum=0.0)
    off = abs(check_real("value", value) - check_real("paper", paper))
    if off + z * se <= halfwidth:
        return "met"
    if off - z * se > halfwidth:
        return "missed"
    return "undecided"


def score(
    losses, paper: float, halfwidth: float, trim: float = 1e-4, margin: float = 2.0, z: float = 2.0
) -> dict:
    """Chapter 04's scoring rule for one cell: :func:`tail_summary` of its per-prompt ``losses``;
    ``by = "mean"`` where the tail allows a mean (``mean_ok``), the cell's ``value +- value_se``
    then being the mean and its standard error, otherwise ``by = "trimmed"`` and the trimmed mean
    with its standard error; and ``verdict`` (:func:`verdict`) of that value against ``paper +-
    halfwidth`` at ``z`` standard errors."""
    s = tail_summary(losses, trim, margin)
    by = "mean" if s["mean_ok"] else "trimmed"
    value, se = (s["mean"], s["se"]) if by == "mean" else (s["trimmed"], s["trimmed_se"])
    return {**s, "by": by, "value": value, "value_se": se, "verdict": verdict(value, se, paper, halfwidth, z)}


# -- prompts with a given extreme eigenvalue -----------------------------------------------------


def _check_batch(batch):
    if not isinstance(batch, RegressionBatch) or batch.X.ndim != 3 or batch.sigma.ndim != 1:
        raise ValueError("batch must be a RegressionBatch of one noise setting (X [B, n, d], sigma [B])")
    return batch


def with_top_eigenvalue(batch: RegressionBatch, t) -> RegressionBatch:
    """The prompts of ``batch`` with the largest eigenvalue of ``Sigma = X^T X`` set to ``t``.

    ``X = U diag(s) V^T`` becomes ``U diag(sqrt(t), s_2, ...) V^T``; ``w``, ``x_query``, ``sigma``
    and the noise draw ``y - X w`` are kept and ``y`` is recomputed, so only ``lambda_max``
    changes. ``t`` is a number or one per prompt ``[B]``; it should stay above ``s_2^2``.
    """
    batch = _check_batch(batch)
    t = torch.as_tensor(t, dtype=batch.X.dtype).expand(batch.X.shape[0])
    if not bool((t >= 0).all()):
        raise ValueError("t must be >= 0 (an eigenvalue of X^T X)")
    U, S, Vh = torch.linalg.svd(batch.X, full_matrices=False)  # S in decreasing order
    S = torch.cat([t.sqrt()[:, None], S[:, 1:]], dim=1)
    X = U @ (S[..., None] * Vh)
    noise = batch.y - (batch.X @ batch.w[..., None])[..., 0]
    y = (X @ batch.w[..., None])[..., 0] + noise
    return batch._replace(X=X, y=y)


def _haar(B, n, d, gen, dtype):
    """``[B, n, d]`` with orthonormal columns, Haar-distributed (QR with the signs fixed)."""
    Qm, R = torch.linalg.qr(torch.randn(B, n, d, generator=gen, dtype=dtype))
    return Qm * torch.sign(torch.diagonal(R, dim1=-2, dim2=-1))[:, None, :]


def sample_given_lmax(
    batch_size: int, t: float, d: int = 10, n: int = 20, *, noise="fixed:0", generator=0, dtype="float64"
) -> RegressionBatch:
    """Prompts of the task (:func:`~attnlab.tasks.icl_regression.sample_regression`) conditioned on
    ``lambda_max(X^T X) = t`` exactly.

    For Gaussian ``X = U diag(sqrt(l)) V^T`` the frames ``U [n, d]``, ``V [d, d]`` are Haar and
    independent of the eigenvalues ``l``, whose density is ``prod l_i^((n-d-1)/2) e^(-l_i/2)
    prod |l_i - l_j|``. Given the largest ``= t``, the others have the density of the eigenvalues
    of ``W_{d-1}(n-1)`` times ``prod (t - l_i)`` on ``l_i < t``: drawn by rejection (accepted with
    probability ``prod (1 - l_i/t)``, cheap for ``t`` above the bulk, slow far below it). ``w``,
    ``x_query``, ``sigma`` (from ``noise``) and the label noise are drawn as in the task.
    """
    batch_size = check_int("batch_size", batch_size, minimum=1)
    d, n = check_int("d", d, minimum=2), check_int("n", n, minimum=2)
    if n < d:
        raise ValueError(f"n must be >= d, got n={n}, d={d}")
    t = check_real("t", t, minimum=0.0, strict_minimum=True)
    spec, gen, dt = Noise.parse(noise), make_generator(generator), resolve_dtype(dtype)
    if spec.per_token:
        raise ValueError("noise must draw one sigma per prompt (not 'token:...')")
    rest, have, tries = [], 0, 0
    while have < batch_size:
        tries += 1
        if tries > 1000:
            raise ValueError(f"t={t:g} is too far below the bulk of lambda_max for rejection sampling")
        Y = torch.randn(4 * batch_size, n - 1, d - 1, generator=gen, dtype=torch.float64)
        ev = torch.linalg.eigvalsh(Y.transpose(1, 2) @ Y)
        accept = torch.where(ev[:, -1] < t, torch.prod((1 - ev / t).clamp(min=0), -1), torch.zeros(()))
        keep = torch.rand(len(accept), generator=gen, dtype=torch.float64) < accept
        rest.append(ev[keep])
        have += int(keep.sum())
    lam = torch.cat([torch.cat(rest)[:batch_size], torch.full((batch_size, 1), t, dtype=torch.float64)], 1)
    U, V = _haar(batch_size, n, d, gen, torch.float64), _haar(batch_size, d, d, gen, torch.float64)
    X = U @ (lam.sqrt()[:, :, None] * V.transpose(1, 2))
    w = torch.randn(batch_size, d, generator=gen, dtype=torch.float64)
    x_query = torch.randn(batch_size, d, generator=gen, dtype=torch.float64)
    xi = torch.randn(batch_size, n, generator=gen, dtype=torch.float64)
    sigma = spec.draw((batch_size,), gen, torch.float64)
    y = (X @ w[..., None])[..., 0] + sigma[:, None] * xi
    out = (X, y, x_query, (x_query * w).sum(-1), sigma, w)
    return RegressionBatch(*(v.to(dt) for v in out))


def sample_spiked(
    batch_size: int,
    d: int = 10,
    n: int = 20,
    *,
    scales=(1.0, 2.0, 3.0, 4.0, 6.0),
    probs=(0.5, 0.125, 0.125, 0.125, 0.125),
    noise="fixed:0",
    generator=0,
    dtype="float64",
) -> tuple[RegressionBatch, torch.Tensor]:
    """Prompts from an importance-sampling proposal that makes a large ``lambda_max`` common, and
    their weights ``[B]``.

    Each prompt's ``X`` has its first column scaled to variance ``scales[j]`` with probability
    ``probs[j]`` (a defensive mixture: keep a scale 1); the rest is the task's. The weight is the
    likelihood ratio ``p(X) / q(X) = 1 / sum_j probs_j s_j^(-n/2) exp((1 - 1/s_j) Q / 2)``, ``Q``
    the first column's squared norm: for any function ``f`` of a prompt, ``mean(weights * f)`` is
    an unbiased estimate of the task's ``E f``, and the weights are at most ``1 / probs[j]`` for the
    scale 1. Used to train with the rare prompts of a large ``lambda_max`` in view (chapter 04).
    """
    batch_size = check_int("batch_size", batch_size, minimum=1)
    d, n = check_int("d", d, minimum=1), check_int("n", n, minimum=1)
    s = torch.as_tensor([check_real("scales", v, minimum=0.0, strict_minimum=True) for v in scales])
    pi = torch.as_tensor(check_probabilities("probs", probs, size=len(s)))
    s, pi = s.double(), pi.double()
    spec, gen, dt = Noise.parse(noise), make_generator(generator), resolve_dtype(dtype)
    if spec.per_token:
        raise ValueError("noise must draw one sigma per prompt (not 'token:...')")
    X = torch.randn(batch_size, n, d, generator=gen, dtype=torch.float64)
    w = torch.randn(batch_size, d, generator=gen, dtype=torch.float64)
    x_query = torch.randn(batch_size, d, generator=gen, dtype=torch.float64)
    xi = torch.randn(batch_size, n, generator=gen, dtype=torch.float64)
    sigma = spec.draw((batch_size,), gen, torch.float64)
    comp = torch.multinomial(pi, batch_size, replacement=True, generator=gen)
    X[:, :, 0] *= s[comp].sqrt()[:, None]
    Q = (X[:, :, 0] ** 2).sum(-1)
    log_q_over_p = torch.logsumexp(
        pi.log()[None, :] - n / 2 * s.log()[None, :] + 0.5 * (1 - 1 / s)[None, :] * Q[:, None], dim=-1
    )
    y = (X @ w[..., None])[..., 0] + sigma[:, None] * xi
    out = (X, y, x_query, (x_query * w).sum(-1), sigma, w)
    return RegressionBatch(*(v.to(dt) for v in out)), torch.exp(-log_q_over_p).to(dt)


def stability_edge(omega_xx) -> float:
    """The smallest ``lambda`` at which the x-steps of a DIAG-like model stop contracting.

    Layer ``l`` maps an eigenvalue ``s`` of the tokens' ``Sigma`` to ``s (1 + omega_xx[l] s)^2``
    (chapter 03's GD++ step; the DIAG x-update at ``sigma = 0`` up to its small ``omega_xy``
    term). Every layer but the last feeds the next one, which amplifies an eigenvalue unless
    ``|1 + omega_xx[l] s| <= 1``; the edge is the smallest ``lambda = s^(0)`` at which one of them
    fails. ``omega_xx[:-1]`` must be negative (contracting steps); the last layer's is not used.
    """
    w = np.asarray(omega_xx, dtype=float).reshape(-1)
    if w.size < 2 or not np.isfinite(w).all() or not (w[:-1] < 0).all():
        raise ValueError(f"omega_xx must hold >= 2 finite values, all but the last < 0, got {w.tolist()}")

    def excess(lam):
        s, worst = lam, -1.0
        for wl in w[:-1]:
            worst = max(worst, abs(1 + wl * s) - 1)
            s = s * (1 + wl * s) ** 2
        return worst

    hi = 2 / abs(w[0])  # the first step alone stops contracting there
    grid = np.linspace(0, hi, 20_001)[1:]
    bad = np.nonzero([excess(v) > 0 for v in grid])[0]
    if not bad.size:
        return float(hi)
    j = bad[0]
    lo = grid[j - 1] if j else 0.0
    return float(optimize.brentq(excess, lo, grid[j], xtol=1e-10)) if j else float(grid[0])


# -- the extreme eigenvalues of a Wishart matrix ------------------------------------------------


_MAX_COND = 1e12


def _gamma_pdf(a, z):
    """The Gamma(a, scale 2) density at ``z``: ``phi_j`` of the eigenvalue density, normalised."""
    return np.exp((a - 1) * np.log(z) - z / 2 - special.gammaln(a) - a * math.log(2))


def _pfaffian_setup(n, d):
    """Shapes ``a_j`` and the normalised skew matrix of the whole half-line (de Bruijn).

    The ordered eigenvalues have density ``prod_i l_i^((n-d-1)/2) e^(-l_i/2) prod_{i<j}(l_j - l_i)
    = det[phi_j(l_i)]``, ``phi_j`` the Gamma(a_j, 2) densities up to constants, so the
    probability that all lie in ``[lo, hi]`` is ``Pf(A[lo, hi]) / Pf(A[0, inf])`` with ``A_jk =
    int int sgn(z - y) phi_j(y) phi_k(z)``; on the half-line ``A_jk = 2 P(Y_j < Y_k) - 1``. An odd
    ``d`` borders ``A`` with ``int phi_j``.
    """
    n, d = check_int("n", n, minimum=1), check_int("d", d, minimum=1)
    if n < d:
        raise ValueError(f"n must be >= d (a full-rank Wishart matrix), got n={n}, d={d}")
    a = (n - d - 1) / 2 + np.arange(d) + 1.0
    whole = 2 * special.betainc(a[:, None], a[None, :], 0.5) - 1
    np.fill_diagonal(whole, 0.0)
    if d % 2:
        whole = np.pad(whole, ((0, 1), (0, 1)))
        whole[:d, d], whole[d, :d] = 1.0, -1.0
    cond = np.linalg.cond(whole)
    if not cond < _MAX_COND:
        raise ValueError(
            f"n, d = {n}, {d} are too large for this float64 Pfaffian (condition number {cond:.1e} "
            f"> {_MAX_COND:.0e}); use Monte Carlo"
        )
    return a, whole


def _one_minus_pf_ratio(whole, D):
    """``1 - Pf(whole - D) / Pf(whole)`` as ``1 - sqrt(det(I - whole^-1 D))``, from the
    eigenvalues ``mu`` of the small matrix ``whole^-1 D`` (no cancellation): ``log det(I - E) =
    sum log|1 - mu|``, each term ``log1p(|mu|^2 - 2 Re mu) / 2`` in real arithmetic (numpy's
    complex ``log1p`` is not accurate near 0)."""
    mu = np.linalg.eigvals(np.linalg.solve(whole, D))
    with np.errstate(divide="ignore"):  # mu = 1: the whole interval excluded, det 0
        log_det = 0.5 * np.sum(np.log1p(np.abs(mu) ** 2 - 2 * mu.real))
    return float(-np.expm1(0.5 * log_det))


def lmax_tail_mean(grid, means, n: int = 20, d: int = 10) -> float:
    """``E[f; lambda_max > grid[0]]`` from ``means[i] = E[f | lambda_max = grid[i]]``.

    The law of ``lambda_max`` is exact (:func:`wishart_lmax_sf`); between grid points the mean is
    taken as the average of its two ends (the midpoint rule on each bin's probability), and beyond
    the last point as its value there. ``grid`` increasing, ``means`` finite.
    """
    t = np.asarray(grid, dtype=float).reshape(-1)
    m = np.asarray(means, dtype=float).reshape(-1)
    if t.size < 2 or m.shape != t.shape or not (np.diff(t) > 0).all() or t[0] < 0:
        raise ValueError("grid must be >= 2 increasing values >= 0 and means one value per grid point")
    if not np.isfinite(m).all():
        raise ValueError("means must be finite (an overflowing mean has no finite integral here)")
    sf = np.array([wishart_lmax_sf(v, n, d) for v in t])
    return float(np.sum((sf[:-1] - sf[1:]) * 0.5 * (m[:-1] + m[1:])) + sf[-1] * m[-1])


def _cross(f, g, lo, hi):
    return integrate.quad(lambda z: f(z) - g(z), lo, hi, epsabs=0, epsrel=1e-12, limit=200)[0]


def wishart_lmax_sf(x: float, n: int, d: int) -> float:
    """``P(lambda_max(X^T X) > x)`` for ``X [n, d]`` with iid ``N(0, 1)`` entries, exactly.

    For large ``x`` it behaves like ``x^((n+d-3)/2) e^(-x/2)``. (With ``n = 20``, ``d = 10``:
    ``P(lambda_max > 80) = 4.3395e-4``.) Relative precision: see the module.
    """
    x = check_real("x", x, minimum=0.0)
    a, whole = _pfaffian_setup(n, d)
    Q = special.gammaincc(a, x / 2)
    D = np.zeros_like(whole)
    for j in range(d):
        for k in range(j + 1, d):
            cross = _cross(
                lambda z, j=j, k=k: special.gammaincc(a[j], z / 2) * _gamma_pdf(a[k], z),
                lambda z, j=j, k=k: _gamma_pdf(a[j], z) * special.gammaincc(a[k], z / 2),
                x,
                np.inf,
            )
            D[j, k] = Q[k] - Q[j] - cross
            D[k, j] = -D[j, k]
    if d % 2:
        D[:d, d], D[d, :d] = Q, -Q
    return _one_minus_pf_ratio(whole, D)


def wishart_lmin_cdf(x: float, n: int, d: int) -> float:
    """``P(lambda_min(X^T X) < x)`` for ``X [n, d]`` with iid ``N(0, 1)`` entries, exactly.

    For small ``x`` it behaves like ``x^((n-d+1)/2)``. Relative precision: see the module.
    """
    x = check_real("x", x, minimum=0.0)
    a, whole = _pfaffian_setup(n, d)
    if x == 0:
        return 0.0
    P, Q = special.gammainc(a, x / 2), special.gammaincc(a, x / 2)
    D = np.zeros_like(whole)
    for j in range(d):
        for k in range(j + 1, d):
            cross = _cross(
                lambda z, j=j, k=k: special.gammainc(a[j], z / 2) * _gamma_pdf(a[k], z),
                lambda z, j=j, k=k: _gamma_pdf(a[j], z) * special.gammainc(a[k], z / 2),
                0.0,
                x,
            )
            D[j, k] = cross + P[j] * Q[k] - Q[j] * P[k]
            D[k, j] = -D[j, k]
    if d % 2:
        D[:d, d], D[d, :d] = P, -P
    return _one_minus_pf_ratio(whole, D)
