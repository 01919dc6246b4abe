"""How `gate history` shows a History (gate.trust.history): a table on the terminal, and an HTML page
with one plot per measure (history.html.j2)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from gate.report.fmt import display, number
from gate.trust.history import FAILING, CheckPoint, History, Series


@dataclass(frozen=True)
class HistoryPoint:
    x: float
    y: float
    tone: str
    title: str
    label: str
    approved: bool


@dataclass(frozen=True)
class HistoryPlot:
    """One measure over the runs: a line through the values, a marker per run (red: the check
    failed), a ring and "approved" over each approved run."""

    check: str
    measure: str
    line: str
    points: list[HistoryPoint]
    y_ticks: list[tuple[float, str]]
    description: str
    threshold_y: float | None = None
    threshold_label: str = ""
    first_failing_x: float | None = None
    width: ClassVar[int] = 420
    height: ClassVar[int] = 150
    left: ClassVar[float] = 56.0
    right: ClassVar[float] = 404.0
    top: ClassVar[float] = 22.0
    bottom: ClassVar[float] = 112.0


def history_plot(series: Series, runs: int, first_failing: int | None = None) -> HistoryPlot:
    """`series` over `runs` positions, with a dashed line at the first failing run's."""
    left, right, top, bottom = HistoryPlot.left, HistoryPlot.right, HistoryPlot.top, HistoryPlot.bottom
    values = [v for _, _, v in series.values if math.isfinite(v)]
    if series.threshold is not None:
        values.append(series.threshold)
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    pad = (high - low) * 0.08 or abs(high) * 0.1 or 1.0
    low, high = low - pad, high + pad
    step = (right - left) / max(runs - 1, 1)

    def y_of(value: float) -> float:
        value = min(max(value, low), high) if math.isfinite(value) else high
        return round(bottom - (value - low) / (high - low) * (bottom - top), 1)

    drawn = []
    for index, run, value in series.values:
        point = run.checks.get(series.check)
        status = point.status if point else "?"
        tone = "bad" if status in FAILING else "good" if status == "pass" else "warn"
        approved = f"; approved by {', '.join(run.approvals)}" if run.approvals else ""
        drawn.append(
            HistoryPoint(
                x=round(left + index * step if runs > 1 else (left + right) / 2, 1),
                y=y_of(value),
                tone=tone,
                title=f"run #{run.seq} {run.short}: {series.measure} {number(value)} ({status}){approved}",
                label=run.short[:7],
                approved=bool(run.approvals),
            )
        )
    first, last = series.values[0][2], series.values[-1][2]
    description = f"{series.check} {series.measure} over {len(drawn)} runs, from {number(first)} to {number(last)}"
    threshold = series.threshold
    return HistoryPlot(
        check=series.check,
        measure=series.measure,
        line=" ".join(f"{p.x},{p.y}" for p in drawn),
        points=drawn,
        y_ticks=[(y_of(v), number(v)) for v in (low + pad, high - pad)],
        description=description + (f"; threshold {number(threshold)}" if threshold is not None else ""),
        threshold_y=y_of(threshold) if threshold is not None else None,
        threshold_label=f"threshold {number(threshold)}" if threshold is not None else "",
        first_failing_x=round(left + first_failing * step, 1) if first_failing is not None and runs > 1 else None,
    )


def _cell(point: CheckPoint | None) -> str:
    if point is None:
        return "—"
    return f"{point.status} {', '.join(number(v) for v in point.measures.values())}".strip()


def render_text(history: History) -> str:
    lines = [f"gate history: {history.mode} {history.selector} in {history.ledger} ({len(history.runs)} runs)"]
    header = ["run", "commit", "time", "verdict", *history.checks]
    rows = []
    for run in history.runs:
        cells = [f"#{run.seq}", run.short, run.time[:19], run.verdict]
        cells += [_cell(run.checks.get(c)) for c in history.checks]
        rows.append(cells)
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for cells in [header, *rows]:
        lines.append("  " + "  ".join(f"{c:<{w}}" for c, w in zip(cells, widths, strict=True)).rstrip())
    named: dict[str, list[str]] = {}
    for series in history.series():
        named.setdefault(series.check, []).append(series.measure)
    if named:
        lines.append("  measures: " + "; ".join(f"{check}: {', '.join(m)}" for check, m in named.items()))
    for run in history.runs:
        notes = []
        if run.note:
            notes.append(f"{run.note}: statuses from the ledger only")
        if run.approvals:
            notes.append("approved by " + ", ".join(run.approvals))
        if notes:
            lines.append(f"  run #{run.seq}: " + "; ".join(notes))
    if (failing := history.first_failing) is None:
        lines.append("no failing run")
    else:
        where = ""
        point = run_point = failing.checks.get(history.checks[0]) if history.mode == "check" else None
        failed = [c for c, p in failing.checks.items() if p.status in FAILING]
        if run_point is None and failed:
            point = failing.checks[failed[0]]
            where = f": {failed[0]}"
        if point is not None and point.first_failing:
            where += f" at {point.first_failing}"
        lines.append(f"first failing commit: {failing.commit or '(none recorded)'} (run #{failing.seq}){where}")
        latest = history.runs[-1]
        if latest is not failing:
            state = "failing" if history.failing(latest) else "not failing"
            lines.append(f"latest run: #{latest.seq} {latest.short} ({latest.verdict}), {state}")
    return "\n".join(lines) + "\n"


def render_html(history: History) -> str:
    from gate.report.render import html_environment

    failing = history.first_failing
    at = history.runs.index(failing) if failing is not None else None
    plots = [history_plot(series, len(history.runs), at) for series in history.series()]
    template = html_environment().get_template("history.html.j2")
    return template.render(history=history, plots=plots, first_failing=history.first_failing, display=display)
