"""The four clocks of a serving run, as small typed records, and their statistics.

Whoever serves a scenario fills a `ServingTrace` (per request, its arrival and when each output token
became available; live KV bytes over time; peak device memory); TTFT, TPOT, ITL, throughput, goodput
and live bytes are computed here from it (background: four clocks). `compare` puts a confidence
interval on each candidate/reference ratio from paired repeats. This module imports no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import Field
from scipy.special import stdtrit  # Student's t quantile (scipy.stats costs a second to import)

from gate.core.manifest import Record


class RequestTiming(Record):
    """One request (a conversation turn): arrival and the time each output token became available."""

    conversation: int = Field(ge=0)
    """Conversation index in the scenario."""
    turn: int = Field(ge=0)
    """Turn index inside the conversation."""
    arrival_s: float
    """When the request arrived (seconds on the trace's clock)."""
    admitted_s: float | None = None
    """When the server began its prefill (admitted_s - arrival_s is time spent queued)."""
    prompt_tokens: int = Field(ge=0)
    """Tokens the request's prefill processed."""
    token_s: list[float] = Field(default_factory=list)
    """When each output token became available, in order (same clock as arrival_s)."""


class LiveBytes(Record):
    """KV bytes the path held at one moment."""

    t_s: float
    """Seconds on the trace's clock."""
    live_bytes: int = Field(ge=0)
    """Sum of the live sessions' reported cache bytes."""
    tokens: int = Field(ge=0)
    """Tokens those sessions held in cache."""


class ServingTrace(Record):
    """One path's replay of one scenario: the raw record the four clocks are computed from."""

    path: str
    """Path name."""
    clock: Literal["perf_counter", "cuda-events", "wall"]
    """What timed it: perf_counter (CPU), CUDA events (GPU), wall (an external engine's stream)."""
    requests: list[RequestTiming]
    """Every request, in scenario order (conversation, turn)."""
    memory: list[LiveBytes] = Field(default_factory=list)
    """Live KV bytes over time."""
    makespan_s: float = Field(gt=0)
    """From the first arrival to the last token."""
    peak_device_bytes: int | None = None
    """Peak device memory allocated during the replay (CUDA only), else None."""
    pressure: dict[str, int] = Field(default_factory=dict)
    """Pressure actions: requests queued, blocks evicted or offloaded, preemptions (what was reported)."""


Better = Literal["lower", "higher"]


@dataclass(frozen=True)
class Metric:
    """A clock: where its samples come from and which direction is better."""

    name: str
    level: Literal["request", "gap", "run"]
    better: Better
    unit: str
    quantile: float | None = None
    words: str = ""


def _clock_metrics() -> dict[str, Metric]:
    metrics: dict[str, Metric] = {}
    for clock, level, words in (
        ("ttft", "request", "time to first token"),
        ("tpot", "request", "time per output token"),
        ("itl", "gap", "inter-token latency"),
    ):
        for q in (50, 95, 99):
            name = f"{clock}_p{q}"
            metrics[name] = Metric(name, level, "lower", "s", q / 100, f"{words}, p{q}")  # type: ignore[arg-type]
    metrics["throughput"] = Metric("throughput", "run", "higher", "tok/s", None, "output tokens per second")
    metrics["goodput"] = Metric("goodput", "run", "higher", "req/s", None, "requests per second meeting the SLO")
    metrics["live_bytes"] = Metric("live_bytes", "run", "lower", "B", None, "peak live KV bytes")
    metrics["live_bytes_mean"] = Metric("live_bytes_mean", "run", "lower", "B", None, "time-weighted live KV bytes")
    metrics["peak_memory"] = Metric("peak_memory", "run", "lower", "B", None, "peak device memory (CUDA)")
    return metrics


METRICS: dict[str, Metric] = _clock_metrics()
"""Every clock gate reports and a manifest may budget, by name."""


def ttfts(trace: ServingTrace) -> np.ndarray:
    return np.array([(r.token_s[0] - r.arrival_s) if r.token_s else np.nan for r in trace.requests])


def tpots(trace: ServingTrace) -> np.ndarray:
    return np.array(
        [(r.token_s[-1] - r.token_s[0]) / (len(r.token_s) - 1) if len(r.token_s) > 1 else 0.0 for r in trace.requests]
    )


def gaps(trace: ServingTrace) -> np.ndarray:
    return np.concatenate([np.diff(np.asarray(r.token_s, dtype=float)) for r in trace.requests] or [np.zeros(0)])


def goodput_share(trace: ServingTrace, ttft_s: float, tpot_s: float) -> float:
    """Share of requests meeting both targets."""
    ok = (ttfts(trace) <= ttft_s) & (tpots(trace) <= tpot_s)
    return float(ok.mean()) if ok.size else 0.0


def live_bytes_mean(trace: ServingTrace) -> float:
    """Time-weighted mean of live KV bytes over the makespan (each sample holds until the next)."""
    if not trace.memory:
        return 0.0
    t = np.array([m.t_s for m in trace.memory] + [max(trace.makespan_s, trace.memory[-1].t_s)])
    b = np.array([m.live_bytes for m in trace.memory], dtype=float)
    span = float(t[-1] - t[0])
    return float((b * np.diff(t)).sum() / span) if span > 0 else float(b.mean())


def run_value(trace: ServingTrace, name: str, slo: tuple[float, float]) -> float | None:
    """A run-level clock of one trace (None where the path did not report it)."""
    if name == "throughput":
        return sum(len(r.token_s) for r in trace.requests) / trace.makespan_s
    if name == "goodput":
        return goodput_share(trace, *slo) * len(trace.requests) / trace.makespan_s
    if name in ("live_bytes", "live_bytes_mean") and not trace.memory:
        return None  # the path reports no live bytes (an engine behind HTTP)
    if name == "live_bytes":
        return float(max(m.live_bytes for m in trace.memory))
    if name == "live_bytes_mean":
        return live_bytes_mean(trace)
    if name == "peak_memory":
        return None if trace.peak_device_bytes is None else float(trace.peak_device_bytes)
    raise KeyError(name)


def samples(trace: ServingTrace, metric: Metric) -> np.ndarray:
    """Per-request (TTFT, TPOT) or per-gap (ITL) samples of a clock."""
    if metric.name.startswith("ttft"):
        return ttfts(trace)
    if metric.name.startswith("tpot"):
        return tpots(trace)
    return gaps(trace)


def summary(traces: Sequence[ServingTrace], slo: tuple[float, float]) -> dict[str, float | None]:
    """Every clock over the pooled repeats of one path (percentiles over all requests of all repeats)."""
    out: dict[str, float | None] = {}
    for name, metric in METRICS.items():
        if metric.level == "run":
            values = [run_value(t, name, slo) for t in traces]
            known = [v for v in values if v is not None]
            out[name] = float(np.mean(known)) if known else None
        else:
            pooled = np.concatenate([samples(t, metric) for t in traces])
            out[name] = float(np.nanquantile(pooled, metric.quantile or 0.5)) if pooled.size else None
    out["goodput_share"] = float(np.mean([goodput_share(t, *slo) for t in traces])) if traces else None
    return out


@dataclass(frozen=True)
class Interval:
    """A candidate/reference ratio with its bootstrap confidence interval."""

    point: float
    low: float
    high: float
    confidence: float
    repeats: int

    def straddles(self, value: float = 1.0) -> bool:
        return self.low <= value <= self.high

    def as_dict(self) -> dict[str, float | int]:
        return {
            "ratio": round(self.point, 4),
            "low": round(self.low, 4),
            "high": round(self.high, 4),
            "confidence": self.confidence,
            "repeats": self.repeats,
        }


def per_repeat(trace: ServingTrace, name: str, slo: tuple[float, float]) -> float | None:
    """One clock's value in one repeat: a run-level value, or the percentile over that repeat's samples."""
    metric = METRICS[name]
    if metric.level == "run":
        return run_value(trace, name, slo)
    values = samples(trace, metric)
    values = values[~np.isnan(values)]
    return float(np.quantile(values, metric.quantile or 0.5)) if values.size else None


def compare(
    reference: Sequence[ServingTrace],
    candidate: Sequence[ServingTrace],
    name: str,
    *,
    slo: tuple[float, float],
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> Interval | None:
    """Candidate/reference ratio of one clock with its confidence interval; None when either path
    did not report the clock, or the reference's value is zero.

    The point estimate is the geometric mean of the per-repeat (paired) ratios; the interval is the
    union of a bootstrap over repeats of the mean log ratio and the paired Student-t interval on the
    log ratios (a percentile bootstrap alone is too narrow with few repeats)."""
    repeats = min(len(reference), len(candidate))
    ref = [per_repeat(t, name, slo) for t in reference[:repeats]]
    cand = [per_repeat(t, name, slo) for t in candidate[:repeats]]
    if repeats == 0 or any(v is None for v in (*ref, *cand)) or any(v == 0 for v in ref):
        return None
    r, c = np.array(ref, dtype=float), np.array(cand, dtype=float)
    if np.any(c == 0):  # a clock that fell to zero (no request met the SLO): ratio of means, no log
        point = float(c.mean() / r.mean())
        return Interval(point, point, point, confidence, repeats) if repeats < 2 else _mean_ratio(r, c, confidence)
    logs = np.log(c / r)
    mean = float(logs.mean())
    tail = (1 - confidence) / 2
    low = high = mean
    if repeats >= 2:
        rng = np.random.default_rng(seed)
        boot = logs[rng.integers(0, repeats, size=(resamples, repeats))].mean(axis=1)
        b_low, b_high = np.quantile(boot, [tail, 1 - tail])
        spread = float(stdtrit(repeats - 1, 1 - tail)) * float(logs.std(ddof=1)) / np.sqrt(repeats)
        low, high = min(float(b_low), mean - spread), max(float(b_high), mean + spread)
    return Interval(float(np.exp(mean)), float(np.exp(low)), float(np.exp(high)), confidence, repeats)


def _mean_ratio(r: np.ndarray, c: np.ndarray, confidence: float) -> Interval:
    """Ratio of means with a Student-t interval on the paired differences (for clocks that hit zero)."""
    tail = (1 - confidence) / 2
    spread = float(stdtrit(len(r) - 1, 1 - tail)) * float((c - r).std(ddof=1)) / np.sqrt(len(r))
    base = float(r.mean())
    point = float(c.mean()) / base
    return Interval(point, max(point - spread / base, 0.0), point + spread / base, confidence, len(r))


def theory_bytes(tokens: int, *, layers: int, kv_heads: int, head_dim: int, bytes_per_element: int) -> int:
    """KV bytes a conventional cache needs for `tokens` tokens: 2 x layers x KV heads x head dim x
    tokens x bytes per element (background: four clocks)."""
    return 2 * layers * kv_heads * head_dim * tokens * bytes_per_element
