"""The Gram form of the linear transformers as a compiled CPU kernel, ``gram_kernel.c``.

The algorithm is :class:`~attnlab.models.gram_backward.GramForward`'s, forward and hand-written
backward; the tests check the two against each other and against autograd. What differs is the
order of the loops. Torch runs one layer for every sequence at a time: each ``12 x 12`` product is
a batched GEMM of MKL (about a sixth of the float32 matmul peak on one core at this size), and
the states of all layers go to memory and are read back by the backward pass. The kernel holds
``W`` sequences side by side (``[D+1][D+1][W]``, one vector register per matrix entry), takes
them through every layer and back while they stay in the core's cache, and recomputes their
forward pass in the backward pass instead of storing it; for the training loss,
:class:`GramHalfMSE` does the forward and backward passes of a block in one go (the loss's
gradient with respect to the readouts is known inside the kernel). FULL's weights, shared by the sequences,
are copied into every lane once per model, so that their products are per-lane products like the
others (with the weights broadcast from scalars instead, a FULL step took 78 ms against the torch
code's 50 ms; with the copies, 20 ms: 7 layers, batch 2048, one thread).

It is compiled at first use with the system's C compiler (``cc``, ``-O3 -march=native``) into a
cache directory (``$ATTNLAB_CACHE`` or ``~/.cache/attnlab``), one library per dtype and ``d``;
:func:`available` says whether that worked. Where it did not (no compiler, another device,
another dtype), :meth:`~attnlab.models.LinearTransformer.gram_forward` uses the torch code.
Set ``ATTNLAB_GRAM_KERNEL=0`` to turn the kernel off.

:func:`gram_matrices` computes the Gram form's inputs, the context Gram matrices ``EᵀE``, in the
same way (``W`` sequences side by side); :func:`~attnlab.models.fast_inputs` uses it where it can.
"""

from __future__ import annotations

import ctypes
import functools
import os
from pathlib import Path

import torch

from attnlab import ccompile

SOURCE = Path(__file__).with_name("gram_kernel.c")
CFLAGS = ("-O3", "-march=native", "-ffp-contract=fast", "-std=c11", "-fPIC", "-shared")
_LANES = {torch.float32: 8, torch.float64: 4}  # one 256-bit vector register
_REAL = {torch.float32: "float", torch.float64: "double"}
#: What the torch fallback costs (7-layer FULL and DIAG, batch 2048, one thread, 20 steps, the best
#: of three runs of each interleaved: 3.4x and 3.9x on the development machine).
FALLBACK_COST = "Part III's training runs about 3 to 4 times slower on the torch code"


@functools.cache
def _library(dtype: torch.dtype, Dp: int):
    """The compiled kernel for ``dtype`` and padded size ``Dp = d + 2``, or ``None`` if it cannot be built."""
    if os.environ.get("ATTNLAB_GRAM_KERNEL", "1") == "0" or dtype not in _LANES:
        return None
    defines = (f"-DREAL={_REAL[dtype]}", f"-DDP={Dp}", f"-DW={_LANES[dtype]}")
    lib = ccompile.load(SOURCE, "gram_kernel", CFLAGS, defines)
    if lib is None:
        ccompile.warn_fallback("gram_kernel", FALLBACK_COST)
        return None
    p, i, n = ctypes.c_void_p, ctypes.c_int, ctypes.c_ssize_t
    lib.gram_forward.argtypes = [i, i, i, i, n, p, p, n, p, p, p, p]
    lib.gram_backward.argtypes = [i, i, i, i, n, p, p, n, p, p, p, p, p, p]
    lib.gram_half_mse.argtypes = [i, i, i, i, n, p, p, n, p, p, p, p, p, p, p]
    lib.gram_work_size.argtypes, lib.gram_work_size.restype = [i, i, i], n
    lib.gram_matrices.argtypes = [n, i, p, p, p]
    return lib


def available(dtype=torch.float32, d: int = 10) -> bool:
    """Whether the kernel for ``dtype`` and dimension ``d`` is compiled and loaded."""
    return _library(dtype, d + 2) is not None


def usable(kind: str, G: torch.Tensor, w) -> bool:
    """Whether :class:`GramKernel` can run the Gram form of ``kind`` (``"omega"``: DIAG, GD++;
    ``"full"``) on the Gram matrices ``G [..., d+1, d+1]`` with the weights ``w``: CPU tensors of one
    supported dtype, the kernel built."""
    return (
        kind in ("omega", "full")
        and G.device.type == "cpu"
        and all(t.device.type == "cpu" and t.dtype == G.dtype for t in w)
        and _library(G.dtype, G.shape[-1] + 1) is not None
    )


def gram_matrices(X: torch.Tensor, y: torch.Tensor) -> torch.Tensor | None:
    """The context Gram matrices ``EᵀE [..., d+1, d+1]`` of ``E = [X, y]`` (``X [..., n, d]``,
    ``y [..., n]``) by the kernel, as :func:`~attnlab.tasks.icl_regression.gram_inputs`; ``None``
    where the kernel cannot compute them (not on the CPU, another dtype, the kernel not built, or
    inputs that need a gradient)."""
    if (
        X.device.type != "cpu"
        or y.device.type != "cpu"
        or y.dtype != X.dtype
        or X.requires_grad
        or y.requires_grad
        or X.ndim < 2
        or y.shape != X.shape[:-1]
    ):
        return None
    lib = _library(X.dtype, X.shape[-1] + 2)
    if lib is None:
        return None
    n, d = X.shape[-2:]
    X, y = X.contiguous(), y.contiguous()
    G = torch.empty(*X.shape[:-2], d + 1, d + 1, dtype=X.dtype)
    lib.gram_matrices(X.numel() // max(n * d, 1), n, _ptr(X), _ptr(y), _ptr(G))
    return G


def _ptr(t: torch.Tensor | None):
    return ctypes.c_void_p(None if t is None else t.data_ptr())


def _args(kind, G, e_t, w):
    full = kind == "full"
    M, L, H = w[0].shape[0], w[0].shape[1], w[0].shape[2] if full else 1
    lib = _library(G.dtype, G.shape[-1] + 1)
    work = torch.empty(lib.gram_work_size(int(full), L, H), dtype=G.dtype)
    shared = int(G.shape[0] == 1)  # one data set for every model
    weights = (_ptr(w[0]), _ptr(w[1] if full else None))
    return lib, (int(full), M, L, H, G.shape[1], _ptr(G), _ptr(e_t), 1 - shared, *weights), work


def _inputs(G, e_t, w):
    return G.detach().contiguous(), e_t.detach().contiguous(), [t.detach().contiguous() for t in w]


class GramKernel(torch.autograd.Function):
    """Readouts ``[M, L+1, B]`` of ``M`` models, as :class:`~attnlab.models.gram_backward.GramForward`.

    ``kind`` is ``"full"`` (weights ``P, Q [M, L, H, D, D]``) or ``"omega"`` (the omegas
    ``[M, L, 4]``, DIAG and GD++); ``G [M or 1, B, D, D]`` the context Gram matrices and
    ``e_t [M or 1, B, D]`` the queries (``1``: shared by every model). Gradients flow to the
    weights only.
    """

    @staticmethod
    def forward(ctx, kind, G, e_t, *w):
        G, e_t, w = _inputs(G, e_t, w)
        lib, head, work = _args(kind, G, e_t, w)
        y = torch.empty(w[0].shape[0], w[0].shape[1] + 1, G.shape[1], dtype=G.dtype)
        lib.gram_forward(*head, _ptr(y), _ptr(work))
        ctx.kind = kind
        ctx.save_for_backward(G, e_t, *w)
        return y

    @staticmethod
    def backward(ctx, ybar):
        G, e_t, *w = ctx.saved_tensors
        lib, head, work = _args(ctx.kind, G, e_t, w)
        g = [torch.empty_like(t) for t in w]
        g_ptrs = (_ptr(g[0]), _ptr(g[1] if len(g) > 1 else None))
        ybar = ybar.contiguous()  # held: the kernel reads it through a raw pointer
        lib.gram_backward(*head, _ptr(ybar), *g_ptrs, _ptr(work))
        return None, None, None, *g


class GramHalfMSE(torch.autograd.Function):
    """Per-model ½·MSE ``[M]`` of the last readout of :class:`GramKernel` against ``target [M, B]``.

    The kernel computes the loss and its gradient with respect to the weights in one pass (the
    upstream gradient of the readouts is known inside it: ``(y_L - target) / B``); the backward
    pass scales the stored gradients by the loss's upstream gradient.
    """

    @staticmethod
    def forward(ctx, kind, G, e_t, target, *w):
        G, e_t, w = _inputs(G, e_t, w)
        lib, head, work = _args(kind, G, e_t, w)
        loss = torch.empty(w[0].shape[0], dtype=G.dtype)
        g = [torch.empty_like(t) for t in w]
        g_ptrs = (_ptr(g[0]), _ptr(g[1] if len(g) > 1 else None))
        target = target.detach().contiguous()  # held: the kernel reads it through a raw pointer
        lib.gram_half_mse(*head, _ptr(target), _ptr(loss), *g_ptrs, _ptr(work))
        ctx.save_for_backward(*g)
        return loss

    @staticmethod
    def backward(ctx, gloss):
        scaled = [gloss.reshape(-1, *[1] * (g.ndim - 1)) * g for g in ctx.saved_tensors]
        return None, None, None, None, *scaled
