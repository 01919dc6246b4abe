"""`evict-invariants`: an evicting cache keeps what its press promises, on every step.

The candidate's sessions report the press's promise and, per write and layer, the pool and what it
kept (gate.protocols.EvictionReport). Scenarios: a prompt prefilled whole, the same in chunks of
`chunk` tokens, each followed by `decode` steps, and two short prompts. Ranking recomputes the
`position` and `knorm` scores in float32 (any other is read from the press). A scenario in which the
subject raises is a `crash` finding about it; the others still run and are judged.
"""

from __future__ import annotations

from pydantic import Field

from gate.checks._shape import lazy_body
from gate.core.check import Params
from gate.protocols import Capability


class EvictInvariantsParams(Params):
    prompt: int | None = Field(default=None, ge=2)
    """Tokens of the long prompt (default: twice the budget plus 5, so every write evicts)."""
    chunk: int = Field(default=7, ge=1)
    """Tokens per call of the chunked prefill (an odd size, off the path's own chunk edges)."""
    decode: int = Field(default=6, ge=0)
    """One-token steps after each prompt."""
    batch: int = Field(default=2, ge=1, le=16)
    """Sequences per request."""
    rtol: float = Field(default=1e-5, gt=0)
    """Scores within rtol x the largest |score| of the pool are a tie."""


CARD, PARAMS, EVIDENCE = "evict-invariants", EvictInvariantsParams, None
NEEDS = frozenset({Capability.DECODE_PATH})
__getattr__ = lazy_body(__name__)


__all__ = ["CARD", "EVIDENCE", "NEEDS", "PARAMS", "EvictInvariantsParams"]
