"""Attention variants as ``torch.nn.Module`` classes, one class per variant.

Shapes are written in comments as ``[batch, n_tokens, d]``. Each class documents the chapter that
introduces it and the equation it implements.
"""

from __future__ import annotations


# ---------------------------------------------------------------------------------------------
# Part I (paper A): linear self-attention on one-hot tokens.
# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# Part II (paper B): tied low-rank softmax attention and the positional linear baseline.
# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# Part III (paper C): multi-layer linear transformers for in-context regression.
# ---------------------------------------------------------------------------------------------
