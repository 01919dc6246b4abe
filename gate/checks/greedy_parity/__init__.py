"""`greedy-parity`: N-token greedy continuations identical on the reference and the candidate.

Each path continues the same prompts greedily on its own (prefill, then one append per token). A
divergence where the reference's top-2 margin is within tolerance and the candidate picked the
runner-up is a tie: a warning, not a failure. For a scheduling change the candidate's prompt goes in
as a prefill up to its first layout boundary, then appends cut at every following boundary and once
inside a chunk, so chunks start mid-cache and cross chunk edges. The body (with `greedy` and
`prompt_cuts`, used by batch-invariance) loads on first use (gate.checks._shape).
"""

from __future__ import annotations

from pydantic import Field

from gate.checks._shape import lazy_body
from gate.checks.greedy_parity.evidence import GreedyEvidence
from gate.core.check import Lengths, Params
from gate.protocols import Capability


class GreedyParityParams(Params):
    tokens: Lengths | None = None
    """Continuation lengths that must match (default: the claim's `tokens` for greedy-tokens, else [8, 64])."""
    prompt_lengths: Lengths = Field(default_factory=lambda: [7, 100])
    """Prompt lengths; each is a separate batch of random prompts."""
    batch: int = Field(default=2, ge=1, le=64)
    """Prompts per batch."""
    top_k: int = Field(default=5, ge=1, le=50)
    """Logits kept per row at the first diverging step."""
    atol: float | None = Field(default=None, ge=0)
    """Tie band: absolute part (default: the claim's, else dtype-aware)."""
    rtol: float | None = Field(default=None, ge=0)
    """Tie band: relative part (default: the claim's, else dtype-aware)."""
    chunked_prompt: bool | None = None
    """Feed the candidate's prompt as multi-token chunks cut at its layout boundaries (default: for
    scheduling changes)."""


CARD, PARAMS, EVIDENCE = "greedy-parity", GreedyParityParams, GreedyEvidence
NEEDS = frozenset({Capability.DECODE_PATH})
__getattr__ = lazy_body(__name__)


__all__ = ["CARD", "EVIDENCE", "NEEDS", "PARAMS", "GreedyParityParams"]
