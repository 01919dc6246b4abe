"""`short-prompt`: an evicting cache never drops a non-empty context whole.

Prompts of a few tokens (1 and 2 first, then a few more) are prefilled through the candidate and
a few tokens appended one at a time; each continuation is compared with the reference's full
forward over the same tokens. What a correct eviction must keep: at least one K/V pair of any
non-empty context, so a 1-token prompt keeps its one pair and its continuation matches the full
forward within the tolerance; so does any prompt whose cache kept every pair it saw. Where the
session exposes its cache length (gate.protocols.CacheCropping), the check says how many pairs
each prompt kept after its prefill, and an empty cache after a non-empty prefill fails whatever
the logits say. A press that rounds `k_len * (1 - ratio)` down to 0 pairs (kvpress 0.5.4, PR #264)
empties the cache with no error: the next decode step attends over itself alone.

A crash of the subject on one prompt (kvpress's StreamingLLMPress refuses a prompt not longer than
its sinks) is a finding about that prompt, class `crash`, with the exception, call and traceback's
tail in its evidence; the other prompts still run and are judged, so one refusal does not hide
whether the rest are right. A negative control (stop at first failure) walks the prompts shortest
first and returns at the first failing one (a crash there is the engine's to count: detected).
"""

from __future__ import annotations

from pydantic import Field, field_validator

from gate.checks._shape import lazy_body
from gate.core.check import Params
from gate.protocols import Capability


class ShortPromptParams(Params):
    lengths: list[int] = Field(default_factory=lambda: [1, 2, 3, 4, 6])
    """Prompt lengths prefilled, each in its own fresh session; 1 must be among them."""
    steps: int = Field(default=6, ge=1)
    """Tokens appended one at a time after each prompt."""
    batch: int = Field(default=2, ge=1, le=64)
    """Sequences per request."""

    @field_validator("lengths")
    @classmethod
    def _one_token_first(cls, lengths: list[int]) -> list[int]:
        if 1 not in lengths or min(lengths) < 1:
            raise ValueError(f"lengths must be positive and include 1 (a 1-token prompt), got {lengths}")
        return sorted(set(lengths))


CARD, PARAMS, EVIDENCE = "short-prompt", ShortPromptParams, None
NEEDS = frozenset({Capability.DECODE_PATH})
__getattr__ = lazy_body(__name__)


__all__ = ["CARD", "EVIDENCE", "NEEDS", "PARAMS", "ShortPromptParams"]
