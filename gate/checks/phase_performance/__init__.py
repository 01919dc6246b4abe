"""phase-performance: four clocks on a serving scenario, judged on confidence intervals (release-gate step 6).

A cache change can improve one clock and worsen another, and fewer operations are a mechanism, not
a wall-clock guarantee (background: four clocks). The check replays a serving scenario
(`scenarios/*.yaml`: concurrent conversations over a shared system prefix, private turns,
arrivals, length distributions, an SLO) through the reference and the candidate path in the same
process, alternating which goes first on every repeat so a busy machine slows both alike, and
measures per path: time to first token and time per output token (p50, p95, p99), inter-token
latency, throughput, goodput under the SLO, live KV bytes over time against the theoretical
2 x layers x KV heads x head dim x tokens x bytes per element, peak device memory (CUDA) and
pressure actions (conversations queued, tokens evicted) where reported.

Every candidate/reference ratio carries an interval from the paired repeats (gate.core.clocks.compare),
widened so that each family of judgements (the budgeted clocks; the watched unbudgeted clocks) holds
`confidence` jointly (Bonferroni): fourteen clocks at 95 % each would otherwise raise a false alarm on
most runs. Unbudgeted clocks outside `watch` are reported, not judged.
Budgets (the manifest's `performance` section over the policy's `budgets` parameter) are judged on
that interval: a ratio confidently past its budget fails; an interval that straddles the budget
passes "within noise", with the interval shown. With `show_savings` (the policy sets it for
approximations), a budget below 1 must be shown: an interval reaching past it fails. A clock with no
budget never fails, but a confident regression larger than `min_effect` is a warning: a candidate
2.7x slower per token is never a green pass.

On engines behind HTTP the replies are judged too: every reply the candidate streamed in the last
repeat is compared with the reference's answer to the same prompt sent alone, under the claim
(gate.checks._engine.judge, as engine-concurrent-conversations does), and a wrong reply fails the
check: timing and correctness come from one run.
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
