"""Options of the reference adapter's `prefix-cache` path (no torch: validation stays instant).

candidate: {adapter: reference, options: {path: prefix-cache, block_size: 4,
                                          prefix: {cache_bytes: 65536, kv_dtype: bfloat16}}}
candidate: {adapter: reference, options: {path: prefix-cache, fault: key-ignores-tenant}}
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gate.prefix.faults import PREFIX_FAULTS

__all__ = ["PREFIX_FAULTS", "PrefixOptions"]


class PrefixOptions(BaseModel):
    """Cross-request prefix cache settings for `path: prefix-cache`."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    cache_bytes: int = Field(default=64 << 20, ge=1)
    """Byte budget of the cache; least recently used leaf blocks are evicted beyond it."""
    kv_dtype: Literal["float32", "bfloat16", "float16"] | None = None
    """Numeric format the K/V blocks are stored in (default: the model dtype)."""
