"""`short-prompt`: an evicting cache never drops a non-empty context whole.

Each prompt length runs in a fresh session, a few tokens appended one at a time, compared with the
reference's full forward. A crash on one prompt (kvpress's StreamingLLMPress refuses a prompt not
longer than its sinks) is a `crash` finding about it; the other prompts still run. A negative
control walks the prompts shortest first and returns at the first failing one.
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
