"""phase-performance: four clocks on a serving scenario, judged on confidence intervals (release-gate step 6).

Both paths replay the scenario in one process, alternating which goes first on every repeat. Each
ratio's interval (gate.core.clocks.compare) is widened so that each family (the budgeted clocks;
the watched unbudgeted ones) holds `confidence` jointly (Bonferroni); other clocks are only
reported. On engines behind HTTP the candidate's replies in the last repeat are also judged
against the reference's answer to each prompt sent alone: timing and correctness from one run.
"""

from __future__ import annotations

from pydantic import Field

from gate.checks._shape import lazy_body
from gate.checks.phase_performance.evidence import ServingEvidence
from gate.core.check import Params
from gate.core.manifest import Budget, ClockName
from gate.protocols import Capability

WATCHED: tuple[ClockName, ...] = ("ttft_p95", "tpot_p95", "itl_p95", "throughput", "live_bytes")
"""Unbudgeted clocks phase-performance judges by default: one per clock family."""


class PhasePerformanceParams(Params):
    """Parameters of the phase-performance check."""

    scenario: str = "chat-shared-prefix"
    """A shipped scenario's name (scenarios/*.yaml) or a path to a scenario file."""
    conversations: int | None = Field(default=None, ge=1, le=4096)
    """Override the scenario's number of conversations (smaller for a quick run)."""
    max_concurrent: int | None = Field(default=None, ge=1, le=4096)
    """Override the scenario's admission limit."""
    repeats: int = Field(default=6, ge=2, le=100)
    """Replays per path, alternating which path goes first: the paired observations each interval is built from."""
    confidence: float = Field(default=0.95, gt=0.5, lt=1)
    """Two-sided confidence of each ratio's interval."""
    resamples: int = Field(default=2000, ge=200, le=100_000)
    """Bootstrap resamples per interval."""
    min_effect: float = Field(default=0.10, ge=0, le=10)
    """Without a budget, warn when a clock is confidently worse than the reference by more than this
    share (its interval clears 1 + min_effect; fourteen clocks are judged at once, so a margin keeps
    an unchanged candidate quiet)."""
    watch: list[ClockName] = Field(default_factory=lambda: list(WATCHED))
    """Clocks judged without a budget (a confident regression warns); the rest are reported only."""
    gross: float = Field(default=2.0, gt=1)
    """Without a budget, also warn when a watched clock's point estimate is this many times worse even
    though the noise leaves its interval unresolved: a gross slowdown is never a green pass."""
    show_savings: bool = False
    """An approximation must show the saving it exists for: a budget below 1 (or a min_ratio above 1)
    passes only when the whole interval lies within it."""
    budgets: dict[ClockName, Budget] = Field(default_factory=dict)
    """Default budgets from the policy; the manifest's `performance` section replaces them clock by clock."""


CARD, PARAMS, EVIDENCE = "phase-performance", PhasePerformanceParams, ServingEvidence
NEEDS = frozenset({Capability.DECODE_PATH})
NEEDS_INSTEAD = (frozenset({Capability.ENGINE_SERVING}),)
"""An engine runs it through its streaming API instead of sessions."""
__getattr__ = lazy_body(__name__)


__all__ = ["CARD", "EVIDENCE", "NEEDS", "NEEDS_INSTEAD", "PARAMS", "WATCHED", "PhasePerformanceParams"]
