"""engine-repeat-consistency: a hosted API whose cache cannot be switched off, judged by behaviour.

For each of `prompts` fresh prompts (seeded token ids never sent before, so the first request is
cold) the check sends the prompt cold, then `distractors` requests that share its first part, insert
fresh tokens and continue with the rest (a cache that keys on too little, or reuses chunks found
after a mismatch at new positions, serves their state), then the prompt `repeats` times. The replies
are split by the cache-read tokens they report; disagreement among uncached ones makes the check
unproven. Proof of exercise: the engine's reported cache-read tokens on the repeats (never any: an
error). Only the candidate is sent requests.
"""

from __future__ import annotations

from pydantic import Field

from gate.checks._lengths import NEW_TOKENS
from gate.checks._shape import lazy_body
from gate.core.check import Params
from gate.protocols import Capability


class EngineRepeatParams(Params):
    """The schedule of requests: fresh prompts, their distractors and repeats."""

    prompts: int = Field(default=3, ge=1, le=32)
    """Fresh prompts, each judged on its own."""
    length: int = Field(default=1088, ge=2)
    """Prompt length (hosted caches often start at 1,024 tokens); clipped to the context."""
    shared: float = Field(default=0.5, gt=0, lt=1)
    """Share of the prompt a distractor has in common with it (its first part)."""
    distractors: int = Field(default=2, ge=0, le=16)
    """Requests between the cold reply and the repeats: the prompt's first part, fresh tokens, the rest."""
    inserted: int = Field(default=64, ge=1, le=4096)
    """Fresh tokens a distractor inserts after the shared first part."""
    repeats: int = Field(default=3, ge=1, le=64)
    """Repeats of the prompt after the distractors."""
    new_tokens: int = Field(default=NEW_TOKENS, ge=1, le=64)
    """Greedy tokens compared."""


CARD, PARAMS, EVIDENCE = "engine-repeat-consistency", EngineRepeatParams, None
NEEDS = frozenset({Capability.ENGINE_SERVING})
__getattr__ = lazy_body(__name__)


__all__ = ["CARD", "EVIDENCE", "NEEDS", "PARAMS", "EngineRepeatParams"]
