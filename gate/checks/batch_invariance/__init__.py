"""`batch-invariance`: a request computes inside a batch what it computes alone.

Each request (a seeded prompt) is judged against the reference's logits for it alone (one full
pass over the prompt and the reference's greedy continuation) in up to five settings:

* alone: the candidate's own session with batch 1 (a failure here is not a batching bug; it is
  reported so, and greedy-parity/prefix-sweep localise it);
* equal-length batch: requests of one length in one session (no padding; batch composition alone);
* left-padded batch: requests of different lengths padded on the left by the path
  (gate.protocols.BatchedSessions), prefilled together, then decoding the reference's continuation
  one token per step in the same batch, in two row orders;
* right-padded batch: the same requests padded on the right, prefill only;
* continuous batching: the same requests join one running batch at different forwards
  (gate.protocols.ContinuousBatching), each prompt's prefill (a long one in two chunks) in the same
  forward as the others' decode steps; they leave at different steps, one early, and the last
  joins a slot another request left.

Teacher forcing keeps rows aligned: every setting appends the reference's greedy tokens, so a
row whose argmax differs from the reference's (outside its tie band, gate.checks._compare) is
where greedy decoding would diverge. Under a claim that bounds logits (exact, tolerance), a row
beyond the deny allowance fails too. The candidate's batched rows are also set against its own
rows alone (batch invariance in the strict sense; the |Δ| is evidence, not a verdict: kernels of
other shapes round differently).

A path that does not pad (no BatchedSessions) is judged on the equal-length batch only, and the
result says so; so does a path that does not batch continuously.
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
