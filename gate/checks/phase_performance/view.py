"""The dossier's view of phase-performance's evidence: latency distributions, live bytes over time, the four clocks."""

from __future__ import annotations

from gate.checks.phase_performance.evidence import ClockRow, ServingEvidence
from gate.report.evidence import MAX_TABLE_ROWS, EvidenceViews
from gate.report.fmt import display, number
from gate.report.model import Table
from gate.report.perf_plots import latency_plot, live_plot

SERVING_CLOCKS = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("itl_s", "ITL"))


def read(evidence: ServingEvidence, views: EvidenceViews) -> None:
    """Latency distributions and live bytes over time of both paths, and the table of clocks."""
    series = [
        (label, kind, getattr(evidence.latency_samples[kind], key))
        for key, label in SERVING_CLOCKS
        for kind in ("reference", "candidate")
        if kind in evidence.latency_samples
    ]
    views.latency = latency_plot([s for s in series if s[2]])
    live = [
        (kind, item.t_s, item.live_bytes, item.theory_bytes)
        for kind in ("reference", "candidate")
        if (item := evidence.live_bytes_over_time.get(kind)) is not None and item.t_s and item.live_bytes
    ]
    views.live = live_plot(live)
    if views.live is None:
        views.notes.append("live_bytes_over_time: no usable series")
    rows = [
        [r.clock, display(r.reference), display(r.candidate), _ratio(r), r.budget, r.verdict]
        for r in evidence.clocks[:MAX_TABLE_ROWS]
    ]
    if rows:
        views.tables.insert(
            0,
            Table(
                title="Four clocks",
                columns=["clock", "reference", "candidate", "candidate/reference [interval]", "budget", "verdict"],
                rows=rows,
            ),
        )
    views.consumed.update(("latency_samples", "live_bytes_over_time", "clocks"))


def _ratio(r: ClockRow) -> str:
    if r.ratio is None:
        return "—"
    interval = f" [{number(r.low)}, {number(r.high)}]" if r.low is not None and r.high is not None else ""
    return f"x{number(r.ratio)}{interval}"
