"""Straightforward Part III trainers, the baselines of ``bench_icl``.

One linear transformer at a time, in token form (paper C, section 3), the loss ½·MSE of ``-y`` of
the query token, and the step plain ``loss.backward()`` (autograd) and ``torch.optim.Adam``; no
Gram form, no hand-written backward, no batching over models:

- :func:`train_naive`: the library's own token form, ``LinearTransformer.predict`` (every layer
  ``Z ← Z + K Z`` with ``K = Σ_k P_k (Z M Zᵀ) Q_k``), the baseline the benchmark's ratios use;
- :func:`train_reference`: an independent token form with a Python loop over the heads
  (:func:`reference_forward`, also used to check the library's model).
"""

from __future__ import annotations

import torch


def head_matrices(param: str, w_lk: torch.Tensor, D: int):
    """``(P_k, Q_k)`` ``[D, D]`` of one head.

    ``"full"``: ``w_lk [2, D, D]``; ``"diag"``: ``w_lk = (p_x, p_y, q_x, q_y)``.
    """
    if param == "full":
        return w_lk[0], w_lk[1]
    ones = torch.ones(D, dtype=w_lk.dtype, device=w_lk.device)
    last = torch.zeros(D, dtype=w_lk.dtype, device=w_lk.device)
    last[-1] = 1.0
    P = torch.diag(w_lk[0] * (ones - last) + w_lk[1] * last)
    Q = torch.diag(w_lk[2] * (ones - last) + w_lk[3] * last)
    return P, Q


def tokens(X: torch.Tensor, y: torch.Tensor, x_query: torch.Tensor) -> torch.Tensor:
    """``Z [B, d+1, n+1]``: context tokens ``(x_i, y_i)`` as columns, then the query ``(x_t, 0)``."""
    ctx = torch.cat([X, y[..., None]], dim=-1)  # [B, n, d+1]
    q = torch.cat([x_query, torch.zeros_like(x_query[..., :1])], dim=-1)[:, None, :]  # [B, 1, d+1]
    return torch.cat([ctx, q], dim=1).transpose(1, 2)


def reference_forward(param: str, weights: torch.Tensor, X, y, x_query) -> torch.Tensor:
    """Prediction ``[B]`` of one model ``weights [L, H, ...]`` (``LinearTransformer.packed_weights``)."""
    Z = tokens(X, y, x_query)  # [B, D, n+1]
    D, N = Z.shape[1], Z.shape[2]
    M = torch.eye(N, dtype=Z.dtype, device=Z.device)
    M[-1, -1] = 0.0  # keys and values see the n context tokens only
    for layer in range(weights.shape[0]):
        S = Z @ M @ Z.transpose(1, 2)  # [B, D, D]
        update = torch.zeros_like(Z)
        for k in range(weights.shape[1]):  # one head at a time
            P, Q = head_matrices(param, weights[layer, k], D)
            update = update + P @ S @ Q @ Z
        Z = Z + update
    return -Z[:, -1, -1]


def sample(batch_size: int, d: int, n: int, sigma_max: float, gen: torch.Generator, dtype=torch.float32):
    """Mixed-noise regression data: ``w, x ~ N(0, I)``, σ ~ U(0, σ_max) per sequence."""
    X = torch.randn(batch_size, n, d, generator=gen, dtype=dtype)
    w = torch.randn(batch_size, d, generator=gen, dtype=dtype)
    xq = torch.randn(batch_size, d, generator=gen, dtype=dtype)
    sigma = sigma_max * torch.rand(batch_size, generator=gen, dtype=dtype)
    y = (X @ w[..., None])[..., 0] + sigma[:, None] * torch.randn(batch_size, n, generator=gen, dtype=dtype)
    return X, y, xq, (xq * w).sum(-1)


def _fixed_or_fresh(batch, batch_size, d, n, sigma_max, gen):
    return batch if batch is not None else sample(batch_size, d, n, sigma_max, gen)


def train_naive(
    param: str,
    n_layers: int,
    *,
    n_heads: int = 1,
    d: int = 10,
    n: int = 20,
    steps: int = 10,
    batch_size: int = 2048,
    lr: float = 1e-4,
    sigma_max: float = 1.0,
    seed: int = 0,
    batch=None,
) -> list[float]:
    """Train one ``LinearTransformer`` through its token form with ``torch.optim.Adam``; returns the losses.

    Fresh data every step, or the fixed ``batch = (X, y, x_query, target)`` at every step.
    """
    from attnlab.models import LinearTransformer

    gen = torch.Generator().manual_seed(seed)
    model = LinearTransformer(d, n_layers, n_heads, param, seed=seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98))
    losses = []
    for _ in range(steps):
        X, y, xq, target = _fixed_or_fresh(batch, batch_size, d, n, sigma_max, gen)
        loss = 0.5 * ((model.predict(X, y, xq) - target) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def train_reference(
    param: str,
    n_layers: int,
    *,
    n_heads: int = 1,
    d: int = 10,
    n: int = 20,
    steps: int = 10,
    batch_size: int = 2048,
    lr: float = 1e-4,
    sigma_max: float = 1.0,
    seed: int = 0,
) -> list[float]:
    """Train one model with Adam on fresh data every step; returns the losses."""
    gen = torch.Generator().manual_seed(seed)
    D = d + 1
    shape = (n_layers, n_heads, 2, D, D) if param == "full" else (n_layers, n_heads, 4)
    weights = (0.002 / n_layers * torch.randn(shape, generator=gen)).requires_grad_(True)
    opt = torch.optim.Adam([weights], lr=lr, betas=(0.9, 0.98))
    losses = []
    for _ in range(steps):
        X, y, xq, target = sample(batch_size, d, n, sigma_max, gen)
        loss = 0.5 * ((reference_forward(param, weights, X, y, xq) - target) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses
