"""engine-batch-invariance: a request among concurrent requests gives what it gives alone.

Continuous batching packs requests of other lengths into the same forward passes. The target
request is sent to the reference server alone, to the candidate alone, and to the candidate again
while `concurrent` other requests of other lengths are in flight (sent at the same moment from as
many threads). Greedy tokens must match under the claim, both against the candidate alone (batch
invariance within one process) and against the reference (no batching at all); logprob differences
within tolerance are warnings.

Proof of exercise: the in-flight requests overlapped the target in time, and the candidate has more
than one slot (a server that serves one request at a time never batches: not exercised, a failure).
"""

from __future__ import annotations

from pydantic import Field

from gate.checks._lengths import NEW_TOKENS
from gate.checks._shape import lazy_body
from gate.core.check import Params
from gate.protocols import Capability


class EngineBatchParams(Params):
    """The target request and its concurrent neighbours."""

    length: int = Field(default=200, ge=1)
    """Prompt length of the target request (clipped to the context)."""
    concurrent: int = Field(default=4, ge=1, le=64)
    """Other requests in flight with it."""
    other_lengths: list[int] = Field(default_factory=lambda: [37, 300, 1000, 2500], min_length=1)
    """Prompt lengths of the others (cycled)."""
    new_tokens: int = Field(default=NEW_TOKENS, ge=1, le=64)
    """Greedy tokens compared."""
    other_new_tokens: int = Field(default=32, ge=1, le=256)
    """Tokens each neighbour generates (long enough to overlap the target's decode)."""


CARD, PARAMS, EVIDENCE = "engine-batch-invariance", EngineBatchParams, None
NEEDS = frozenset({Capability.ENGINE_SERVING})
__getattr__ = lazy_body(__name__)


__all__ = ["CARD", "EVIDENCE", "NEEDS", "PARAMS", "EngineBatchParams"]
