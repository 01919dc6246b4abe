"""A check's evidence into report views: a built-in check's evidence is validated into its face's
record (gate.checks.faces.EVIDENCE) and read by the `read` in `gate.checks.<module>.view`; any other
evidence becomes generic tables. Evidence that does not validate degrades to a note and the same
generic tables, never an exception: a dossier must render from any results.json
(docs/report-evidence.md says what each view reads).
"""

from __future__ import annotations

import functools
import importlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from gate.checks.faces import EVIDENCE, FACES
from gate.core.evidence import EvidenceRecord, ServedRequest, StoreEvidence
from gate.core.hazards import HAZARDS, read_hazard
from gate.report.divergence import layer_plot
from gate.report.fmt import display
from gate.report.model import Diagnosis, HazardView, KeyValue, Table, Views

DIAGNOSIS_KEYS = ("profile", "bug_class", "first_diverging_layer", "explanation", "hazard")
"""Diagnosis keys the box shows (gate.checks._diagnosis writes them); any other key is listed below it."""
MAX_TABLE_ROWS = 50
FOLD_ABOVE = 40
"""A sweep table longer than this folds its passing runs (failing and boundary rows always stay)."""


@dataclass
class EvidenceViews(Views):
    """What the evidence of one check turned into."""

    first_failing_length: float | None = None
    consumed: set[str] = field(default_factory=set)
    """Evidence keys a dedicated view showed; the rest become generic tables."""

    def table(self, title: str, columns: list[str], rows: list[list[str]], note: str = "") -> None:
        self.tables.append(Table(title=title, columns=columns, rows=rows, note=note))


Reader = Callable[[Any, EvidenceViews], None]
"""A check's view (`read` in gate.checks.<module>.view): its typed record into `EvidenceViews`."""


def fold_rows(rows: list[list[str]], failing: list[bool], pinned: list[bool]) -> tuple[list[list[str]], int]:
    """Rows with long passing runs folded into one marker row (first, last, failing, `pinned` and
    pass/fail-edge rows stay): (rows, how many were folded)."""
    if len(rows) <= FOLD_ABOVE:
        return rows, 0
    kept = {0, len(rows) - 1} | {i for i, pin in enumerate(pinned) if pin}
    for i, bad in enumerate(failing):
        if bad:
            kept.update((i - 1, i, i + 1))
        if i and failing[i - 1] != bad:
            kept.update((i - 1, i))
    kept = {i for i in kept if 0 <= i < len(rows)}
    out: list[list[str]] = []
    folded = 0
    run: list[int] = []
    for i, row in enumerate(rows):
        if i in kept:
            if run:
                out.append(_folded_row(rows, run, len(row)))
                folded += len(run)
                run = []
            out.append(row)
        else:
            run.append(i)
    return out, folded


def _folded_row(rows: list[list[str]], run: list[int], width: int) -> list[str]:
    span = rows[run[0]][0] if len(run) == 1 else f"{rows[run[0]][0]} – {rows[run[-1]][0]}"
    return [f"… {len(run)} passing lengths folded ({span})", *([""] * (width - 1))]


def requests_table(requests: list[ServedRequest], views: EvidenceViews) -> None:
    """The reuse ledger: per request, what a correct cache may reuse against what was reused."""
    rows = []
    for r in requests[:MAX_TABLE_ROWS]:
        reuse = "BEYOND entitlement" if r.reused > r.entitled else ("below" if r.reused < r.entitled else "")
        counts = map(str, (r.prompt_tokens, r.entitled, r.reused))
        outputs = [str(r.hit_blocks), str(r.computed), display(r.max_abs_delta), str(r.argmax_flips)]
        rows.append([r.request, *counts, reuse, *outputs])
    if rows:
        views.table(
            title="Requests: reuse against entitlement, outputs against a full recompute",
            columns=["request", "prompt", "entitled", "reused", "", "hit blocks", "computed", "max |Δlogit|", "flips"],
            rows=rows,
            note=f"first {MAX_TABLE_ROWS} of {len(requests)} rows" if len(requests) > MAX_TABLE_ROWS else "",
        )
    views.consumed.add("requests")


def store_findings(evidence: StoreEvidence, views: EvidenceViews) -> None:
    """What every prefix-store check records beside its requests: what it could not assert, and the
    stores the run started."""
    if evidence.unproven_assertions:
        views.table(
            title="Not asserted: the store lacks what they need",
            columns=["assertion", "why"],
            rows=[[a, why] for a, why in evidence.unproven_assertions.items()],
        )
    if evidence.store_starts_in_run:
        views.table(
            title="Stores started in this run",
            columns=["#", "store"],
            rows=[[str(n), name] for n, name in enumerate(evidence.store_starts_in_run, 1)],
        )
    views.consumed.update(("unproven_assertions", "store_starts_in_run"))


def read_store_requests(evidence: StoreEvidence, views: EvidenceViews) -> None:
    """A prefix-store check's requests and what could not be asserted (all tenant-isolation and hash-collision show)."""
    requests_table(evidence.requests, views)
    store_findings(evidence, views)


def read_diagnosis(diagnosis: Mapping[str, Any] | None) -> tuple[Diagnosis | None, list[Table]]:
    """The diagnosis box, plus tables for its per-layer records (gate.checks._diagnosis `layers`)."""
    if not diagnosis:
        return None, []

    def text(key: str) -> str | None:
        return None if diagnosis.get(key) in (None, "") else display(diagnosis[key], limit=2000)

    tables: list[Table] = []
    other: list[KeyValue] = []
    for key, value in diagnosis.items():
        if key in DIAGNOSIS_KEYS:
            continue
        if isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            tables.extend(generic_tables("Diagnosis", {key: value})[-1:])
        else:
            other.append(KeyValue(key.replace("_", " "), display(value, limit=600)))
    layers = diagnosis.get("layers")
    finding = read_hazard(diagnosis)
    hazard = None
    if finding is not None:
        design = HAZARDS[finding.hazard].design
        hazard = HazardView(finding.hazard, finding.check, design, finding.shown, finding.avoid)
    box = Diagnosis(
        hazard=hazard,
        layers=layer_plot(layers, diagnosis.get("traced_prefix_len")) if isinstance(layers, list) else None,
        profile=text("profile"),
        likely_bug_class=text("bug_class"),
        first_diverging_layer=text("first_diverging_layer"),
        explanation=text("explanation"),
        other=other,
    )
    return box, tables


def generic_tables(title: str, values: Mapping[str, Any]) -> list[Table]:
    """Scalars as one key/value table; a list of records as its own table; the rest as JSON text."""
    tables: list[Table] = []
    scalars: list[list[str]] = []
    for key, value in values.items():
        if isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            columns = sorted({str(k) for row in value for k in row})[:12]
            rows = [[display(row.get(c), limit=120) for c in columns] for row in value[:MAX_TABLE_ROWS]]
            note = f"first {MAX_TABLE_ROWS} of {len(value)} rows" if len(value) > MAX_TABLE_ROWS else ""
            tables.append(Table(title=f"{title}: {key}", columns=columns, rows=rows, note=note))
        elif isinstance(value, Mapping) and value and all(isinstance(v, Mapping) for v in value.values()):
            columns = sorted({str(k) for row in value.values() for k in row})[:11]
            rows = [
                [str(name), *(display(row.get(c), limit=120) for c in columns)]
                for name, row in list(value.items())[:MAX_TABLE_ROWS]
            ]
            tables.append(Table(title=f"{title}: {key}", columns=["", *columns], rows=rows))
        elif (
            isinstance(value, Mapping)
            and len(value) > 6
            and not any(isinstance(v, (dict, list)) for v in value.values())
        ):
            rows = [[str(k).replace("_", " "), display(v)] for k, v in list(value.items())[:MAX_TABLE_ROWS]]
            tables.append(Table(title=f"{title}: {key}", columns=["key", "value"], rows=rows))
        elif isinstance(value, (dict, list)) and len(json.dumps(value, default=str)) > 300:
            tables.append(Table(title=f"{title}: {key}", columns=["json"], rows=[[display(value, limit=2000)]]))
        else:
            scalars.append([key.replace("_", " "), display(value)])
    if scalars:
        tables.insert(0, Table(title=title, columns=["key", "value"], rows=scalars))
    return tables


@functools.cache
def readers() -> dict[str, Reader]:
    """Check name -> the reader of its record: `read` in the `view` module of every check package whose
    face states a record (gate.checks.<module>.view). Imported on first use: a view imports this module."""
    return {
        face.CARD: importlib.import_module(f"{face.__name__}.view").read for face in FACES if face.EVIDENCE is not None
    }


def typed_evidence(check: str, evidence: Mapping[str, Any]) -> tuple[EvidenceRecord | None, str | None]:
    """A built-in check's evidence as its record, or None with a note saying which field did not validate."""
    record = EVIDENCE.get(check)
    if record is None or not evidence:
        return None, None
    try:
        return record.model_validate(evidence), None
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "evidence"
        return None, (
            f"{check}: evidence.{where}: {first['msg']} (not the {record.__name__} this gate reads; shown as tables)"
        )


def read_evidence(check: str, evidence: Mapping[str, Any]) -> EvidenceViews:
    views = EvidenceViews()
    record, problem = typed_evidence(check, evidence)
    if problem:
        views.notes.append(problem)
    if record is not None:
        readers()[check](record, views)
    rest = {k: v for k, v in evidence.items() if k not in views.consumed}
    if rest:
        views.tables.extend(generic_tables("Other evidence", rest))
    return views
