"""spec-greedy: greedy speculative decoding reproduces the target's own greedy continuation.

Under temperature 0 a draft is accepted exactly when it is the target's argmax, so the output must
equal the target's greedy continuation token for token; drafts proposed and some rejected prove the
speculative machinery ran.
"""

from __future__ import annotations

from pydantic import Field

from gate.checks._shape import lazy_body
from gate.checks.spec_greedy.evidence import SpecGreedyEvidence
from gate.core.check import Params
from gate.protocols import Capability


class SpecGreedyParams(Params):
    n_tokens: int | None = Field(default=None, ge=1, le=4096)
    """Continuation length; default: the longest of a greedy-tokens claim's lengths, else 32."""
    prompts: int = Field(default=8, ge=1, le=1024)
    """Seeded random prompts decoded as one batch."""
    prompt_len: int = Field(default=8, ge=1, le=4096)
    """Tokens per prompt."""
    min_rejections: int = Field(default=1, ge=1)
    """Rejected drafts required as proof that verification ran."""


CARD, PARAMS, EVIDENCE = "spec-greedy", SpecGreedyParams, SpecGreedyEvidence
NEEDS = frozenset({Capability.SPECULATIVE_PATH})
__getattr__ = lazy_body(__name__)


__all__ = ["CARD", "EVIDENCE", "NEEDS", "PARAMS", "SpecGreedyParams"]
