"""`quant-invariants`: a quantised KV cache keeps what it says it keeps, on every step.

The cache is read (gate.protocols.QuantizedKV: `quant_state()`, the stored tensors, scales, zero
points and what was written) after every call of one session: a prefill, multi-token appends as
chunked prefill sends them, then single-token decode steps. An element's bound is half its group's
stored scale plus the rounding of the stored scale and zero point; a scale may be no coarser than
its group's range over 2^bits - 1 steps. A negative control returns at its first failing step.
"""

from __future__ import annotations

from pydantic import Field

from gate.checks._shape import lazy_body
from gate.core.check import Params
from gate.protocols import Capability


class QuantInvariantsParams(Params):
    prefill: int = Field(default=9, ge=1)
    """Tokens of the first call (the prompt's first chunk)."""
    chunks: list[int] = Field(default_factory=lambda: [5, 3, 17])
    """Multi-token appends after it, as chunked prefill sends them."""
    decode: int = Field(default=20, ge=0)
    """Single-token appends after the chunks (decode steps)."""
    batch: int = Field(default=2, ge=1, le=64)
    """Sequences per request."""
    memory_rtol: float = Field(default=0.0, ge=0.0, le=1.0)
    """Relative difference allowed between the bytes held and the bytes the declared scheme needs."""


CARD, PARAMS, EVIDENCE = "quant-invariants", QuantInvariantsParams, None
NEEDS = frozenset({Capability.QUANTIZED_KV})
__getattr__ = lazy_body(__name__)


__all__ = ["CARD", "EVIDENCE", "NEEDS", "PARAMS", "QuantInvariantsParams"]
