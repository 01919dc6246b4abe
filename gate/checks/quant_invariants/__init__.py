"""`quant-invariants`: a quantised KV cache keeps what it says it keeps, on every step.

Quality slices judge what a quantised cache costs; they cannot see a cache that keeps more tokens
in full precision than it declares, stores a scale its codes were not computed against, or runs
with other bits than the manifest names: such a cache answers fluently, and on a small model its
quality moves less than the slices' noise. This check reads the cache after every call of one
session (a prefill, multi-token appends as chunked prefill sends them, then single-token decode
steps) and judges three invariants, each with its own class:

* `quant-residual-overflow`: the tokens held in full precision never exceed the declared residual
  (the library's rule applied to the declared `residual`), quantised plus full-precision tokens
  are exactly the tokens written, and the full-precision ones are the newest, bit for bit;
* `quant-error-bound`: every quantised element reads back within half its group's stored scale
  (plus the rounding of the stored scale and zero point), and every stored scale is no coarser
  than its group's range over the 2^bits - 1 steps of the bits the cache states;
* `quant-config-mismatch`: the bits, group size, axes and residual rule the cache states are the
  ones the manifest declares, and the bytes it holds are what the declared scheme needs for the
  tokens it holds.

The adapter reads the cache object (gate.protocols.QuantizedKV: the declared scheme and sessions
whose `quant_state()` returns the stored tensors, scales, zero points and what was written). A
path whose state cannot be read is unproven here, with why. A negative control returns at its
first failing step.
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
