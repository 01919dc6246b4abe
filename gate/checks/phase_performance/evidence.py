"""The evidence record of phase-performance (its face's EVIDENCE; body.py writes it, view.py reads it)."""

from __future__ import annotations

from typing import Any

from gate.core.evidence import EvidenceRecord, _Record


class LatencySamples(_Record):
    """One path's latency samples, in seconds."""

    ttft_s: list[float]
    """Time to first token per request."""
    tpot_s: list[float]
    """Time per output token per request."""
    itl_s: list[float]
    """Inter-token latencies."""


class LiveBytes(_Record):
    """One path's live cache bytes over time."""

    t_s: list[float]
    """Seconds since the scenario started."""
    live_bytes: list[float]
    """Bytes held."""
    theory_bytes: list[float] | None
    """What a dense KV cache of the live tokens would hold."""


class ClockRow(_Record):
    """One clock, candidate against reference."""

    clock: str
    """Clock name (ttft_p95, tpot_p95, throughput, live_bytes, ...)."""
    measures: str
    """What it measures, in words."""
    unit: str
    """Unit of `reference` and `candidate`."""
    better: str
    """`lower` or `higher`."""
    reference: float | None
    """Reference's value."""
    candidate: float | None
    """Candidate's value."""
    budget: str
    """The policy's budget, in words ("" when watched only)."""
    verdict: str
    """What the interval says against the budget."""
    ratio: float | None = None
    """candidate / reference."""
    low: float | None = None
    """Lower end of the ratio's interval."""
    high: float | None = None
    """Upper end of the ratio's interval."""
    confidence: float | None = None
    """Joint confidence of the intervals."""
    repeats: int | None = None
    """Interleaved repeats behind the interval."""


class ServingEvidence(EvidenceRecord):
    """phase-performance: four clocks on a serving scenario, with the samples behind them."""

    scenario: dict[str, Any]
    """The serving scenario as run."""
    timer: str
    """The clock the timings were read from."""
    device: str
    """Device."""
    repeats: int
    """Interleaved repeats."""
    confidence: float
    """Joint confidence of the intervals."""
    clocks: list[ClockRow]
    """The four clocks (and the watched ones)."""
    kv_theory: dict[str, Any] | None
    """Theoretical KV bytes per token and live/theory ratios."""
    pressure: dict[str, Any]
    """Per path: memory pressure during the last repeat."""
    goodput_share: dict[str, Any]
    """Per path: share of requests within the SLO."""
    paths: dict[str, str]
    """Path names."""
    latency_samples: dict[str, LatencySamples]
    """Per path (`reference`, `candidate`): latency samples."""
    live_bytes_over_time: dict[str, LiveBytes]
    """Per path: live bytes over time."""
    servers: dict[str, Any] | None = None
    """Engines behind HTTP: each server's command, port, start-up time and log tail."""
    cache_reset: dict[str, str] | None = None
    """Engines behind HTTP: how each server's prefix cache was reset between repeats."""
    correctness: dict[str, Any] | None = None
    """Engines behind HTTP: every reply of the candidate's last repeat against the reference's answer to
    the same prompt sent alone, under the claim (compared, failed, the failures, max |Δlogprob|)."""


__all__ = ["ClockRow", "LatencySamples", "LiveBytes", "ServingEvidence"]
