"""Train many multi-layer linear transformers at once (Part III, chapters 04 and 05).

The paper trains one model per (parameterization, depth, noise distribution, seed); that is
hundreds of tiny models. Here they are trained together: the parameters of every model with the
same shape live in one tensor with leading dimensions ``[S, R]`` (noise settings × seeds), and
every step draws fresh data once per (setting, seed), shared by all depths and parameterizations.
The loss is the sum of the models' losses, so autograd and Adam (an elementwise update) treat the
models exactly as if they were trained one by one.

**The forward pass in Gram form.** One layer (chapter 01, eq. ``eq-layer``) moves every token
``e_i = (x_i, y_i)``, the query included, by the same linear map

.. math::  e_i \\leftarrow T e_i, \\qquad T = I + \\sum_k P_k G Q_k,
           \\qquad G = \\sum_{j \\le n} e_j e_j^\\top ,

so the next layer's Gram matrix is ``T G Tᵀ`` and the query is ``T e_t``: the whole forward pass
needs only the ``(d+1)×(d+1)`` Gram matrix of the context and the query token, never the ``n``
context tokens. The prediction is ``−(e_t)_y`` after the last layer. For DIAG and GD++
``P_k G Q_k = (p_k q_kᵀ) ∘ G``, so ``T = I + Ω ∘ G`` with the block matrix ``Ω`` of
``ω_xx, ω_xy, ω_yx, ω_yy`` (chapter 02, eq. ``eq-diag``). :func:`forward` is checked against the
token-level model :class:`attnlab.models.LinearTransformer` in the tests.

Parameterizations (``param``): ``"full"`` (``P_k, Q_k`` free), ``"diag"`` (``p_x, p_y, q_x, q_y``
per head, the paper's DIAG; the book's results use this one), ``"diag_omega"`` (four free ω's per
layer, which drops the one-head constraint ``ω_xx ω_yy = ω_xy ω_yx``) and ``"gdpp"`` (DIAG with
``q_y = 0``: ``p_x, p_y, q_x`` per head).

Optimizer: Adam (no weight decay) as in the paper, ``lr = 1e-4``, batch 2048; von Oswald et al.'s
initialisation ``N(0, (0.002/L)²)`` and ``β₂ = 0.98``. A cosine decay of the learning rate is
available for the reduced CPU runs.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from attnlab.optim import Adam
from attnlab.train import lr_factor
from attnlab.validation import (
    check_choice,
    check_int,
    check_positive,
    check_real,
    check_shape,
    make_generator,
    resolve_device,
    resolve_dtype,
)

PARAMS = ("full", "diag", "diag_omega", "gdpp")

__all__ = [
    "PARAMS",
    "TrainedGroup",
    "TrainedICL",
    "evaluate",
    "diagonal_mass",
    "forward",
    "forward_gdpp_spectral",
    "gram_inputs",
    "init_params",
    "num_threads_scope",
    "omega",
    "parse_noise",
    "sample_icl",
    "spectral_inputs",
    "to_model",
    "train_icl",
]


# ------------------------------------------------------------------------------------------------
# Noise distributions and data.
# ------------------------------------------------------------------------------------------------


def parse_noise(spec: str) -> tuple[str, tuple[float, ...]]:
    """Parse a noise distribution: ``"uniform:σ_max"``, ``"categorical:1,3,5"`` or ``"fixed:σ"``.

    σ is a standard deviation; uniform means ``σ ~ U(0, σ_max)``, categorical equal probabilities.
    """
    if not isinstance(spec, str) or ":" not in spec:
        raise ValueError(
            f"noise must be a string like 'uniform:3', 'categorical:1,3', 'fixed:1', got {spec!r}"
        )
    kind, _, rest = spec.partition(":")
    check_choice("noise kind", kind, ("uniform", "categorical", "fixed"))
    try:
        values = tuple(float(v) for v in rest.split(","))
    except ValueError as err:
        raise ValueError(f"noise must list numbers after the colon, got {spec!r}") from err
    if any(not math.isfinite(v) or v < 0 for v in values):
        raise ValueError(f"noise values must be finite and non-negative, got {spec!r}")
    if kind in ("uniform", "fixed") and len(values) != 1:
        raise ValueError(f"noise {kind!r} takes exactly one value, got {spec!r}")
    return kind, values


def _draw_sigma(spec: str, shape, gen, device, dtype) -> torch.Tensor:
    kind, values = parse_noise(spec)
    if kind == "uniform":
        return values[0] * torch.rand(shape, generator=gen, device=device, dtype=dtype)
    if kind == "fixed":
        return torch.full(shape, values[0], device=device, dtype=dtype)
    idx = torch.randint(len(values), shape, generator=gen, device=device)
    return torch.as_tensor(values, device=device, dtype=dtype)[idx]


def sample_icl(
    noise: Sequence[str],
    n_seeds: int,
    batch_size: int,
    *,
    d: int = 10,
    n: int = 20,
    generator=None,
    device="cpu",
    dtype=torch.float32,
) -> dict:
    """Fresh mixed-noise regression data for every (noise setting, seed): tensors ``[S, R, B, ...]``.

    ``w ~ N(0, I_d)``, ``x_i, x_t ~ N(0, I_d)``, ``y_i = ⟨w, x_i⟩ + σ ξ_i`` with σ drawn per
    sequence from the setting's distribution; the target ``⟨w, x_t⟩`` has no noise (chapter 04).
    Returns ``X [S,R,B,n,d]``, ``y [S,R,B,n]``, ``x_query [S,R,B,d]``, ``target``, ``sigma``.
    """
    gen = generator if generator is not None else make_generator(0, device=device)
    S, R, B = len(noise), n_seeds, batch_size
    X = torch.randn((S, R, B, n, d), generator=gen, device=device, dtype=dtype)
    w = torch.randn((S, R, B, d), generator=gen, device=device, dtype=dtype)
    xq = torch.randn((S, R, B, d), generator=gen, device=device, dtype=dtype)
    xi = torch.randn((S, R, B, n), generator=gen, device=device, dtype=dtype)
    sigma = torch.stack([_draw_sigma(s, (R, B), gen, device, dtype) for s in noise])  # [S, R, B]
    y = (X @ w[..., None])[..., 0] + sigma[..., None] * xi
    return {"X": X, "y": y, "x_query": xq, "target": (xq * w).sum(-1), "sigma": sigma}


def gram_inputs(X: torch.Tensor, y: torch.Tensor, x_query: torch.Tensor):
    """The context Gram matrix ``G = Σ_j e_j e_jᵀ`` ``[..., d+1, d+1]`` and the query token ``[..., d+1]``."""
    E = torch.cat([X, y[..., None]], dim=-1)  # [..., n, d+1]
    G = E.transpose(-1, -2) @ E  # [..., d+1, d+1]
    e_t = torch.cat([x_query, torch.zeros_like(x_query[..., :1])], dim=-1)  # [..., d+1]
    return G, e_t


# ------------------------------------------------------------------------------------------------
# Parameters and the forward pass.
# ------------------------------------------------------------------------------------------------


def _n_free(param: str, D: int) -> tuple[int, ...]:
    return {"full": (2, D, D), "diag": (4,), "diag_omega": (4,), "gdpp": (3,)}[param]


def init_params(
    param: str,
    n_layers: int,
    n_heads: int,
    batch_shape: Sequence[int],
    *,
    d: int = 10,
    init_scale: float | None = None,
    generator=None,
    device="cpu",
    dtype=torch.float32,
):
    """Initial parameters ``[*batch_shape, L, H, ...]``, entries ``N(0, init_scale²)``.

    ``init_scale`` defaults to von Oswald et al.'s ``0.002 / L``. ``"full"``: ``[..., 2, d+1, d+1]``
    (``P`` then ``Q``); ``"diag"``: ``(p_x, p_y, q_x, q_y)``; ``"gdpp"``: ``(p_x, p_y, q_x)``;
    ``"diag_omega"``: ``(ω_xx, ω_xy, ω_yx, ω_yy)`` with one "head".
    """
    param = check_choice("param", param, PARAMS)
    n_layers = check_int("n_layers", n_layers, minimum=1)
    n_heads = check_int("n_heads", n_heads, minimum=1)
    d = check_int("d", d, minimum=1)
    if param == "diag_omega" and n_heads != 1:
        raise ValueError("n_heads must be 1 for param 'diag_omega' (the ω's already sum the heads)")
    scale = 0.002 / n_layers if init_scale is None else check_real("init_scale", init_scale, minimum=0.0)
    gen = generator if generator is not None else make_generator(0, device=device)
    shape = (*tuple(batch_shape), n_layers, n_heads, *_n_free(param, d + 1))
    return scale * torch.randn(shape, generator=gen, device=device, dtype=dtype)


def omega(param: str, theta: torch.Tensor) -> torch.Tensor:
    """``(ω_xx, ω_xy, ω_yx, ω_yy)`` ``[..., L, 4]`` of DIAG-type parameters ``[..., L, H, k]``."""
    param = check_choice("param", param, ("diag", "diag_omega", "gdpp"))
    if param == "diag_omega":
        return theta[..., 0, :]
    px, py, qx = theta[..., 0], theta[..., 1], theta[..., 2]
    qy = theta[..., 3] if param == "diag" else torch.zeros_like(qx)
    return torch.stack([px * qx, px * qy, py * qx, py * qy], dim=-1).sum(-2)


def _omega_matrix(om: torch.Tensor, D: int) -> torch.Tensor:
    """Block matrix ``[[ω_xx 1 1ᵀ, ω_xy 1], [ω_yx 1ᵀ, ω_yy]]`` ``[..., D, D]`` from ``[..., 4]``."""
    top = torch.cat(
        [
            om[..., 0:1, None].expand(*om.shape[:-1], D - 1, D - 1),
            om[..., 1:2, None].expand(*om.shape[:-1], D - 1, 1),
        ],
        dim=-1,
    )
    bottom = torch.cat(
        [
            om[..., 2:3, None].expand(*om.shape[:-1], 1, D - 1),
            om[..., 3:4, None].expand(*om.shape[:-1], 1, 1),
        ],
        dim=-1,
    )
    return torch.cat([top, bottom], dim=-2)


def _layer_map(param: str, theta_l: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
    """``T = I + Σ_k P_k G Q_k`` for one layer. ``theta_l [M.., H, ...]``, ``G [M.., B, D, D]``."""
    D = G.shape[-1]
    eye = torch.eye(D, device=G.device, dtype=G.dtype)
    if param == "full":
        P, Q = theta_l[..., 0, :, :], theta_l[..., 1, :, :]  # [M.., H, D, D]
        # Σ_k P_k G Q_k with the batch dimension B between the model and head dims.
        PGQ = P[..., None, :, :, :] @ G[..., None, :, :] @ Q[..., None, :, :, :]  # [M.., B, H, D, D]
        return eye + PGQ.sum(-3)
    om = omega(param, theta_l[..., None, :, :])[..., 0, :]  # [M.., 4]
    return eye + _omega_matrix(om, D)[..., None, :, :] * G


def forward(
    param: str, theta: torch.Tensor, G: torch.Tensor, e_t: torch.Tensor, *, return_layers: bool = False
) -> torch.Tensor:
    """Predictions of linear transformers in Gram form (module docstring).

    ``theta [M.., L, H, ...]`` (from :func:`init_params`), ``G [M.., B, d+1, d+1]``,
    ``e_t [M.., B, d+1]``, where ``M..`` are the model batch dimensions. Returns ``ŷ [M.., B]``,
    or ``[M.., L+1, B]`` with the prediction ``−(e_t^l)_y`` after every layer ``l = 0..L`` when
    ``return_layers=True``.
    """
    param = check_choice("param", param, PARAMS)
    L = theta.shape[-2 - len(_n_free(param, G.shape[-1]))]
    outs = [-e_t[..., -1]]
    for layer in range(L):
        theta_l = theta.select(-1 - len(_n_free(param, G.shape[-1])) - 1, layer)
        T = _layer_map(param, theta_l, G)  # [M.., B, D, D]
        e_t = (T * e_t[..., None, :]).sum(-1)  # T e_t
        if layer < L - 1:
            G = T @ G @ T.transpose(-1, -2)
        outs.append(-e_t[..., -1])
    return torch.stack(torch.broadcast_tensors(*outs), dim=-2) if return_layers else outs[-1]


def spectral_inputs(G: torch.Tensor, e_t: torch.Tensor):
    """``(s, β, x̃_t)``: eigenvalues of ``Σ`` and ``α``, ``x_t`` in its eigenbasis, each ``[..., d]``.

    The inputs of :func:`forward_gdpp_spectral`, from the Gram form (no gradient flows into data).
    """
    d = G.shape[-1] - 1
    s, V = torch.linalg.eigh(G[..., :d, :d])  # Σ = V diag(s) Vᵀ
    beta = (V.transpose(-1, -2) @ G[..., :d, d:])[..., 0]  # Vᵀ α
    xq = (V.transpose(-1, -2) @ e_t[..., :d, None])[..., 0]  # Vᵀ x_t
    return s, beta, xq


def forward_gdpp_spectral(
    theta: torch.Tensor,
    s: torch.Tensor,
    beta: torch.Tensor,
    x_t: torch.Tensor,
    *,
    return_layers: bool = False,
) -> torch.Tensor:
    """GD++ predictions in the eigenbasis of ``Σ``: every layer is elementwise, ``O(d)`` per sequence.

    A GD++ layer (``ω_xy = ω_yy = 0``) multiplies every ``x`` by ``I + ω_xx Σ``, so ``Σ`` keeps
    its eigenvectors: with ``a = ω_xx``, ``c = ω_yx`` and ``s, β, x_t`` in that eigenbasis,
    ``s ← s (1 + a s)²``, ``β ← (1 + a s)(1 + c s) β``, ``y_t ← y_t + c βᵀ x_t``,
    ``x_t ← (1 + a s) x_t`` (chapter 03). Same result as :func:`forward` with ``param="gdpp"``,
    at a fraction of the cost. ``theta [M.., L, H, 3]``; data ``[M.., B, d]``.
    """
    om = omega("gdpp", theta)  # [M.., L, 4]
    L = om.shape[-2]
    y_t = torch.zeros_like(s[..., 0])
    outs = [-y_t]
    for layer in range(L):
        a = om[..., layer, 0][..., None, None]  # [M.., 1, 1]
        c = om[..., layer, 2][..., None]  # [M.., 1]
        y_t = y_t + c * (beta * x_t).sum(-1)
        outs.append(-y_t)
        if layer < L - 1:
            shrink = 1 + a * s
            beta = shrink * (1 + c[..., None] * s) * beta
            x_t = shrink * x_t
            s = s * shrink**2
    return torch.stack(torch.broadcast_tensors(*outs), dim=-2) if return_layers else outs[-1]


def diagonal_mass(P: torch.Tensor) -> torch.Tensor:
    """Share of ``‖P‖_F²`` in the DIAG pattern ``diag(c I_d, c_y)``: ``[...]`` for ``P [..., d+1, d+1]``.

    The projection onto that pattern keeps the mean of the x-block's diagonal (times ``I_d``) and
    the ``y``-``y`` entry, so the share is ``(tr(P_xx)²/d + P_yy²) / ‖P‖_F²`` (chapter 05). A
    random Gaussian matrix has about ``2/(d+1)²``; a DIAG matrix has 1.
    """
    if not isinstance(P, torch.Tensor) or P.ndim < 2 or P.shape[-1] != P.shape[-2] or P.shape[-1] < 2:
        raise ValueError(f"P must be a tensor [..., d+1, d+1], got {getattr(P, 'shape', type(P).__name__)}")
    d = P.shape[-1] - 1
    tr = P[..., :d, :d].diagonal(dim1=-2, dim2=-1).sum(-1)
    return (tr**2 / d + P[..., d, d] ** 2) / (P**2).sum((-2, -1))


def to_model(param: str, theta: torch.Tensor, *, d: int = 10, dtype="float64"):
    """A :class:`attnlab.models.LinearTransformer` holding the weights ``theta [L, H, ...]`` of one model.

    ``"diag"`` and ``"gdpp"`` become ``diag_mode="pq"`` models (``p = (p_x, p_y)``,
    ``q = (q_x, q_y)``, with ``q_y = 0`` for GD++), ``"diag_omega"`` a ``diag_mode="omega"`` one.
    ``d`` is read from ``theta`` for ``"full"``.
    """
    from attnlab.models import LinearTransformer

    param = check_choice("param", param, PARAMS)
    k = len(_n_free(param, 2))
    if not isinstance(theta, torch.Tensor) or theta.ndim != 2 + k:
        raise ValueError(f"theta must be one model's parameters [L, H, ...] for param {param!r}")
    L, H = theta.shape[:2]
    th = theta.detach().to(torch.float64)
    if param == "full":
        model = LinearTransformer(theta.shape[-1] - 1, L, H, "full", init_scale=0.0, dtype=dtype)
        params = {"P": th[:, :, 0], "Q": th[:, :, 1]}
    elif param == "diag_omega":
        model = LinearTransformer(d, L, 1, "diag", diag_mode="omega", init_scale=0.0, dtype=dtype)
        params = {"omega": th[:, 0]}
    else:
        model = LinearTransformer(d, L, H, param, init_scale=0.0, dtype=dtype)
        qy = th[..., 3] if param == "diag" else torch.zeros_like(th[..., 2])
        params = {"p": th[..., :2], "q": torch.stack([th[..., 2], qy], dim=-1)}
    with torch.no_grad():
        for name, value in params.items():
            getattr(model, name).copy_(value)
    return model


# ------------------------------------------------------------------------------------------------
# Training.
# ------------------------------------------------------------------------------------------------


@dataclass
class TrainedGroup:
    """Models of one parameterization and depth: ``theta [S, R, L, H, ...]``, losses ``[S, R, T]``."""

    param: str
    n_layers: int
    n_heads: int
    theta: torch.Tensor
    loss: np.ndarray
    diverged: np.ndarray  # [S, R] bool


@dataclass
class TrainedICL:
    """Everything :func:`train_icl` trained, with its settings."""

    noise: list[str]
    seeds: list[int]
    steps: np.ndarray
    groups: dict[tuple[str, int], TrainedGroup] = field(default_factory=dict)
    config: dict = field(default_factory=dict)

    def group(self, param: str, n_layers: int) -> TrainedGroup:
        if (param, n_layers) not in self.groups:
            raise ValueError(
                f"param/n_layers ({param!r}, {n_layers}) was not trained; have {sorted(self.groups)}"
            )
        return self.groups[(param, n_layers)]


@contextlib.contextmanager
def num_threads_scope(n: int | None):
    """Run a block with ``torch.set_num_threads(n)``, restoring the previous value (``None``: no change)."""
    if n is None:
        yield
        return
    n = check_int("num_threads", n, minimum=1)
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def train_icl(
    params: Sequence[str] = ("diag",),
    depths: Sequence[int] = (1,),
    noise: Sequence[str] = ("uniform:0",),
    seeds: Sequence[int] = (0,),
    *,
    d: int = 10,
    n: int = 20,
    n_heads: int = 1,
    steps: int = 1000,
    batch_size: int = 2048,
    lr: float | dict = 1e-4,
    betas: tuple[float, float] = (0.9, 0.98),
    lr_schedule: str = "constant",
    init_scale: float | None = None,
    data_seed: int = 0,
    record_every: int = 10,
    device="cpu",
    dtype="float32",
    num_threads: int | None = 1,
) -> TrainedICL:
    """Train every (param, depth) × noise setting × seed model with Adam on fresh data each step.

    ``params`` ⊂ :data:`PARAMS`; ``depths`` numbers of layers; ``noise`` strings for
    :func:`parse_noise`; ``seeds`` initialisation seeds (one model per seed; the data of seed ``r``
    come from its own stream). ``lr`` is one learning rate or a dict ``{param: lr}``; with
    ``lr_schedule="cosine"`` it warms up linearly over the first 10% of the steps and then decays
    to zero along a cosine. Losses are ½·MSE per model, recorded every ``record_every`` steps
    (the mean over those steps). A model whose loss becomes non-finite is marked ``diverged``
    and its parameters are frozen (the others are unaffected: the models share no parameters).
    ``num_threads`` limits torch's CPU threads during the run (restored afterwards): the many
    tiny batched matrix products run faster on one thread, and far faster on a busy machine;
    ``None`` leaves the setting alone.
    """
    with num_threads_scope(num_threads):
        return _train_icl(
            params, depths, noise, seeds, d, n, n_heads, steps, batch_size, lr, betas,
            lr_schedule, init_scale, data_seed, record_every, device, dtype,
        )  # fmt: skip


def _train_icl(
    params,
    depths,
    noise,
    seeds,
    d,
    n,
    n_heads,
    steps,
    batch_size,
    lr,
    betas,
    lr_schedule,
    init_scale,
    data_seed,
    record_every,
    device,
    dtype,
) -> TrainedICL:
    params = [check_choice("params", p, PARAMS) for p in params]
    if not params:
        raise ValueError("params must name at least one parameterization")
    depths = [check_int("depths", L, minimum=1) for L in depths]
    if not depths:
        raise ValueError("depths must list at least one number of layers")
    noise = list(noise)
    if not noise:
        raise ValueError("noise must list at least one noise distribution")
    for spec in noise:
        parse_noise(spec)
    seeds = [check_int("seeds", s, minimum=0) for s in seeds]
    if not seeds:
        raise ValueError("seeds must list at least one seed")
    d = check_int("d", d, minimum=1)
    n = check_int("n", n, minimum=1)
    n_heads = check_int("n_heads", n_heads, minimum=1)
    if "diag_omega" in params and n_heads != 1:
        raise ValueError("n_heads must be 1 with param 'diag_omega' (the free omegas already sum the heads)")
    steps = check_int("steps", steps, minimum=1)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    if isinstance(lr, dict):
        missing = set(params) - set(lr)
        if missing:
            raise ValueError(
                f"lr must be a number or a dict with an entry for every param, missing {sorted(missing)}"
            )
        lrs = {p: check_positive("lr", lr[p]) for p in params}
    else:
        lrs = dict.fromkeys(params, check_positive("lr", lr))
    if len(betas) != 2 or not all(0 <= b < 1 for b in betas):
        raise ValueError(f"betas must be two numbers in [0, 1), got {betas!r}")
    lr_schedule = check_choice("lr_schedule", lr_schedule, ("constant", "cosine"))
    record_every = check_int("record_every", record_every, minimum=1)
    dev, dt = resolve_device(device), resolve_dtype(dtype)
    S, R = len(noise), len(seeds)

    thetas = {}
    for p in params:
        for L in depths:
            heads = n_heads
            per_seed = [
                init_params(
                    p,
                    L,
                    heads,
                    (S,),
                    d=d,
                    init_scale=init_scale,
                    generator=make_generator(1000 * s + 7 * L + PARAMS.index(p), device=dev),
                    device=dev,
                    dtype=dt,
                )
                for s in seeds
            ]
            thetas[(p, L)] = torch.stack(per_seed, dim=1).requires_grad_(True)  # [S, R, L, H, ...]
    keys = list(thetas)
    adam = Adam([{"params": [thetas[k]], "lr": lrs[k[0]]} for k in keys], betas=betas)
    data_gens = [make_generator(10_000 + data_seed * 1000 + s, device=dev) for s in seeds]
    alive = {k: torch.ones((S, R), dtype=torch.bool, device=dev) for k in keys}

    recorded, history, acc, count = [], {k: [] for k in keys}, {k: 0.0 for k in keys}, 0
    for step in range(1, steps + 1):
        # Fresh data per seed stream (seeds as the second batch dimension).
        batches = [
            sample_icl(noise, 1, batch_size, d=d, n=n, generator=g, device=dev, dtype=dt) for g in data_gens
        ]
        data = {
            name: torch.cat([b[name] for b in batches], dim=1) for name in ("X", "y", "x_query", "target")
        }
        G, e_t = gram_inputs(data["X"], data["y"], data["x_query"])  # [S, R, B, D, D], [S, R, B, D]
        spec = spectral_inputs(G, e_t) if "gdpp" in params else None
        factor = lr_factor(lr_schedule, step - 1, steps)
        for k in keys:
            thetas[k].grad = None
        total = 0.0
        for k in keys:
            if k[0] == "gdpp":  # same function, elementwise in the eigenbasis of Σ
                pred = forward_gdpp_spectral(thetas[k], *spec)  # [S, R, B]
            else:
                pred = forward(k[0], thetas[k], G, e_t)  # [S, R, B]
            per_model = 0.5 * ((pred - data["target"]) ** 2).mean(-1)  # [S, R]
            ok = torch.isfinite(per_model) & alive[k]
            alive[k] = ok
            total = total + torch.where(ok, per_model, torch.zeros_like(per_model)).sum()
            acc[k] = acc[k] + torch.where(ok, per_model, torch.full_like(per_model, float("nan"))).detach()
        total.backward()
        for k in keys:
            if thetas[k].grad is not None:
                mask = alive[k].reshape(S, R, *([1] * (thetas[k].dim() - 2)))
                thetas[k].grad = torch.where(
                    mask, torch.nan_to_num(thetas[k].grad), torch.zeros_like(thetas[k])
                )
        adam.step(factor)
        count += 1
        if step % record_every == 0 or step == steps:
            recorded.append(step)
            for k in keys:
                history[k].append((acc[k] / count).cpu().numpy())
                acc[k] = 0.0
            count = 0

    result = TrainedICL(noise=noise, seeds=seeds, steps=np.asarray(recorded))
    for k in keys:
        result.groups[k] = TrainedGroup(
            param=k[0],
            n_layers=k[1],
            n_heads=thetas[k].shape[3],
            theta=thetas[k].detach(),
            loss=np.stack(history[k], axis=-1),
            diverged=~alive[k].cpu().numpy(),
        )
    result.config = dict(
        params=params,
        depths=depths,
        noise=noise,
        seeds=seeds,
        d=d,
        n=n,
        n_heads=n_heads,
        steps=steps,
        batch_size=batch_size,
        lr=dict(lrs),
        betas=tuple(betas),
        lr_schedule=lr_schedule,
        init_scale=init_scale,
        data_seed=data_seed,
    )
    return result


@torch.no_grad()
def evaluate(
    param: str, theta: torch.Tensor, X, y, x_query, *, chunk: int = 20_000, return_layers: bool = False
) -> torch.Tensor:
    """Predictions of models ``theta [M.., L, H, ...]`` on shared data ``X [B, n, d]``.

    Returns ``[M.., B]`` (or ``[M.., L+1, B]`` with ``return_layers``), computed in chunks of
    ``chunk`` sequences in float64.
    """
    param = check_choice("param", param, PARAMS)
    X = torch.as_tensor(X, dtype=torch.float64)
    if X.ndim != 3:
        raise ValueError(f"X must have shape [B, n, d], got {list(X.shape)}")
    B, n, d = X.shape
    check_shape("y", y, (B, n))
    check_shape("x_query", x_query, (B, d))
    chunk = check_int("chunk", chunk, minimum=1)
    y = torch.as_tensor(y, dtype=torch.float64)
    xq = torch.as_tensor(x_query, dtype=torch.float64)
    th = theta.detach().to(device=X.device, dtype=torch.float64)  # models trained on a GPU: evaluated here
    outs = []
    for start in range(0, B, chunk):
        G, e_t = gram_inputs(X[start : start + chunk], y[start : start + chunk], xq[start : start + chunk])
        outs.append(forward(param, th, G, e_t, return_layers=return_layers))
    return torch.cat(outs, dim=-1)
