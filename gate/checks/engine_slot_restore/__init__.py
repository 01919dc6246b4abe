"""engine-slot-restore: a slot saved to a file and restored continues as the reference answers alone.

Where the engine saves and restores slots (gate.adapters.openai.slots), on a server gate launched:

1. same server: prompt P to slot A, A saved, A and another slot B overwritten, the file restored
   into each and P plus a suffix continued;
2. after a restart: a new candidate process (it never saw P) restores the file and continues; its
   count of reused prompt tokens proves the restored state was used (none: unproven);
3. truncated copies of the file (half its size, and less `tail_cuts` bytes) must each be refused.

A control run does step 1 only.
"""

from __future__ import annotations

from pydantic import Field

from gate.checks._lengths import NEW_TOKENS
from gate.checks._shape import lazy_body
from gate.core.check import Params
from gate.protocols import Capability


class EngineSlotRestoreParams(Params):
    """The saved prompt, its continuation and the malformed copies."""

    length: int = Field(default=200, ge=2)
    """Length of the prompt saved in the slot (clipped to the context)."""
    suffix: int = Field(default=8, ge=1, le=256)
    """Tokens appended to the saved prompt before the continuation."""
    new_tokens: int = Field(default=NEW_TOKENS, ge=1, le=64)
    """Greedy tokens compared."""
    malformed: bool = True
    """Restore truncated copies of the file (step 3)."""
    tail_cuts: list[int] = Field(default_factory=lambda: [1], max_length=8)
    """Bytes cut from the end of the file, one truncated copy each, after the copy cut to half its size
    (llama.cpp b11549 aborts on a file 1 or 2 bytes short: GGML_ASSERT(nread <= state_size))."""


CARD, PARAMS, EVIDENCE = "engine-slot-restore", EngineSlotRestoreParams, None
NEEDS = frozenset({Capability.ENGINE_SERVING})
__getattr__ = lazy_body(__name__)


__all__ = ["CARD", "EVIDENCE", "NEEDS", "PARAMS", "EngineSlotRestoreParams"]
