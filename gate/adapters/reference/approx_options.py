"""Options of the reference adapter's approximate-cache paths (no torch: validation stays instant).

candidate: {adapter: reference, options: {weights: copy-model, path: quantized,
                                          quant: {bits: 4, group_size: 16}}}
candidate: {adapter: reference, options: {weights: copy-model, path: evicting,
                                          evict: {window: 64, sink: 4}}}
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class QuantOptions(BaseModel):
    """KV quantisation for `path: quantized` (gate.models.kv_approx.quantize_cache)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    bits: Literal[8, 4] = 8
    """Bits per stored key/value element (int4 codes are packed two per byte)."""
    group_size: int = Field(default=32, ge=2, le=4096)
    """Elements sharing one float16 scale and minimum: channels of one token (token axis, clipped
    to head_dim), or tokens of one channel (channel axis)."""
    key_axis: Literal["token", "channel"] = "token"
    """Group keys per token along the head dimension, or per channel over `group_size` tokens
    (KIVI); values are always grouped per token."""
    residual: int = Field(default=0, ge=0)
    """Newest tokens kept in full precision (HF QuantizedCache's residual_length)."""


class EvictOptions(BaseModel):
    """KV eviction for `path: evicting` (gate.models.kv_approx.evict_cache)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    window: int = Field(ge=1)
    """Most recent tokens kept."""
    sink: int = Field(default=0, ge=0)
    """First tokens always kept (StreamingLLM attention sinks); 0 is a plain sliding window."""
    chunk_size: int = Field(default=16, ge=1)
    """Tokens per model step while prefilling: eviction happens between chunks, so a query sees
    the kept tokens plus at most `chunk_size` of its own chunk (streaming prefill)."""
