"""In-context linear regression with mixed noise variance (Part III, paper C).

Every sequence has its own task vector and its own noise level (paper C, section 2 and section 5):

    w ~ N(0, I_d),  x_i ~ N(0, I_d),  y_i = <w, x_i> + xi_i,  xi_i ~ N(0, sigma^2),  i = 1..n,

and a query ``x_query ~ N(0, I_d)`` whose *noiseless* target ``<w, x_query>`` is to be predicted.
The noise standard deviation ``sigma`` is drawn once per sequence, in one of three ways:

- ``sigma=s``: fixed, every sequence has noise ``s`` (``s = 0`` is noiseless regression);
- ``sigma_max=m``: uniform, ``sigma ~ U(0, m)`` (the paper's main setting, ``m = 0..7``);
- ``sigmas=[s_1, ..., s_K]`` with ``probs`` (default: equal): categorical (paper: {1, 3}, {1, 3, 5}).

The transformer reads the sequence as a token matrix (:func:`build_tokens`) whose **columns** are
the tokens ``e_i = (x_i, y_i)`` and the query ``e_{n+1} = (x_query, 0)``:

    Z  # [batch, d+1, n+1]

This is the layout of the paper's matrix form ``Z <- Z + sum_k P_k Z M Z^T Q_k Z``
(chapters ``book/in-context/01-one-step-gd.md`` and ``02-implicit-weights.md``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from attnlab.validation import (
    check_finite,
    check_int,
    check_probabilities,
    check_real,
    check_shape,
    make_generator,
    resolve_device,
    resolve_dtype,
)

__all__ = [
    "MixedNoiseRegression",
    "RegressionBatch",
    "build_tokens",
    "half_mse",
    "noise_spec",
    "sample_conditioned_regression",
    "sample_regression",
    "sample_sigmas",
]


class RegressionBatch(NamedTuple):
    """One batch of in-context regression sequences (a tuple, so it unpacks and trains as one).

    ``X, y, x_query, target, sigma, w = batch``.
    """

    X: torch.Tensor  # [batch, n, d]   context inputs x_i
    y: torch.Tensor  # [batch, n]      context labels y_i = <w, x_i> + noise
    x_query: torch.Tensor  # [batch, d]   query input x_t
    target: torch.Tensor  # [batch]      noiseless target <w, x_t>
    sigma: torch.Tensor  # [batch]      noise standard deviation of each sequence
    w: torch.Tensor  # [batch, d]   the task vector of each sequence


def noise_spec(*, sigma=None, sigma_max=None, sigmas=None, probs=None) -> dict:
    """Validate a noise specification and return it as ``{"kind": ..., ...}``.

    Exactly one of ``sigma`` (fixed), ``sigma_max`` (uniform on ``[0, sigma_max]``) or
    ``sigmas`` (categorical, with optional ``probs``) may be given; none means noiseless.
    """
    given = [
        name for name, v in (("sigma", sigma), ("sigma_max", sigma_max), ("sigmas", sigmas)) if v is not None
    ]
    if len(given) > 1:
        raise ValueError(f"sigma, sigma_max and sigmas: give at most one of them, got {', '.join(given)}")
    if probs is not None and sigmas is None:
        raise ValueError("probs is only used with a categorical noise set 'sigmas'")
    if sigma_max is not None:
        return {"kind": "uniform", "sigma_max": check_real("sigma_max", sigma_max, minimum=0.0)}
    if sigmas is not None:
        levels = np.asarray(sigmas, dtype=float)
        if levels.ndim != 1 or levels.size == 0:
            raise ValueError(f"sigmas must be a non-empty 1-D list of noise levels, got {sigmas!r}")
        if not np.all(np.isfinite(levels)) or np.any(levels < 0):
            raise ValueError(f"sigmas must be finite and >= 0, got {sigmas!r}")
        if probs is None:
            p = np.full(levels.size, 1.0 / levels.size)
        else:
            p = check_probabilities("probs", probs, size=levels.size)
        return {"kind": "categorical", "sigmas": levels.tolist(), "probs": p.tolist()}
    value = 0.0 if sigma is None else check_real("sigma", sigma, minimum=0.0)
    return {"kind": "fixed", "sigma": value}


def _sampling_setup(generator, dtype, device):
    """Checked generator, dtype and output device, and the device the generator draws on."""
    gen = make_generator(generator)
    return gen, resolve_dtype(dtype), resolve_device(device), gen.device


def sample_sigmas(
    batch_size: int,
    *,
    sigma=None,
    sigma_max=None,
    sigmas=None,
    probs=None,
    generator=0,
    dtype="float32",
    device="cpu",
) -> torch.Tensor:
    """Draw the noise standard deviation of ``batch_size`` sequences; returns ``[batch]``.

    See :func:`noise_spec` for the three ways of giving the noise.
    """
    batch_size = check_int("batch_size", batch_size, minimum=1)
    spec = noise_spec(sigma=sigma, sigma_max=sigma_max, sigmas=sigmas, probs=probs)
    gen, dtype, device, gdev = _sampling_setup(generator, dtype, device)
    if spec["kind"] == "uniform":
        s = torch.rand(batch_size, generator=gen, dtype=dtype, device=gdev) * spec["sigma_max"]
    elif spec["kind"] == "categorical":
        p = torch.tensor(spec["probs"], dtype=torch.float64, device=gdev)
        idx = torch.multinomial(p, batch_size, replacement=True, generator=gen)
        s = torch.tensor(spec["sigmas"], dtype=dtype, device=gdev)[idx]
    else:
        s = torch.full((batch_size,), spec["sigma"], dtype=dtype, device=gdev)
    return s.to(device)


def sample_regression(
    batch_size: int,
    d: int = 10,
    n: int = 20,
    *,
    sigma=None,
    sigma_max=None,
    sigmas=None,
    probs=None,
    generator=0,
    dtype="float32",
    device="cpu",
) -> RegressionBatch:
    """Draw ``batch_size`` mixed-noise regression sequences (paper C, section 5; d=10, n=20).

    ``generator`` is an int seed or a ``torch.Generator`` (sampling happens on the generator's
    device, then moves to ``device``). Returns a :class:`RegressionBatch`
    ``(X [B, n, d], y [B, n], x_query [B, d], target [B], sigma [B], w [B, d])``.
    """
    batch_size = check_int("batch_size", batch_size, minimum=1)
    d = check_int("d", d, minimum=1)
    n = check_int("n", n, minimum=1)
    gen, dtype, device, gdev = _sampling_setup(generator, dtype, device)
    sig = sample_sigmas(
        batch_size,
        sigma=sigma,
        sigma_max=sigma_max,
        sigmas=sigmas,
        probs=probs,
        generator=gen,
        dtype=dtype,
        device=gdev,
    )
    w = torch.randn(batch_size, d, generator=gen, dtype=dtype, device=gdev)  # [B, d]
    X = torch.randn(batch_size, n, d, generator=gen, dtype=dtype, device=gdev)  # [B, n, d]
    x_query = torch.randn(batch_size, d, generator=gen, dtype=dtype, device=gdev)  # [B, d]
    xi = torch.randn(batch_size, n, generator=gen, dtype=dtype, device=gdev) * sig[:, None]  # [B, n]
    y = torch.einsum("bnd,bd->bn", X, w) + xi
    target = torch.einsum("bd,bd->b", x_query, w)
    out = RegressionBatch(X, y, x_query, target, sig, w)
    return RegressionBatch(*(t.to(device) for t in out))


class MixedNoiseRegression:
    """A sampler ``task(batch_size, generator) -> RegressionBatch`` for :func:`attnlab.train.train`.

    ``MixedNoiseRegression(d=10, n=20, sigma_max=3.0)`` draws fresh sequences every call, with
    the noise given as in :func:`noise_spec`.
    """

    def __init__(
        self,
        d: int = 10,
        n: int = 20,
        *,
        sigma=None,
        sigma_max=None,
        sigmas=None,
        probs=None,
        dtype="float32",
        device="cpu",
    ):
        self.d = check_int("d", d, minimum=1)
        self.n = check_int("n", n, minimum=1)
        self.noise = noise_spec(sigma=sigma, sigma_max=sigma_max, sigmas=sigmas, probs=probs)
        self.dtype = resolve_dtype(dtype)
        self.device = resolve_device(device)

    def _noise_kwargs(self) -> dict:
        kind = self.noise["kind"]
        if kind == "uniform":
            return {"sigma_max": self.noise["sigma_max"]}
        if kind == "categorical":
            return {"sigmas": self.noise["sigmas"], "probs": self.noise["probs"]}
        return {"sigma": self.noise["sigma"]}

    def __call__(self, batch_size: int, generator=0) -> RegressionBatch:
        return sample_regression(
            batch_size,
            self.d,
            self.n,
            generator=generator,
            dtype=self.dtype,
            device=self.device,
            **self._noise_kwargs(),
        )

    sample = __call__

    def __repr__(self) -> str:
        noise = ", ".join(f"{k}={v}" for k, v in self._noise_kwargs().items())
        return f"MixedNoiseRegression(d={self.d}, n={self.n}, {noise})"


def _check_data(X, y, x_query):
    check_shape("X", X, (None, None, None))
    B, n, d = X.shape
    check_shape("y", y, (B, n))
    check_shape("x_query", x_query, (B, d))
    for name, t in (("X", X), ("y", y), ("x_query", x_query)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch tensor, got {type(t).__name__}")
        if not torch.is_floating_point(t):
            raise ValueError(f"{name} must be a floating-point tensor, got {t.dtype}")
        check_finite(name, t)
    if not (X.dtype == y.dtype == x_query.dtype):
        raise ValueError(f"X, y and x_query must share one dtype, got {X.dtype}, {y.dtype}, {x_query.dtype}")
    return B, n, d


def build_tokens(X: torch.Tensor, y: torch.Tensor, x_query: torch.Tensor) -> torch.Tensor:
    """The token matrix ``Z [batch, d+1, n+1]``: column i is ``e_i = (x_i, y_i)``, the last ``(x_t, 0)``.

    Chapter 01, the matrix form of the layer ``Z <- Z + sum_k P_k Z M Z^T Q_k Z``.
    """
    B, n, d = _check_data(X, y, x_query)
    context = torch.cat([X, y[:, :, None]], dim=2)  # [B, n, d+1]
    query = torch.cat([x_query, torch.zeros_like(x_query[:, :1])], dim=1)  # [B, d+1]
    return torch.cat([context, query[:, None, :]], dim=1).transpose(1, 2)  # [B, d+1, n+1]


def half_mse(model, X, y, x_query, target, *rest) -> torch.Tensor:
    """The paper's loss, ``1/2 * mean((model.predict(X, y, x_query) - target)^2)``.

    Has the signature ``loss_fn(model, *batch)`` of :func:`attnlab.train.train`, so a
    :class:`RegressionBatch` (or any tuple starting with ``X, y, x_query, target``) fits.
    """
    pred = model.predict(X, y, x_query)  # [B]
    return 0.5 * torch.mean((pred - target) ** 2)


def sample_conditioned_regression(
    batch_size: int, d: int = 10, n: int = 20, *, kappa: float, nu: float = 1.0, generator=0, dtype="float64"
) -> RegressionBatch:
    """Noiseless sequences whose ``Sigma = X^T X`` has spectrum in ``[nu/kappa, nu]``, both ends attained.

    Chapter 03 (Thm 5.1): the GD++ construction needs bounds on the spectrum of ``Sigma``. Each
    sequence gets eigenvalues ``nu/kappa``, ``nu`` and ``d-2`` others log-uniform in between, with
    random eigenvectors; ``X = U diag(sqrt(lambda)) V^T`` with orthonormal ``U [n, d]`` (needs
    ``n >= d``). ``w`` and ``x_query`` are standard Gaussian and ``y = X w`` exactly.
    """
    batch_size = check_int("batch_size", batch_size, minimum=1)
    d = check_int("d", d, minimum=2)
    n = check_int("n", n, minimum=d)
    kappa = check_real("kappa", kappa, minimum=1.0)
    nu = check_real("nu", nu, minimum=0.0, strict_minimum=True)
    gen = make_generator(generator)
    dtype = resolve_dtype(dtype)
    log_lam = torch.rand(batch_size, d, generator=gen, dtype=torch.float64) * -np.log(kappa)
    log_lam[:, 0] = 0.0
    log_lam[:, 1] = -np.log(kappa)
    lam = nu * torch.exp(log_lam)  # [B, d]
    U, _ = torch.linalg.qr(torch.randn(batch_size, n, d, generator=gen, dtype=torch.float64))  # [B, n, d]
    V, _ = torch.linalg.qr(torch.randn(batch_size, d, d, generator=gen, dtype=torch.float64))  # [B, d, d]
    X = U @ (torch.sqrt(lam)[:, :, None] * V.transpose(1, 2))  # [B, n, d]
    w = torch.randn(batch_size, d, generator=gen, dtype=torch.float64)
    x_query = torch.randn(batch_size, d, generator=gen, dtype=torch.float64)
    y = torch.einsum("bnd,bd->bn", X, w)
    target = torch.einsum("bd,bd->b", x_query, w)
    sig = torch.zeros(batch_size, dtype=torch.float64)
    return RegressionBatch(*(t.to(dtype) for t in (X, y, x_query, target, sig, w)))
