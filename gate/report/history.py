"""`gate history`: each check's status and key measure across a ledger's runs, with approvals.

The ledger's run entries (gate.trust.run_record) carry each check's status; the measures come from
the dossier directory each entry records (its results.json), when it is still there ("dossier not
found" otherwise). Runs are in ledger order (entry number), each with its commit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gate.core.result import WALL_CLOCK_CHECKS, WALL_CLOCK_KEYS, GateResult
from gate.errors import GateError, InputError
from gate.report.fmt import as_float, display, number
from gate.trust.ledger import RUN_KIND, Entry

FAILING = frozenset({"fail", "error"})
PREFERRED_MEASURES = ("max_abs_delta", "p_value", "kl", "argmax_agreement", "violations", "leaks", "problems")
"""A check's key measure when it records no bound: the first of these in its metrics, else its first
numeric metric."""


def key_measures(check: str, metrics: Mapping[str, Any]) -> dict[str, float]:
    """The measures `gate history` plots for a check: its bounds (`slice.metric.bound`), else one
    key measure (PREFERRED_MEASURES, else the first numeric metric); none for wall-clock checks."""
    if check in WALL_CLOCK_CHECKS:
        return {}
    numeric = {
        k: v for k, v in ((k, as_float(v)) for k, v in metrics.items() if k not in WALL_CLOCK_KEYS) if v is not None
    }
    bounds = {k: v for k, v in numeric.items() if k.endswith(".bound")}
    if bounds:
        return bounds
    for name in (*PREFERRED_MEASURES, *numeric):
        if name in numeric:
            return {name: numeric[name]}
    return {}


@dataclass
class CheckPoint:
    status: str
    measures: dict[str, float] = field(default_factory=dict)
    first_failing: str | None = None


@dataclass
class RunRow:
    """One run entry of the ledger."""

    seq: int
    time: str
    commit: str
    manifest: str
    verdict: str
    dossier: str
    dossier_found: bool
    checks: dict[str, CheckPoint]
    approvals: list[str] = field(default_factory=list)
    """Who approved this run (approval entries naming its entry or its dossier's statement)."""

    @property
    def short(self) -> str:
        return self.commit[:12] if self.commit else "—"


def read_dossier(directory: str) -> GateResult | None:
    """The results.json a run entry's dossier directory holds, or None (gone, unreadable)."""
    from gate.report.diff import load_result

    path = Path(directory) if directory else None
    if path is None or not (path / "results.json").is_file():
        return None
    try:
        return load_result(path)
    except GateError:
        return None


def run_row(entry: Entry) -> RunRow:
    from gate.report.diff import first_failing

    body = entry.body
    dossier = str((body.get("dossier") or {}).get("dir") or "")
    result = read_dossier(dossier)
    checks = {
        str(c.get("check")): CheckPoint(status=str(c.get("status")))
        for c in body.get("checks") or []
        if isinstance(c, Mapping)
    }
    if result is not None:
        for check in result.checks:
            point = checks.setdefault(check.check, CheckPoint(status=check.status.value))
            point.measures = key_measures(check.check, check.metrics)
            point.first_failing = first_failing(check)
    return RunRow(
        seq=entry.seq,
        time=entry.time,
        commit=str((body.get("change") or {}).get("commit") or ""),
        manifest=str((body.get("manifest") or {}).get("name") or ""),
        verdict=str(body.get("verdict") or ""),
        dossier=dossier,
        dossier_found=result is not None,
        checks=checks,
    )


def manifest_runs(entries: Iterable[Entry], name: str) -> list[Entry]:
    """The run entries of manifest `name`, in ledger order."""
    return [e for e in entries if e.kind == RUN_KIND and (e.body.get("manifest") or {}).get("name") == name]


def latest_other_commit(entries: Iterable[Entry], name: str, commit: str | None) -> Entry | None:
    """The newest run of manifest `name` recorded on a commit other than `commit`."""
    found = [e for e in manifest_runs(entries, name) if ((e.body.get("change") or {}).get("commit")) != commit]
    return found[-1] if found else None


@dataclass
class History:
    selector: str
    mode: str
    """manifest or check."""
    ledger: str
    runs: list[RunRow]
    checks: list[str]
    """The checks shown (one, in check mode)."""

    def failing(self, run: RunRow) -> bool:
        if self.mode == "check":
            point = run.checks.get(self.checks[0])
            return point is not None and point.status in FAILING
        return run.verdict in FAILING

    @property
    def first_failing(self) -> RunRow | None:
        return next((r for r in self.runs if self.failing(r)), None)

    def series(self) -> list[tuple[str, str, list[tuple[RunRow, float]]]]:
        """(check, measure, [(run, value)]) for each measure any run recorded, in first-seen order."""
        names: dict[tuple[str, str], None] = {}
        for run in self.runs:
            for check in self.checks:
                for measure in (run.checks.get(check) or CheckPoint("")).measures:
                    names[(check, measure)] = None
        return [
            (
                check,
                measure,
                [
                    (r, r.checks[check].measures[measure])
                    for r in self.runs
                    if measure in (r.checks.get(check) or CheckPoint("")).measures
                ],
            )
            for check, measure in names
        ]


def _manifest_name(selector: str) -> str | None:
    """The `name` of the manifest file `selector` names, or None when it names no file."""
    path = Path(selector)
    if not path.is_file():
        return None
    import yaml

    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise InputError(str(path), f"not a readable manifest ({err.__class__.__name__})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("name"), str):
        raise InputError(str(path), "name: a manifest names itself (`name:`); none found")
    return doc["name"]


def build_history(entries: list[Entry], selector: str, ledger: str) -> History:
    """The history of a manifest (its name or file) or of a check, across the ledger's runs."""
    runs = [e for e in entries if e.kind == RUN_KIND]
    name = _manifest_name(selector) or selector
    mine = manifest_runs(runs, name)
    if mine:
        rows = [run_row(e) for e in mine]
        checks: dict[str, None] = {}
        for row in rows:
            checks.update(dict.fromkeys(row.checks))
        history = History(selector=name, mode="manifest", ledger=ledger, runs=rows, checks=list(checks))
    else:
        having = [
            e
            for e in runs
            if any(isinstance(c, Mapping) and c.get("check") == selector for c in e.body.get("checks") or [])
        ]
        if not having:
            raise InputError(
                str(ledger), f"no run of a manifest or check named {selector!r} is recorded in this ledger"
            )
        history = History(
            selector=selector, mode="check", ledger=ledger, runs=[run_row(e) for e in having], checks=[selector]
        )
    _mark_approvals(history, entries)
    return history


def _mark_approvals(history: History, entries: list[Entry]) -> None:
    from gate.trust.approvals import APPROVAL_KIND

    by_seq = {r.seq: r for r in history.runs}
    statements = {}
    for entry in entries:
        if entry.kind == RUN_KIND and entry.seq in by_seq:
            digest = (entry.body.get("dossier") or {}).get("statement_sha256")
            if digest:
                statements[digest] = by_seq[entry.seq]
    for entry in entries:
        if entry.kind != APPROVAL_KIND:
            continue
        body = entry.body
        run = by_seq.get(body.get("run_entry")) if isinstance(body.get("run_entry"), int) else None
        run = run or statements.get(body.get("statement_sha256"))
        if run is not None:
            run.approvals.append(f"{body.get('approver') or '?'} (#{entry.seq})")


# --- plots ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HistoryPoint:
    x: float
    y: float
    tone: str
    title: str
    label: str
    """The commit under the axis."""
    approved: bool


@dataclass(frozen=True)
class HistoryPlot:
    """One measure over the runs: a line through the values, a marker per run (red: the check
    failed), a ring and "approved" over each approved run."""

    check: str
    measure: str
    width: int
    height: int
    left: float
    right: float
    top: float
    bottom: float
    line: str
    points: list[HistoryPoint]
    y_ticks: list[tuple[float, str]]
    description: str


def history_plot(check: str, measure: str, points: list[tuple[RunRow, float]]) -> HistoryPlot:
    width, height, left, right, top, bottom = 420, 150, 56.0, 404.0, 18.0, 112.0
    values = [v for _, v in points if math.isfinite(v)]
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    if high == low:
        pad = abs(high) * 0.1 or 1.0
        low, high = low - pad, high + pad
    step = (right - left) / max(len(points) - 1, 1)

    def y_of(value: float) -> float:
        value = min(max(value, low), high) if math.isfinite(value) else high
        return round(bottom - (value - low) / (high - low) * (bottom - top), 1)

    drawn = []
    for i, (run, value) in enumerate(points):
        point = run.checks.get(check)
        status = point.status if point else "?"
        tone = "bad" if status in FAILING else "good" if status == "pass" else "warn"
        approved = f"; approved by {', '.join(run.approvals)}" if run.approvals else ""
        drawn.append(
            HistoryPoint(
                x=round(left + i * step if len(points) > 1 else (left + right) / 2, 1),
                y=y_of(value),
                tone=tone,
                title=f"run #{run.seq} {run.short}: {measure} {number(value)} ({status}){approved}",
                label=run.short[:7],
                approved=bool(run.approvals),
            )
        )
    ticks = [(y_of(v), number(v)) for v in (low, (low + high) / 2, high)]
    description = f"{check} {measure} over {len(points)} runs, from {number(points[0][1])} to {number(points[-1][1])}"
    return HistoryPlot(
        check=check,
        measure=measure,
        width=width,
        height=height,
        left=left,
        right=right,
        top=top,
        bottom=bottom,
        line=" ".join(f"{p.x},{p.y}" for p in drawn),
        points=drawn,
        y_ticks=ticks,
        description=description,
    )


# --- terminal -------------------------------------------------------------------------------------


def _cell(point: CheckPoint | None) -> str:
    if point is None:
        return "—"
    shown = ", ".join(number(v) for v in point.measures.values())
    return f"{point.status} {shown}".strip()


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
    for run in history.runs:
        notes = []
        if not run.dossier_found:
            notes.append(f"dossier not found ({run.dossier or 'none recorded'}): statuses from the ledger only")
        if run.approvals:
            notes.append("approved by " + ", ".join(run.approvals))
        if notes:
            lines.append(f"  run #{run.seq}: " + "; ".join(notes))
    failing = history.first_failing
    if failing is None:
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
    return "\n".join(lines) + "\n"


def render_html(history: History) -> str:
    from gate.report.render import html_environment

    plots = [history_plot(check, measure, points) for check, measure, points in history.series()]
    template = html_environment().get_template("history.html.j2")
    return template.render(history=history, plots=plots, first_failing=history.first_failing, display=display)
