"""`schedule-fuzz`: random cache schedules, each step against a full pass, shrunk to a reproducer.

Schedules are drawn with `hypothesis.find` (seeded, no example database, within `max_examples` and
`max_seconds`), then, where the path batches continuously, joins and leaves of one running batch
(gate.checks._schedule). The observation the control engine compares is a fixed probe schedule's logits.
"""

from __future__ import annotations

from pydantic import Field

from gate.checks._shape import lazy_body
from gate.checks.schedule_fuzz.evidence import ScheduleFuzzEvidence
from gate.core.check import Params
from gate.protocols import Capability


class ScheduleFuzzParams(Params):
    """The search budget and the shape of the schedules it draws."""

    max_examples: int = Field(default=100, ge=1, le=100_000)
    """Schedules drawn before the search gives up (shrinking a failure comes on top)."""
    max_seconds: float = Field(default=30.0, gt=0, le=86_400)
    """Wall-clock budget of the search; a failure found in time is still shrunk."""
    max_steps: int = Field(default=8, ge=1, le=64)
    """Operations per schedule."""
    max_chunk: int = Field(default=32, ge=1, le=4096)
    """Largest prefill or append chunk, in tokens."""
    max_tokens: int = Field(default=96, ge=2, le=1_000_000)
    """Longest request a schedule builds (clipped to the paths' context)."""
    batch: int = Field(default=2, ge=1, le=16)
    """Rows per session (two or more let a row read another row's cache)."""
    forks: bool = True
    """Draw forks (a second live session prefilled with the current request's tokens) and switches between them."""
    joins: bool = True
    """Where the path batches continuously (gate.protocols.ContinuousBatching), draw requests joining
    and leaving its running batch, and decode steps of it."""
    slots: int = Field(default=3, ge=1, le=64)
    """Requests the running batch holds at once (a join beyond them waits: a no-op)."""
    atol: float | None = Field(default=None, ge=0)
    """Tolerance: absolute part (default: the claim's, else dtype-aware)."""
    rtol: float | None = Field(default=None, ge=0)
    """Tolerance: relative part (default: the claim's, else dtype-aware)."""


CARD, PARAMS, EVIDENCE = "schedule-fuzz", ScheduleFuzzParams, ScheduleFuzzEvidence
NEEDS = frozenset({Capability.DECODE_PATH})
__getattr__ = lazy_body(__name__)


__all__ = ["CARD", "EVIDENCE", "NEEDS", "PARAMS", "ScheduleFuzzParams"]
