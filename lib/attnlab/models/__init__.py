"""Attention variants as ``torch.nn.Module`` classes, one class per variant, one module per part.

Shapes are written in comments as ``[batch, n_tokens, d]``. Each class documents the chapter that
introduces it and the equation it implements. Every forward pass of an attention model in the
library is defined here (and nowhere else):

- :mod:`attnlab.models.linear_attention` — Part I (paper A): one linear self-attention layer on
  one-hot tokens, and the same layer with a softmax for contrast.
- :mod:`attnlab.models.softmax_attention` — Part II (paper B): tied low-rank softmax attention
  (token form and fast Gram form, many runs at once), its untied and learned-value variants, the
  purely positional linear baseline, and the one-layer histogram transformer.
- :mod:`attnlab.models.linear_transformer` — Part III (paper C): multi-layer linear transformers
  for in-context regression (one model or a batch), their parameterisations, and the decayed-key
  variant (:mod:`attnlab.models.decayed_linear_transformer`), the gated-key variant
  (:mod:`attnlab.models.gated_linear_transformer`); :mod:`attnlab.models.gd_constructions`
  — the hand-set GD / GD++ weights.
"""

from attnlab.models.decayed_linear_transformer import DecayedLinearTransformer
from attnlab.models.gated_linear_transformer import GATE_FEATURES, GatedLinearTransformer
from attnlab.models.gd_constructions import (
    gd_construction,
    gdpp_construction,
    gdpp_schedule,
    one_step_gd,
    verify_gd_weights,
    verify_gdpp_bounds,
)
from attnlab.models.linear_attention import LinearSelfAttention, SoftmaxSelfAttention
from attnlab.models.linear_transformer import (
    LinearTransformer,
    fast_inputs,
    spectral_inputs,
)
from attnlab.models.lt_params import LT_DIAG_MODES, LT_PARAMS, PARAMETERISATIONS, default_init_scale
from attnlab.models.softmax_attention import (
    HistogramTransformer,
    PositionalLinear,
    TiedLowRankAttention,
    TiedLowRankAttentionWithValue,
    TwoTokenData,
    UntiedLowRankAttention,
)

__all__ = [
    "LT_DIAG_MODES",
    "LT_PARAMS",
    "PARAMETERISATIONS",
    "GATE_FEATURES",
    "DecayedLinearTransformer",
    "GatedLinearTransformer",
    "HistogramTransformer",
    "LinearSelfAttention",
    "LinearTransformer",
    "PositionalLinear",
    "SoftmaxSelfAttention",
    "TiedLowRankAttention",
    "TiedLowRankAttentionWithValue",
    "TwoTokenData",
    "UntiedLowRankAttention",
    "default_init_scale",
    "fast_inputs",
    "gd_construction",
    "gdpp_construction",
    "gdpp_schedule",
    "one_step_gd",
    "spectral_inputs",
    "verify_gd_weights",
    "verify_gdpp_bounds",
]
