"""In-context linear regression with mixed noise variance (Part III, paper C).

Every sequence has its own task vector and its own noise level (paper C, section 2 and section 5):

    w ~ N(0, I_d),  x_i ~ N(0, I_d),  y_i = <w, x_i> + xi_i,  xi_i ~ N(0, sigma^2),  i = 1..n,

and a query ``x_query ~ N(0, I_d)`` whose *noiseless* target ``<w, x_query>`` is to be predicted.
The noise standard deviation ``sigma`` is drawn once per sequence, as a :class:`Noise` says:
``"fixed:s"`` (``s = 0`` is noiseless regression), ``"uniform:m"`` (``sigma ~ U(0, m)``, the
paper's main setting, ``m = 0..7``) or ``"categorical:1,3,5"`` (equal probabilities unless given;
paper: {1, 3}, {1, 3, 5}). Beyond the paper, ``"token:0.5,5@0.8,0.2"`` draws a level for every
context token on its own (heteroscedastic prompts, chapter 06). Every sampler of this task in the
library is :func:`sample_regression` (and :func:`sample_conditioned_regression` for chapter 03's
controlled spectra).

The transformer reads the sequence as a token matrix (:func:`build_tokens`) whose **columns** are
the tokens ``e_i = (x_i, y_i)`` and the query ``e_{n+1} = (x_query, 0)``:

    Z  # [batch, d+1, n+1]

This is the layout of the paper's matrix form ``Z <- Z + sum_k P_k Z M Z^T Q_k Z``
(chapters ``book/in-context/01-one-step-gd.md`` and ``02-implicit-weights.md``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from attnlab.validation import (
    check_choice,
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
    "NOISELESS",
    "MixedNoiseRegression",
    "Noise",
    "RegressionBatch",
    "build_tokens",
    "gram_inputs",
    "half_mse_loss",
    "SharedPrompts",
    "sample_conditioned_regression",
    "sample_regression",
    "shared_prompts",
    "verify_label_energy",
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


@dataclass(frozen=True)
class Noise:
    """How the noise standard deviation ``sigma`` of each sequence is drawn: the one noise language.

    ``kind`` is ``"fixed"`` (``values = (sigma,)``), ``"uniform"`` (``values = (sigma_max,)``,
    ``sigma ~ U(0, sigma_max)``) or ``"categorical"`` (``values`` the levels, drawn with
    ``probs``; ``None`` means equal probabilities): one ``sigma`` per sequence. ``"token"`` draws
    the levels as ``"categorical"`` does, but one per context token (:attr:`per_token`): within a
    prompt the noise is heteroscedastic. The string form, accepted wherever a noise is
    (:meth:`parse`), is ``"fixed:0.5"``, ``"uniform:3"``, ``"categorical:1,3,5"`` or, with
    probabilities, ``"categorical:1,3@0.25,0.75"``; ``str(noise)`` gives it back.
    """

    kind: str
    values: tuple[float, ...]
    probs: tuple[float, ...] | None = None

    def __post_init__(self):
        check_choice("noise kind", self.kind, NOISE_KINDS)
        values = tuple(float(v) for v in np.atleast_1d(np.asarray(self.values, dtype=float)))
        if not values or any(not math.isfinite(v) or v < 0 for v in values):
            raise ValueError(f"noise values must be finite and >= 0, got {self.values!r}")
        if self.kind not in ("categorical", "token") and len(values) != 1:
            raise ValueError(f"noise {self.kind!r} takes exactly one value, got {self.values!r}")
        probs = self.probs
        if probs is not None:
            if self.kind not in ("categorical", "token"):
                raise ValueError("noise probs are only used with kinds 'categorical' and 'token'")
            probs = tuple(check_probabilities("probs", probs, size=len(values)).tolist())
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "probs", probs)

    @property
    def per_token(self) -> bool:
        """Whether every context token has its own ``sigma`` (kind ``"token"``)."""
        return self.kind == "token"

    @classmethod
    def parse(cls, spec: Noise | str) -> Noise:
        """A :class:`Noise` from itself or from its string form (class docstring)."""
        if isinstance(spec, Noise):
            return spec
        if not isinstance(spec, str) or ":" not in spec:
            raise ValueError(
                "noise must be a Noise or a string like 'uniform:3', 'categorical:1,3', 'fixed:1', "
                f"got {spec!r}"
            )
        kind, _, rest = spec.partition(":")
        kind = check_choice("noise kind", kind, NOISE_KINDS)
        levels, _, probs = rest.partition("@")
        try:
            values = tuple(float(v) for v in levels.split(","))
            p = tuple(float(v) for v in probs.split(",")) if probs else None
        except ValueError as err:
            raise ValueError(f"noise must list numbers after the colon, got {spec!r}") from err
        return cls(kind, values, p)

    def __str__(self) -> str:
        out = f"{self.kind}:" + ",".join(f"{v:g}" for v in self.values)
        return out + ("@" + ",".join(f"{p:g}" for p in self.probs) if self.probs is not None else "")

    def draw(self, shape, generator: torch.Generator, dtype=torch.float32, device=None) -> torch.Tensor:
        """``sigma`` of ``shape`` sequences, drawn with ``generator`` (on its device)."""
        device = generator.device if device is None else device
        if self.kind == "uniform":
            return self.values[0] * torch.rand(shape, generator=generator, device=device, dtype=dtype)
        if self.kind == "fixed":
            return torch.full(shape, self.values[0], device=device, dtype=dtype)
        levels = torch.as_tensor(self.values, device=device, dtype=dtype)
        if self.probs is None:
            return levels[torch.randint(len(self.values), shape, generator=generator, device=device)]
        p = torch.as_tensor(self.probs, dtype=torch.float64, device=device)
        idx = torch.multinomial(p, math.prod(shape), replacement=True, generator=generator)
        return levels[idx].reshape(shape)

    def from_uniform(self, u: torch.Tensor) -> torch.Tensor:
        """``sigma`` from uniform draws ``u`` in ``[0, 1)`` (inverse CDF): common random numbers.

        The same ``u`` serve every noise distribution (the experiments of chapter 04 compare
        distributions on one set of draws).
        """
        if self.kind == "uniform":
            return self.values[0] * u
        if self.kind == "fixed":
            return torch.full_like(u, self.values[0])
        probs = torch.full((len(self.values),), 1 / len(self.values)) if self.probs is None else self.probs
        edges = torch.cumsum(torch.as_tensor(probs, dtype=torch.float64), 0)[:-1].to(u)
        idx = torch.bucketize(u, edges, right=True)
        return torch.as_tensor(self.values, dtype=u.dtype, device=u.device)[idx]


NOISE_KINDS = ("fixed", "uniform", "categorical", "token")
NOISELESS = Noise("fixed", (0.0,))


def _sampling_setup(generator, dtype, device):
    """Checked generator, dtype and output device, and the device the generator draws on."""
    gen = make_generator(generator)
    return gen, resolve_dtype(dtype), resolve_device(device), gen.device


def sample_regression(
    batch_size: int,
    d: int = 10,
    n: int = 20,
    *,
    noise: Noise | str | Sequence[Noise | str] = NOISELESS,
    generator=0,
    dtype="float32",
    device="cpu",
) -> RegressionBatch:
    """Draw ``batch_size`` mixed-noise regression sequences (paper C, section 5; d=10, n=20).

    ``noise`` is a :class:`Noise` (or its string), or a list of them: the tensors then have a
    leading noise-setting dimension ``S`` (``X [S, B, n, d]``, ...). ``generator`` is an int seed
    or a ``torch.Generator`` (sampling happens on the generator's device, then moves to
    ``device``); it draws ``X``, ``w``, ``x_query``, the standard noise, then ``sigma``. Returns a
    :class:`RegressionBatch` ``(X [.., B, n, d], y [.., B, n], x_query [.., B, d], target [.., B],
    sigma [.., B], w [.., B, d])``; ``sigma`` is ``[.., B, n]`` (one per context token) when a
    noise is per-token (:attr:`Noise.per_token`; the others' ``sigma`` then repeats along ``n``).
    """
    batch_size = check_int("batch_size", batch_size, minimum=1)
    d = check_int("d", d, minimum=1)
    n = check_int("n", n, minimum=1)
    settings = [Noise.parse(s) for s in noise] if isinstance(noise, (list, tuple)) else None
    if settings is not None and not settings:
        raise ValueError("noise must name at least one noise distribution")
    lead = (len(settings), batch_size) if settings is not None else (batch_size,)
    gen, dtype, device, gdev = _sampling_setup(generator, dtype, device)
    X = torch.randn((*lead, n, d), generator=gen, dtype=dtype, device=gdev)
    w = torch.randn((*lead, d), generator=gen, dtype=dtype, device=gdev)
    x_query = torch.randn((*lead, d), generator=gen, dtype=dtype, device=gdev)
    xi = torch.randn((*lead, n), generator=gen, dtype=dtype, device=gdev)
    if settings is None:
        spec = Noise.parse(noise)
        sigma = spec.draw((*lead, n) if spec.per_token else lead, gen, dtype)
    elif any(s.per_token for s in settings):
        draws = [s.draw((batch_size, n) if s.per_token else (batch_size,), gen, dtype) for s in settings]
        sigma = torch.stack([s if s.ndim == 2 else s[:, None].expand(batch_size, n) for s in draws])
    else:
        sigma = torch.stack([s.draw((batch_size,), gen, dtype) for s in settings])
    per_token = sigma.ndim > len(lead)  # [.., B, n]: one sigma per context token
    y = (X @ w[..., None])[..., 0] + (sigma if per_token else sigma[..., None]) * xi
    target = (x_query * w).sum(-1)
    return RegressionBatch(*(t.to(device) for t in (X, y, x_query, target, sigma, w)))


@dataclass(frozen=True)
class SharedPrompts:
    """Prompts that every noise distribution shares (common random numbers), in float64.

    One draw of the inputs ``X [B, n, d]``, task vectors ``w``, queries ``x_query``, standard noise
    ``xi [B, n]`` and uniforms ``u [B]``: a noise distribution reads its σ per prompt from ``u``
    (:meth:`Noise.from_uniform`), so every distribution is evaluated on the same prompts and
    differences between them are not sampling noise. ``target`` is ``<w, x_query>``.
    """

    X: torch.Tensor
    w: torch.Tensor
    x_query: torch.Tensor
    xi: torch.Tensor
    u: torch.Tensor
    target: torch.Tensor

    def sigma(self, noise: Noise | str) -> torch.Tensor:
        """σ of every prompt under ``noise`` (read from the shared uniforms ``u``)."""
        return Noise.parse(noise).from_uniform(self.u)

    def labels(self, sigma: torch.Tensor) -> torch.Tensor:
        """The labels ``y = X w + σ ξ`` ``[B, n]`` for one σ per prompt ``[B]``."""
        return (self.X @ self.w[..., None])[..., 0] + sigma[:, None] * self.xi


def shared_prompts(n_seq: int, d: int, n: int, seed: int) -> SharedPrompts:
    """Draw :class:`SharedPrompts` of ``n_seq`` prompts from generator seed ``seed``."""
    n_seq = check_int("n_seq", n_seq, minimum=1)
    d, n = check_int("d", d, minimum=1), check_int("n", n, minimum=1)
    g = torch.Generator().manual_seed(check_int("seed", seed, minimum=0))
    X = torch.randn(n_seq, n, d, generator=g, dtype=torch.float64)
    w = torch.randn(n_seq, d, generator=g, dtype=torch.float64)
    xq = torch.randn(n_seq, d, generator=g, dtype=torch.float64)
    xi = torch.randn(n_seq, n, generator=g, dtype=torch.float64)
    u = torch.rand(n_seq, generator=g, dtype=torch.float64)
    return SharedPrompts(X, w, xq, xi, u, (xq * w).sum(-1))


class MixedNoiseRegression:
    """A sampler ``task(batch_size, generator) -> RegressionBatch`` for :func:`attnlab.train.train`.

    ``MixedNoiseRegression(d=10, n=20, noise="uniform:3")`` draws fresh sequences every call
    with :func:`sample_regression`.
    """

    def __init__(
        self, d: int = 10, n: int = 20, *, noise: Noise | str = NOISELESS, dtype="float32", device="cpu"
    ):
        self.d = check_int("d", d, minimum=1)
        self.n = check_int("n", n, minimum=1)
        self.noise = Noise.parse(noise)
        self.dtype = resolve_dtype(dtype)
        self.device = resolve_device(device)

    def __call__(self, batch_size: int, generator=0) -> RegressionBatch:
        return sample_regression(
            batch_size,
            self.d,
            self.n,
            noise=self.noise,
            generator=generator,
            dtype=self.dtype,
            device=self.device,
        )

    sample = __call__

    def __repr__(self) -> str:
        return f"MixedNoiseRegression(d={self.d}, n={self.n}, noise={str(self.noise)!r})"


def _check_data(X, y, x_query):
    for name, t in (("X", X), ("y", y), ("x_query", x_query)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch tensor, got {type(t).__name__}")
    if X.ndim < 3:
        raise ValueError(f"X must have shape [..., batch, n, d], got {list(X.shape)}")
    *lead, n, d = X.shape
    check_shape("y", y, (*lead, n))
    check_shape("x_query", x_query, (*lead, d))
    for name, t in (("X", X), ("y", y), ("x_query", x_query)):
        if not torch.is_floating_point(t):
            raise ValueError(f"{name} must be a floating-point tensor, got {t.dtype}")
        check_finite(name, t)
    if not (X.dtype == y.dtype == x_query.dtype):
        raise ValueError(f"X, y and x_query must share one dtype, got {X.dtype}, {y.dtype}, {x_query.dtype}")
    return n, d


def build_tokens(X: torch.Tensor, y: torch.Tensor, x_query: torch.Tensor) -> torch.Tensor:
    """The token matrix ``Z [..., batch, d+1, n+1]``: column i is ``e_i = (x_i, y_i)``, the last ``(x_t, 0)``.

    Chapter 01, the matrix form of the layer ``Z <- Z + sum_k P_k Z M Z^T Q_k Z``. ``X [..., batch,
    n, d]``, ``y [..., batch, n]``, ``x_query [..., batch, d]`` (leading dims: e.g. one data set
    per model).
    """
    _check_data(X, y, x_query)
    context = torch.cat([X, y[..., None]], dim=-1)  # [.., B, n, d+1]
    query = torch.cat([x_query, torch.zeros_like(x_query[..., :1])], dim=-1)  # [.., B, d+1]
    return torch.cat([context, query[..., None, :]], dim=-2).transpose(-1, -2)  # [.., B, d+1, n+1]


def half_mse_loss(model, X, y, x_query, target, *rest) -> torch.Tensor:
    """The paper's loss, ``1/2 * mean((model.predict(X, y, x_query) - target)^2)`` over the batch.

    Has the signature ``loss_fn(model, *batch)`` of :func:`attnlab.train.train`, so a
    :class:`RegressionBatch` (or any tuple starting with ``X, y, x_query, target``) fits. For a
    model holding a batch of models the prediction is ``[*models, B]`` and the loss one value per
    model (``[*models]``), as the loop expects.
    """
    pred = model.predict(X, y, x_query)  # [*models, B]
    return 0.5 * torch.mean((pred - target) ** 2, dim=-1)


def gram_inputs(X: torch.Tensor, y: torch.Tensor, x_query: torch.Tensor, G: torch.Tensor | None = None):
    """The context Gram matrix ``G = sum_j e_j e_j^T`` ``[..., d+1, d+1]`` and the query token ``[..., d+1]``.

    The inputs of the Gram form of :class:`attnlab.models.LinearTransformer` (any leading dims).
    ``G``, if given, is the Gram matrix computed elsewhere (the compiled kernel's
    :func:`attnlab.models.gram_kernel.gram_matrices`).
    """
    if G is None:
        E = torch.cat([X, y[..., None]], dim=-1)  # [..., n, d+1]
        G = E.transpose(-1, -2) @ E  # [..., d+1, d+1]
    elif G.shape != (*X.shape[:-2], X.shape[-1] + 1, X.shape[-1] + 1):
        raise ValueError(f"G must have shape [..., d+1, d+1] matching X {list(X.shape)}, got {list(G.shape)}")
    e_t = torch.cat([x_query, torch.zeros_like(x_query[..., :1])], dim=-1)  # [..., d+1]
    return G, e_t


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


def verify_label_energy(energies, *, levels, d: int = 10, rtol: float = 0.03) -> str:
    """Exercise checker (chapter 06): the mean squared label ``E y_j^2`` of a token at each noise level.

    With ``w, x_j ~ N(0, I_d)`` and ``y_j = <w, x_j> + sigma_j xi_j``, ``E y_j^2 = d + sigma_j^2``.
    ``energies`` holds one value per entry of ``levels``; raises ``AssertionError`` unless each is
    within ``rtol`` of it.
    """
    levels = [check_real("levels", s, minimum=0.0) for s in np.atleast_1d(levels)]
    values = [check_real("energies", e) for e in np.atleast_1d(energies)]
    if len(values) != len(levels):
        raise ValueError(f"energies must have one value per level ({len(levels)}), got {len(values)}")
    d = check_int("d", d, minimum=1)
    rtol = check_real("rtol", rtol, minimum=0.0)
    for s, e in zip(levels, values, strict=True):
        exact = d + s**2
        if abs(e - exact) > rtol * exact:
            hint = (
                "the signal <w, x_j> adds |w|^2 (about d)"
                if abs(e - s**2) < rtol * exact
                else "E y^2 = E <w, x>^2 + sigma^2"
            )
            raise AssertionError(f"the energy at sigma = {s:g} is {e:.4g}, not {exact:.4g}: {hint}")
    return "Correct: E y_j^2 = d + sigma_j^2 at every level; " + ", ".join(
        f"{d + s**2:g} at sigma = {s:g}" for s in levels
    )
