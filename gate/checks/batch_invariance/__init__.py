"""`batch-invariance`: a request computes inside a batch what it computes alone.

Every setting is teacher-forced with the reference's greedy tokens, so a row whose argmax differs
from the reference's (outside its tie band) is where greedy decoding would diverge. The batched
rows are also set against the candidate's own rows alone: that |Δ| is evidence, not a verdict
(kernels of other shapes round differently).
"""

from __future__ import annotations

from pydantic import Field

from gate.checks._shape import lazy_body
from gate.core.check import Lengths, Params
from gate.protocols import Capability


class BatchInvarianceParams(Params):
    """The requests batched together and how far each is decoded."""

    lengths: Lengths = Field(default_factory=lambda: [3, 9, 17, 30])
    """Prompt lengths of the requests padded into one batch (at least two differ, so rows are padded)."""
    steps: int = Field(default=6, ge=1, le=256)
    """Greedy tokens each request of a left-padded batch decodes (the reference's continuation)."""
    equal_length: int = Field(default=12, ge=1, le=1_000_000)
    """Prompt length of the equal-length batch (no padding: batch composition alone)."""
    top_k: int = Field(default=5, ge=1, le=50)
    """Logits kept per row at the first failing position."""
    atol: float | None = Field(default=None, ge=0)
    """Tolerance: absolute part (default: the claim's, else dtype-aware)."""
    rtol: float | None = Field(default=None, ge=0)
    """Tolerance: relative part (default: the claim's, else dtype-aware)."""


CARD, PARAMS, EVIDENCE = "batch-invariance", BatchInvarianceParams, None
NEEDS = frozenset({Capability.DECODE_PATH})
OPTIONAL = {
    Capability.BATCHED_SESSIONS: "padded batches of unequal lengths are judged (padding_sides)",
    Capability.CONTINUOUS_BATCHING: "requests join and leave a running batch",
}
__getattr__ = lazy_body(__name__)


__all__ = ["CARD", "EVIDENCE", "NEEDS", "OPTIONAL", "PARAMS", "BatchInvarianceParams"]
