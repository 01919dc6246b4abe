"""`evict-invariants`: an evicting cache keeps what its press promises, on every step.

The candidate's sessions say what their press promises (gate.protocols.EvictionReport: sinks, the
recent window, the last token, a score and a budget) and, for every write on every layer, the pool
the press chose from and what it kept. A prompt is prefilled whole (the path's own chunks), the
same prompt again in chunks of `chunk` tokens, each followed by `decode` one-token steps, and two
short prompts (1 token, and one shorter than the window) with a few steps. On every eviction:

* `evict-protected`: every protected position in the pool is kept;
* `evict-ranking`: the kept non-protected entries are the top of the press's score, recomputed by
  gate in float32 from the keys the press scored (`position` and `knorm`; any other score is read
  from the press). A tie across the keep boundary is reported with its size, a note, never a failure;
* `evict-budget`: each layer and KV head keeps what the budget (or the compression ratio) says;
* `evict-position`: a kept entry carries the position it was written at;
* `evict-short`: a prompt no longer than the budget and the window keeps every token.

A scenario in which the subject raises (a press that refuses a prompt shorter than its window) is a
finding of class `crash` about that scenario; the other scenarios still run and are judged, so a
broken invariant elsewhere names the diagnosis with the crash beside it (a control stops at its
first failure, crash or not). A path whose sessions do not expose this state is `unproven` for the
check, with why. Quality
slices judge what eviction costs; this check judges whether it did what it says, which a quiet
bug (a dropped sink on a small random-weight model) moves less than the slices' noise.
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
