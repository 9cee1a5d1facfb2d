"""Ablations of trained DIAG and GD++ models: which omegas does the prediction need (chapter 05)?

A DIAG layer (chapter 02, eq. ``eq-diag-layer``) has four blocks, ``omega_xx``, ``omega_xy``,
``omega_yx`` and ``omega_yy``. :func:`ablated` returns a copy of a model with chosen blocks of
chosen layers set to zero, and :func:`ablation_loss` its loss on given prompts, so that a
mechanism read from the weights can be tested by removing it.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from attnlab.icl_training import evaluate
from attnlab.models import LinearTransformer
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
