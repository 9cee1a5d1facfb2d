"""A batch of ridge-regression problems: validated float64 inputs and one eigendecomposition.

The in-context regression baselines (:mod:`attnlab.baselines`) read one problem per row of a
batch, ``X [B, n, d]``, ``y [B, n]``, ``x_query [B, d]``, numpy in and numpy out or torch in and
torch out. This module holds what they share: the input checks and conversions, and
:class:`Spectral`, the eigendecomposition ``Σ = XᵀX = V diag(s) Vᵀ`` that turns ridge with any
``σ̂²``, the noise variance estimates and the Bayes posterior over a grid of σ into sums over
the eigenvalues.
"""

from __future__ import annotations

import numpy as np
import torch

from attnlab.validation import check_finite, check_probabilities, check_real, check_shape

# ------------------------------------------------------------------------------------------------
# Input handling: numpy or torch in, the same kind out, float64 inside.
# ------------------------------------------------------------------------------------------------


def _as_torch(name: str, a) -> torch.Tensor:
    if isinstance(a, torch.Tensor):
        return a.detach().to(dtype=torch.float64)
    if isinstance(a, np.ndarray):
        return torch.from_numpy(np.asarray(a, dtype=np.float64))
    raise ValueError(f"{name} must be a numpy array or torch tensor, got {type(a).__name__}")


def _problem(X, y, x_query=None):
    """Validate a batch of regression problems; return float64 tensors and the output kind."""
    if not isinstance(X, (np.ndarray, torch.Tensor)):
        raise ValueError(f"X must be a numpy array or torch tensor, got {type(X).__name__}")
    if X.ndim != 3:
        raise ValueError(f"X must have shape [B, n, d], got {list(X.shape)}")
    B, n, d = X.shape
    check_shape("y", y, (B, n))
    Xt, yt = _as_torch("X", X), _as_torch("y", y)
    check_finite("X", Xt)
    check_finite("y", yt)
    qt = None
    if x_query is not None:
        check_shape("x_query", x_query, (B, d))
        qt = _as_torch("x_query", x_query)
        check_finite("x_query", qt)
    return Xt, yt, qt, X


def _out(value: torch.Tensor, like):
    if isinstance(like, torch.Tensor):
        return value.to(device=like.device, dtype=like.dtype)
    return value.numpy()


def _per_sequence(name: str, value, B: int) -> torch.Tensor:
    """A scalar or a length-B array of non-negative reals, as a float64 tensor [B]."""
    if isinstance(value, (np.ndarray, torch.Tensor)):
        if value.ndim == 0:
            value = float(value)
        else:
            check_shape(name, value, (B,))
            t = _as_torch(name, value)
            check_finite(name, t)
            if bool((t < 0).any()):
                raise ValueError(f"{name} must be non-negative")
            return t
    value = check_real(name, value, minimum=0.0)
    return torch.full((B,), value, dtype=torch.float64)


def _check_grid(sigmas, probs):
    """A discrete prior: levels ``sigmas`` (stds > 0) and ``probs`` (summing to one), float64 [K]."""
    s = np.asarray(sigmas.detach().cpu() if isinstance(sigmas, torch.Tensor) else sigmas, dtype=float)
    if s.ndim != 1 or s.size == 0:
        raise ValueError(f"sigmas must be a non-empty 1-D array, got shape {list(s.shape)}")
    if not np.all(np.isfinite(s)) or np.any(s <= 0):
        raise ValueError("sigmas must be finite and strictly positive (use ols/ridge for σ = 0)")
    p = probs.detach().cpu().numpy() if isinstance(probs, torch.Tensor) else probs
    p = check_probabilities("probs", p, size=s.size)
    return torch.from_numpy(s), torch.from_numpy(p)


def _stats(X: torch.Tensor, y: torch.Tensor):
    Sigma = X.transpose(1, 2) @ X  # [B, d, d]
    alpha = (X * y[..., None]).sum(1)  # [B, d]
    return Sigma, alpha


def _ridge_t(X, y, q, lam):
    """Ridge predictions for float64 tensors, ``lam`` [B]; ``lam = 0`` with ``n < d`` uses pinv."""
    Sigma, alpha = _stats(X, y)
    d = X.shape[-1]
    A = Sigma + lam[:, None, None] * torch.eye(d, dtype=X.dtype)
    if X.shape[1] < d and bool((lam == 0).any()):  # Σ is singular: least squares via pinv
        w = (torch.linalg.pinv(A, hermitian=True) @ alpha[..., None])[..., 0]
    else:
        w = torch.linalg.solve(A, alpha[..., None])[..., 0]  # [B, d]
    return (w * q).sum(-1)


class Spectral:
    """The eigendecomposition ``Σ = V diag(s) Vᵀ`` of a batch, reused by every ridge variant.

    With ``β = Vᵀα`` and ``q = Vᵀx_t``, ridge with any ``σ̂²`` is ``Σ_k q_k β_k / (s_k + σ̂²)``,
    so one ``eigh`` serves a whole sweep over ``σ̂²`` (tuning ConstRR and TunedRR) and over the
    grid of :func:`bayes_optimal`. :meth:`with_y` reuses the decomposition for new labels on the
    same inputs (the chapter evaluates every noise level on the same ``X``).
    """

    def __init__(self, X, y, x_query=None):
        Xt, yt, qt, _ = _problem(X, y, x_query)
        self.X, self.n, self.d = Xt, Xt.shape[1], Xt.shape[2]
        Sigma = Xt.transpose(1, 2) @ Xt  # [B, d, d]
        evals, self.V = torch.linalg.eigh(Sigma)
        self.evals = evals.clamp(min=0.0)  # [B, d]
        self.qv = None if qt is None else (self.V.transpose(1, 2) @ qt[..., None])[..., 0]  # [B, d]
        self._set_y(yt)

    def _set_y(self, yt):
        self.y = yt
        alpha = (self.X * yt[..., None]).sum(1)  # [B, d]
        self.beta = (self.V.transpose(1, 2) @ alpha[..., None])[..., 0]  # [B, d]
        self.lam_y = (yt**2).sum(-1)  # [B]
        self._qb = None if self.qv is None else self.qv * self.beta  # [B, d]

    def with_y(self, y) -> Spectral:
        """The same inputs with new labels ``y [B, n]`` (no new eigendecomposition)."""
        check_shape("y", y, tuple(self.y.shape))
        new = object.__new__(Spectral)
        new.X, new.n, new.d, new.V, new.evals, new.qv = self.X, self.n, self.d, self.V, self.evals, self.qv
        new._set_y(_as_torch("y", y))
        return new

    def ridge(self, lam) -> torch.Tensor:
        """Predictions for ``σ̂² = lam`` (scalar or [B]); needs ``x_query``."""
        if self.qv is None:
            raise ValueError("x_query must be given to Spectral(...) to predict")
        if isinstance(lam, torch.Tensor) and lam.ndim == 1:
            lam = lam[:, None]
        else:
            lam = check_real("lam", float(lam), minimum=0.0)
        return (self._qb / (self.evals + lam)).sum(-1)

    def ridge_w(self, lam) -> torch.Tensor:
        """Ridge weights ``(Σ + lam·I)⁻¹α`` ``[B, d]`` for ``lam`` a scalar or ``[B]``."""
        if isinstance(lam, torch.Tensor) and lam.ndim == 1:
            lam = lam[:, None]
        else:
            lam = check_real("lam", float(lam), minimum=0.0)
        return (self.V @ (self.beta / (self.evals + lam))[..., None])[..., 0]

    def ada_sigma2(self) -> torch.Tensor:
        """``RSS_OLS / (n − d)`` with ``RSS = λ − αᵀΣ⁻¹α`` [B]."""
        if self.n <= self.d:
            raise ValueError(
                f"X must have more examples than dimensions (n > d) for AdaRR, got n={self.n}, d={self.d}"
            )
        rss = self.lam_y - (self.beta**2 / self.evals).sum(-1)
        return rss.clamp(min=0.0) / (self.n - self.d)

    def log_evidence(self, s: torch.Tensor) -> torch.Tensor:
        """``log N(y; 0, XXᵀ + σ²I)`` up to a constant, for every σ in ``s`` [G]: [B, G]."""
        s2 = (s**2)[None, None, :]  # [1, 1, G]
        denom = self.evals[..., None] + s2  # [B, d, G]
        # Woodbury: yᵀ(XXᵀ+σ²I)⁻¹y = (λ − Σ_k β_k²/(s_k+σ²)) / σ²; Sylvester for the determinant.
        quad = (self.lam_y[:, None] - (self.beta[..., None] ** 2 / denom).sum(1)) / s2[0]  # [B, G]
        logdet = (self.n - self.d) * torch.log(s2[0]) + torch.log(denom).sum(1)  # [B, G]
        return -0.5 * (quad + logdet)

    def bayes(self, s: torch.Tensor, p: torch.Tensor):
        """Posterior weights of the grid [B, G] and the posterior mean of ``w`` [B, d]."""
        post = torch.softmax(self.log_evidence(s) + torch.log(p)[None, :], dim=-1)  # log-sum-exp
        shrink = (post[:, None, :] / (self.evals[..., None] + (s**2)[None, None, :])).sum(-1)  # [B, d]
        w = (self.V @ (shrink * self.beta)[..., None])[..., 0]  # [B, d]
        return post, w
