"""engine-batch-invariance: a request among concurrent requests gives what it gives alone.

The target goes to the reference alone, to the candidate alone, and to the candidate again while
`concurrent` others of other lengths are in flight (sent at the same moment from as many threads).
Proof of exercise: the others overlapped the target in time, and the candidate has more than one slot.
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
