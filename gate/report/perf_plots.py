"""Geometry of the performance plots (phase-performance's evidence): per-phase latency quantiles on a
log axis, and live memory against the theory's bytes over time. Coordinates and labels, never markup,
as the other plots (gate.report.plots)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gate.report.plots import Frame, Marker, Tick, _nice_ticks, _r


@dataclass(frozen=True)
class LatencyRow:
    """One path's distribution of one clock: whisker min..max, box p25..p75, ticks at p50, p95, p99."""

    label: str
    y: float
    kind: str
    """reference or candidate."""
    whisker: tuple[float, float]
    box: tuple[float, float]
    median: float
    tail: list[Marker]
    title: str


@dataclass(frozen=True)
class LatencyPlot:
    """Latency distributions of both paths, clock by clock, on one log-scale time axis."""

    frame: Frame
    rows: list[LatencyRow]
    x_ticks: list[Tick]
    description: str


@dataclass(frozen=True)
class LivePanel:
    """One path's live KV bytes over time (a step line) and the theoretical bytes for the tokens held."""

    label: str
    left: float
    right: float
    line: str
    theory: str
    x_ticks: list[Tick]


@dataclass(frozen=True)
class LivePlot:
    """Live KV bytes over time, reference and candidate side by side on a shared byte axis."""

    frame: Frame
    panels: list[LivePanel]
    y_ticks: list[Tick]
    description: str


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def _seconds(value: float) -> str:
    return f"{value * 1000:.3g} ms" if value < 1 else f"{value:.3g} s"


def latency_plot(series: Sequence[tuple[str, str, Sequence[float]]]) -> LatencyPlot | None:
    """series: (clock label, reference|candidate, samples in seconds), drawn top to bottom."""
    usable = [(label, kind, [v for v in values if v > 0 and math.isfinite(v)]) for label, kind, values in series]
    usable = [item for item in usable if item[2]]
    if not usable:
        return None
    row_h = 22.0
    height = row_h * len(usable)
    frame = Frame(width=640, height=int(40 + height), left=150.0, top=8.0, right=620.0, bottom=8.0 + height)
    everything = [v for _, _, values in usable for v in values]
    lo = math.floor(math.log10(min(everything)))
    hi = math.ceil(math.log10(max(everything)))
    hi = hi if hi > lo else lo + 1

    def x_of(value: float) -> float:
        return _r(frame.left + frame.plot_width * (math.log10(value) - lo) / (hi - lo))

    rows: list[LatencyRow] = []
    for i, (label, kind, values) in enumerate(usable):
        y = _r(frame.top + row_h * (i + 0.5))
        p50, p95, p99 = (_quantile(values, q) for q in (0.5, 0.95, 0.99))
        tail = [
            Marker(x=x_of(p95), y=y, tone="warn", title=f"{label} {kind}: p95 {_seconds(p95)}"),
            Marker(x=x_of(p99), y=y, tone="bad", title=f"{label} {kind}: p99 {_seconds(p99)}"),
        ]
        rows.append(
            LatencyRow(
                label=f"{label} · {kind}",
                y=y,
                kind=kind,
                whisker=(x_of(min(values)), x_of(max(values))),
                box=(x_of(_quantile(values, 0.25)), x_of(_quantile(values, 0.75))),
                median=x_of(p50),
                tail=tail,
                title=f"{label} {kind}: n {len(values)}, p50 {_seconds(p50)}, p95 {_seconds(p95)}, p99 {_seconds(p99)}",
            )
        )
    ticks = [Tick(pos=x_of(10.0**k), label=_seconds(10.0**k)) for k in range(lo, hi + 1)]
    return LatencyPlot(
        frame=frame,
        rows=rows,
        x_ticks=ticks,
        description="; ".join(row.title for row in rows) + ".",
    )


def live_plot(
    panels: Sequence[tuple[str, Sequence[float], Sequence[float], Sequence[float] | None]],
) -> LivePlot | None:
    """panels: (path label, times in s, live bytes, theoretical bytes or None), drawn left to right."""
    usable = [p for p in panels if p[1] and len(p[1]) == len(p[2])]
    if not usable:
        return None
    frame = Frame(width=640, height=220, left=64.0, top=12.0, right=624.0, bottom=180.0)
    top = max([*(b for p in usable for b in p[2]), *(b for p in usable for b in (p[3] or []))], default=1.0) or 1.0
    ticks = _nice_ticks(top * 1.05)
    top = max(top * 1.05, ticks[-1])
    gap = 16.0
    width = (frame.plot_width - gap * (len(usable) - 1)) / len(usable)

    def y_of(value: float) -> float:
        return _r(frame.bottom - frame.plot_height * value / top)

    out: list[LivePanel] = []
    for i, (label, times, live, theory) in enumerate(usable):
        left = frame.left + i * (width + gap)
        end = max(times[-1], 1e-9)

        def x_of(t: float, left: float = left, end: float = end) -> float:
            return _r(left + width * t / end)

        steps: list[str] = []
        for j, (t, b) in enumerate(zip(times, live, strict=True)):
            if j:
                steps.append(f"{x_of(t)},{y_of(live[j - 1])}")
            steps.append(f"{x_of(t)},{y_of(b)}")
        theory_line = (
            " ".join(f"{x_of(t)},{y_of(b)}" for t, b in zip(times, theory, strict=True))
            if theory and len(theory) == len(times)
            else ""
        )
        x_ticks = [Tick(pos=x_of(f * end), label=_seconds(f * end)) for f in (0.0, 0.5, 1.0)]
        out.append(LivePanel(label, _r(left), _r(left + width), " ".join(steps), theory_line, x_ticks))
    y_ticks = [Tick(pos=y_of(t), label=_bytes(t)) for t in ticks]
    peaks = ", ".join(f"{label} peak {_bytes(max(live))}" for label, _, live, _ in usable)
    return LivePlot(frame=frame, panels=out, y_ticks=y_ticks, description=f"live KV bytes over time: {peaks}.")


def _bytes(value: float) -> str:
    for unit, size in (("GiB", 2.0**30), ("MiB", 2.0**20), ("KiB", 2.0**10)):
        if value >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.0f} B"
