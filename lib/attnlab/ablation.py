"""Ablations of trained DIAG and GD++ models: which omegas does the prediction need (chapter 05)?

A DIAG layer (chapter 02, eq. ``eq-diag-layer``) has four blocks, ``omega_xx``, ``omega_xy``,
``omega_yx`` and ``omega_yy``. :func:`ablated` returns a copy of a model with chosen blocks of
chosen layers set to zero, and :func:`ablation_loss` its loss on given prompts, so that a
mechanism read from the weights can be tested by removing it. :func:`term_sizes` measures how far
each block moves the tokens, and :func:`top2_outside_share` how low-rank the part of a FULL
matrix outside the DIAG pattern is.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from attnlab.icl_training import evaluate
from attnlab.models import LinearTransformer
from attnlab.tasks.icl_regression import build_tokens
from attnlab.validation import check_choice, check_int, check_shape

#: The blocks of a DIAG layer, in the order of :meth:`LinearTransformer.omegas`.
BLOCKS = ("xx", "xy", "yx", "yy")


def ablated(model: LinearTransformer, zero: Iterable[tuple[int, str]]) -> LinearTransformer:
    """A copy of the DIAG or GD++ ``model`` with ``omega_<block>`` of layer ``layer`` set to 0.

    ``zero`` lists ``(layer, block)`` pairs, ``layer`` counted from 0 and ``block`` one of
    :data:`BLOCKS`. The copy holds the model's omegas directly (``diag_mode="omega"``, which
    computes the same function as the per-head ``p, q``), in float64, frozen.
    """
    if not isinstance(model, LinearTransformer) or model.param not in ("diag", "gdpp"):
        raise ValueError(f"model must be a DIAG or GD++ LinearTransformer, got {model!r}")
    omegas = model.omegas().detach().to(torch.float64).clone()  # [*models, L, 4]
    for pair in zero:
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise ValueError(f"zero must hold (layer, block) pairs, got {pair!r}")
        layer = check_int("layer", pair[0], minimum=0, maximum=model.n_layers - 1)
        block = check_choice("block", pair[1], BLOCKS)
        omegas[..., layer, BLOCKS.index(block)] = 0.0
    out = LinearTransformer.from_packed(omegas, model.d, model.param, diag_mode="omega")
    return out.requires_grad_(False)


def ablation_loss(model: LinearTransformer, zero: Iterable[tuple[int, str]], X, y, x_query, target) -> float:
    """``½·MSE`` of :func:`ablated` ``(model, zero)`` on the prompts ``X [B, n, d]``, ``y``, ``x_query``.

    ``zero=()`` gives the loss of the model itself. One model (no models dimensions).
    """
    if isinstance(model, LinearTransformer) and model.batch_shape:
        raise ValueError(f"model must be one model, got batch_shape {model.batch_shape}")
    pred = evaluate(ablated(model, zero), X, y, x_query)  # [B]
    target = torch.as_tensor(target, dtype=torch.float64)
    check_shape("target", target, tuple(pred.shape))
    return 0.5 * float(((pred - target) ** 2).mean())


def term_sizes(model: LinearTransformer, X, y, x_query) -> torch.Tensor:
    """``[layers, 4]``: how far each block of every layer of ``model`` moves the context tokens.

    The four terms of a DIAG layer, in the order of :data:`BLOCKS`: ``omega_xx Sigma x_i`` and
    ``omega_xy y_i alpha`` relative to the size of the inputs ``x``, ``omega_yx <alpha, x_i>``
    and ``omega_yy y_i lambda`` relative to the size of the labels ``y`` (Frobenius norms over the
    context tokens of a prompt ``X [B, n, d]``, ``y [B, n]``, ``x_query [B, d]``, as the tokens
    enter the layer), then the median over prompts (a term over tokens of size 0 counts as inf).
    One DIAG or GD++ model (no models dimensions).
    """
    if not isinstance(model, LinearTransformer) or model.param not in ("diag", "gdpp"):
        raise ValueError(f"model must be a DIAG or GD++ LinearTransformer, got {model!r}")
    if model.batch_shape:
        raise ValueError(f"model must be one model, got batch_shape {model.batch_shape}")
    X = torch.as_tensor(X)
    check_shape("X", X, (None, None, model.d))
    om = model.omegas().detach()  # [layers, 4]
    with torch.no_grad():
        states = model.hidden_states(build_tokens(X, y, x_query))
    out = []
    for l in range(model.n_layers):
        x, y_l = states[l][:, :-1, :-1], states[l][:, -1, :-1]  # context: [B, d, n], [B, n]
        Sig, alpha, lam = x @ x.mT, (x * y_l[:, None]).sum(-1), (y_l**2).sum(-1)
        xx, xy, yx, yy = om[l]
        size_x, size_y = x.pow(2).sum((1, 2)).sqrt(), y_l.pow(2).sum(1).sqrt()  # [B]
        terms = (
            (xx * Sig @ x).pow(2).sum((1, 2)).sqrt() / size_x,
            (xy * y_l[:, None] * alpha[..., None]).pow(2).sum((1, 2)).sqrt() / size_x,
            (yx * (alpha[..., None] * x).sum(1)).pow(2).sum(1).sqrt() / size_y,
            (yy * y_l * lam[:, None]).pow(2).sum(1).sqrt() / size_y,
        )
        out.append([t.nan_to_num(float("inf")).median() for t in terms])
    return torch.tensor(out, dtype=torch.float64)


def top2_outside_share(M) -> torch.Tensor:
    """``[...]``: the share of the two largest singular values in the part of ``M`` outside DIAG.

    ``M [..., d+1, d+1]`` (``d >= 2``) minus its projection on the DIAG pattern
    ``diag(c I_d, c_y)`` (``c`` the mean of the input diagonal, ``c_y`` the label entry); the
    share of that part's squared Frobenius norm carried by its two largest singular values: 1 for
    rank two, about 0.5 for a Gaussian random matrix of size 11.
    """
    M = torch.as_tensor(M)
    if M.ndim < 2 or M.shape[-1] != M.shape[-2] or M.shape[-1] < 3:
        raise ValueError(f"M must be [..., d+1, d+1] with d >= 2, got shape {tuple(M.shape)}")
    d = M.shape[-1] - 1
    proj = torch.zeros_like(M)
    c = M[..., :d, :d].diagonal(dim1=-2, dim2=-1).mean(-1)
    proj[..., :d, :d] = c[..., None, None] * torch.eye(d, dtype=M.dtype, device=M.device)
    proj[..., d, d] = M[..., d, d]
    sv = torch.linalg.svdvals(M - proj)
    return (sv[..., :2] ** 2).sum(-1) / (sv**2).sum(-1)
