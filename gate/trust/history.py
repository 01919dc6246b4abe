"""`gate history`: each check's status and key measure across a ledger's runs, with approvals (the
measures from each recorded dossier's results.json, while it is still there)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gate._util.digest import sha256_file
from gate.core.result import WALL_CLOCK_CHECKS, GateResult
from gate.errors import GateError, InputError
from gate.report.diff import first_failing, load_result, wall_clock
from gate.report.fmt import as_float, as_mapping
from gate.trust.approval_predicate import APPROVAL_KIND
from gate.trust.ledger import RUN_KIND, Entry

FAILING = frozenset({"fail", "error"})
PREFERRED_MEASURES = (
    "max_abs_delta",
    "p_value",
    "kl",
    "argmax_agreement",
    "violations",
    "leaks",
    "problems",
    "wrong_outputs",
    "served_beyond_entitlement",
    "mismatches",
)


def key_measures(check: str, metrics: Mapping[str, Any]) -> dict[str, float]:
    """The measures `gate history` plots for a check: its bounds (`slice.metric.bound`), else one
    key measure (PREFERRED_MEASURES, else the first numeric metric); none for wall-clock checks."""
    if check in WALL_CLOCK_CHECKS:
        return {}
    numeric = {k: v for k, v in ((k, as_float(v)) for k, v in metrics.items() if not wall_clock(k)) if v is not None}
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
    thresholds: dict[str, float] = field(default_factory=dict)


@dataclass
class RunRow:
    """One run entry of the ledger."""

    seq: int
    time: str
    commit: str
    manifest: str
    verdict: str
    note: str
    """Why the measures are missing: the dossier is gone, replaced or unreadable ("" when read)."""
    checks: dict[str, CheckPoint]
    approvals: list[str] = field(default_factory=list)

    @property
    def short(self) -> str:
        return self.commit[:12] if self.commit else "—"


def recorded_dossier(body: Mapping[str, Any]) -> tuple[GateResult | None, str]:
    """The results.json a run entry recorded, if its dossier directory still holds it, else None and why."""
    dossier = as_mapping(body.get("dossier"))
    directory = str(dossier.get("dir") or "")
    path = Path(directory) / "results.json"
    if not directory or not path.is_file():
        return None, f"dossier not found ({directory or 'no directory recorded'})"
    recorded = as_mapping(dossier.get("files")).get("results.json")
    if recorded and sha256_file(path) != recorded:
        return None, f"dossier replaced: {path} is not the results.json this entry recorded (sha256 differs)"
    try:
        return load_result(path), ""
    except GateError as err:
        return None, f"dossier unreadable: {err}"


def _thresholds(evidence: Mapping[str, Any]) -> dict[str, float]:
    found = {}
    for envelope in evidence.get("envelopes") or []:
        if isinstance(envelope, Mapping) and (value := as_float(envelope.get("threshold"))) is not None:
            found[f"{envelope.get('slice')}.{envelope.get('metric')}.bound"] = value
    return found


def run_row(entry: Entry) -> RunRow:
    body = entry.body
    result, note = recorded_dossier(body)
    checks = {
        str(c.get("check")): CheckPoint(status=str(c.get("status")))
        for c in body.get("checks") or []
        if isinstance(c, Mapping)
    }
    if result is not None:
        for check in result.checks:
            point = checks.setdefault(check.check, CheckPoint(status=check.status.value))
            point.measures = key_measures(check.check, check.metrics)
            point.thresholds = _thresholds(check.evidence)
            point.first_failing = first_failing(check)
    return RunRow(
        seq=entry.seq,
        time=entry.time,
        commit=str(as_mapping(body.get("change")).get("commit") or ""),
        manifest=str(as_mapping(body.get("manifest")).get("name") or ""),
        verdict=str(body.get("verdict") or ""),
        note=note,
        checks=checks,
    )


def manifest_runs(entries: Iterable[Entry], name: str) -> list[Entry]:
    return [e for e in entries if e.kind == RUN_KIND and as_mapping(e.body.get("manifest")).get("name") == name]


def latest_other_commit(entries: Iterable[Entry], name: str, commit: str | None) -> Entry | None:
    found = [e for e in manifest_runs(entries, name) if as_mapping(e.body.get("change")).get("commit") != commit]
    return found[-1] if found else None


@dataclass
class History:
    selector: str
    mode: str
    """manifest or check."""
    ledger: str
    runs: list[RunRow]
    checks: list[str]

    def failing(self, run: RunRow) -> bool:
        if self.mode == "check":
            point = run.checks.get(self.checks[0])
            return point is not None and point.status in FAILING
        return run.verdict in FAILING

    @property
    def first_failing(self) -> RunRow | None:
        return next((r for r in self.runs if self.failing(r)), None)

    def series(self) -> list[Series]:
        found: dict[tuple[str, str], Series] = {}
        for index, run in enumerate(self.runs):
            for check in self.checks:
                point = run.checks.get(check)
                for measure, value in (point.measures if point else {}).items():
                    series = found.setdefault((check, measure), Series(check, measure, []))
                    series.values.append((index, run, value))
                    series.threshold = point.thresholds.get(measure, series.threshold) if point else None
        return list(found.values())


@dataclass
class Series:
    check: str
    measure: str
    values: list[tuple[int, RunRow, float]]
    """(position among the history's runs, the run, the value)."""
    threshold: float | None = None


def _manifest_name(selector: str) -> str | None:
    path = Path(selector)
    if not path.is_file():
        return None
    import yaml

    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise InputError(str(path), f"not a readable manifest ({err.__class__.__name__})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("name"), str):
        raise InputError(str(path), "a manifest names itself (`name:`); none found", field="name")
    return str(doc["name"])


def build_history(entries: list[Entry], selector: str, ledger: str) -> History:
    """The history of a manifest (its name or file) or of a check, across the ledger's runs."""
    runs = [e for e in entries if e.kind == RUN_KIND]
    name = _manifest_name(selector) or selector
    if mine := manifest_runs(runs, name):
        rows = [run_row(e) for e in mine]
        history = History(name, "manifest", ledger, rows, list(dict.fromkeys(c for row in rows for c in row.checks)))
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
        history = History(selector, "check", ledger, [run_row(e) for e in having], [selector])
    _mark_approvals(history, entries)
    return history


def _mark_approvals(history: History, entries: list[Entry]) -> None:
    by_seq = {r.seq: r for r in history.runs}
    statements: dict[str, RunRow] = {}
    evidence: dict[str, list[RunRow]] = {}
    for entry in entries:
        if entry.kind == RUN_KIND and entry.seq in by_seq:
            dossier = as_mapping(entry.body.get("dossier"))
            if dossier.get("statement_sha256"):
                statements[str(dossier["statement_sha256"])] = by_seq[entry.seq]
            if dossier.get("evidence_sha256"):
                evidence.setdefault(str(dossier["evidence_sha256"]), []).append(by_seq[entry.seq])
    for entry in entries:
        if entry.kind != APPROVAL_KIND:
            continue
        body = entry.body
        seq = body.get("run_entry")
        run = by_seq.get(seq) if isinstance(seq, int) else None
        run = run or statements.get(str(body.get("statement_sha256")))
        who = str(body.get("approver") or "?")
        if run is not None:
            run.approvals.append(f"{who} (#{entry.seq})")
        for other in evidence.get(str(body.get("evidence_sha256")), []) if body.get("evidence_sha256") else []:
            if other is not run and other.seq > entry.seq:  # a later run of the same evidence carries it
                other.approvals.append(f"{who} (#{entry.seq}, same evidence)")
