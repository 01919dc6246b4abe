"""Reading a check's evidence dict into report views, by shape rather than by check name.

A check that puts {"lengths", "max_abs_delta", ...} in its evidence gets the prefix-sweep plot,
whatever it is called; the keys consumed here are listed in docs/report-evidence.md. Anything
malformed degrades to a note and a plain table, never to an exception: a dossier must render
from any results.json, including one written by a newer or buggier check.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gate.report.fmt import as_float, display, number
from gate.report.model import Diagnosis, Distribution, KeyValue, SliceRow, Table
from gate.report.plots import SweepPlot, distribution_plot, slice_plot, sweep_plot

SWEEP_KEYS = ("lengths", "max_abs_delta", "argmax_agree", "ties", "tolerance")
DISTRIBUTION_KEYS = (
    "categories",
    "observed",
    "expected",
    "statistic",
    "dof",
    "p_value",
    "test",
    "alpha",
    "samples",
    "n_samples",
)
SLICE_KEYS = ("slices",)
DIAGNOSIS_KEYS = ("profile", "likely_bug_class", "first_diverging_layer", "explanation")
MAX_CATEGORIES = 40
MAX_TABLE_ROWS = 50


@dataclass
class EvidenceViews:
    """What the evidence of one check turned into."""

    sweep: SweepPlot | None = None
    slices: list[SliceRow] = field(default_factory=list)
    distribution: Distribution | None = None
    tables: list[Table] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    first_failing_length: float | None = None


def _floats(values: Any) -> list[float | None] | None:
    if not isinstance(values, list):
        return None
    return [as_float(v) for v in values]


def _bools(values: Any, size: int) -> list[bool | None]:
    if not isinstance(values, list) or len(values) != size:
        return [None] * size
    return [v if isinstance(v, bool) else None for v in values]


def _tie_lengths(ties: Any, lengths: list[float]) -> set[float]:
    """`ties` is either one flag per length or the list of lengths at which the top-2 logits tied."""
    if not isinstance(ties, list):
        return set()
    if ties and all(isinstance(t, bool) for t in ties):
        return {length for length, tied in zip(lengths, ties, strict=False) if tied}
    found = {as_float(t) for t in ties}
    return {t for t in found if t is not None}


def read_sweep(evidence: Mapping[str, Any], tolerance_hint: float | None, views: EvidenceViews) -> None:
    if "lengths" not in evidence and "max_abs_delta" not in evidence:
        return
    lengths_raw = _floats(evidence.get("lengths"))
    deltas = _floats(evidence.get("max_abs_delta"))
    if lengths_raw is None or any(v is None for v in lengths_raw) or not lengths_raw:
        views.notes.append("prefix sweep: evidence.lengths is missing or not a list of numbers; no plot")
        return
    lengths = [float(v) for v in lengths_raw if v is not None]
    if deltas is None or len(deltas) != len(lengths):
        views.notes.append(
            "prefix sweep: evidence.max_abs_delta is missing or does not match lengths; |Δlogit| not plotted"
        )
        deltas = [None] * len(lengths)
    agree = _bools(evidence.get("argmax_agree"), len(lengths))
    if "argmax_agree" not in evidence:
        views.notes.append("prefix sweep: evidence.argmax_agree is missing; argmax agreement not shown")
    tolerance = as_float(evidence.get("tolerance"))
    if tolerance is None:
        tolerance = tolerance_hint
    plot = sweep_plot(lengths, deltas, agree, _tie_lengths(evidence.get("ties"), lengths), tolerance)
    views.sweep = plot
    views.first_failing_length = _first_failure(lengths, deltas, agree, tolerance)
    rows = []
    ties = _tie_lengths(evidence.get("ties"), lengths)
    for length, delta, ok in zip(lengths, deltas, agree, strict=True):
        rows.append(
            [
                number(length),
                number(delta) if delta is not None else "—",
                {True: "yes", False: "NO", None: "—"}[ok],
                "tie" if length in ties else "",
            ]
        )
    views.tables.append(
        Table(
            title="Prefix sweep",
            columns=["prefix length", "max |Δlogit|", "argmax agrees", ""],
            rows=rows[:MAX_TABLE_ROWS],
        )
    )


def _first_failure(
    lengths: list[float], deltas: list[float | None], agree: list[bool | None], tolerance: float | None
) -> float | None:
    for length, delta, ok in zip(lengths, deltas, agree, strict=True):
        over = delta is not None and tolerance is not None and not delta <= tolerance
        if ok is False or over:
            return length
    return None


def read_distribution(evidence: Mapping[str, Any], views: EvidenceViews) -> None:
    nested = evidence.get("distribution")
    source: Mapping[str, Any] = nested if isinstance(nested, Mapping) else evidence
    if "categories" not in source and "observed" not in source:
        return
    categories = source.get("categories")
    observed = _floats(source.get("observed"))
    expected = _floats(source.get("expected"))
    facts = [
        KeyValue(label, display(source[key]))
        for key, label in (
            ("test", "test"),
            ("statistic", "statistic"),
            ("dof", "degrees of freedom"),
            ("p_value", "p-value"),
            ("alpha", "α"),
            ("samples", "samples"),
            ("n_samples", "samples"),
        )
        if key in source
    ]
    if (
        not isinstance(categories, list)
        or observed is None
        or expected is None
        or not (len(categories) == len(observed) == len(expected))
        or not categories
        or any(v is None or v < 0 for v in [*observed, *expected])
    ):
        views.notes.append(
            "distribution: evidence needs equal-length lists categories, observed, expected "
            "of non-negative numbers; no plot"
        )
        views.distribution = Distribution(plot=None, facts=facts, rows=[], note="")
        return
    rows = sorted(
        zip(
            [str(c) for c in categories],
            [float(v or 0) for v in observed],
            [float(v or 0) for v in expected],
            strict=True,
        ),
        key=lambda r: -r[2],
    )
    note = ""
    if len(rows) > MAX_CATEGORIES:
        rest = rows[MAX_CATEGORIES - 1 :]
        note = f"{len(rest)} least expected categories folded into 'other'"
        rows = [*rows[: MAX_CATEGORIES - 1], ("other", sum(r[1] for r in rest), sum(r[2] for r in rest))]
    plot = distribution_plot([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
    views.distribution = Distribution(
        plot=plot, facts=facts, rows=[[name, number(o), number(e)] for name, o, e in rows], note=note
    )


def _slice_items(raw: Any) -> list[tuple[str, Mapping[str, Any]]]:
    if isinstance(raw, Mapping):
        return [(str(name), value) for name, value in raw.items() if isinstance(value, Mapping)]
    if isinstance(raw, list):
        return [
            (str(item.get("slice", item.get("name", f"slice {i + 1}"))), item)
            for i, item in enumerate(raw)
            if isinstance(item, Mapping)
        ]
    return []


def read_slices(evidence: Mapping[str, Any], views: EvidenceViews) -> None:
    if "slices" not in evidence:
        return
    items = _slice_items(evidence["slices"])
    if not items:
        views.notes.append("quality slices: evidence.slices is neither a list of slice records nor a mapping")
        return
    for name, item in items:
        point, bound, threshold = (as_float(item.get(k)) for k in ("point", "bound", "threshold"))
        interval = None
        ci = item.get("ci")
        if isinstance(ci, list) and len(ci) == 2 and None not in (lo_hi := [as_float(v) for v in ci]):
            interval = (float(lo_hi[0] or 0), float(lo_hi[1] or 0))
        passed = item.get("passed") if isinstance(item.get("passed"), bool) else None
        plot = None
        if (
            point is not None
            and threshold is not None
            and all(v is None or abs(v) != float("inf") for v in (point, bound, threshold))
        ):
            plot = slice_plot(point, bound, threshold, interval, passed)
        views.slices.append(
            SliceRow(
                slice=name,
                metric=display(item.get("metric", "")),
                point=display(point),
                bound=display(bound),
                comparator=display(item.get("comparator", "")),
                threshold=display(item.get("threshold")),
                n=display(item.get("n")),
                passed=passed,
                held={True: "yes", False: "NO", None: "?"}[passed],
                tone={True: "good", False: "bad", None: "muted"}[passed],
                plot=plot,
            )
        )


def read_diagnosis(diagnosis: Mapping[str, Any] | None) -> Diagnosis | None:
    if not diagnosis:
        return None

    def text(key: str) -> str | None:
        return display(diagnosis[key], limit=2000) if diagnosis.get(key) not in (None, "") else None

    other = [
        KeyValue(k.replace("_", " "), display(v, limit=600)) for k, v in diagnosis.items() if k not in DIAGNOSIS_KEYS
    ]
    return Diagnosis(
        profile=text("profile"),
        likely_bug_class=text("likely_bug_class"),
        first_diverging_layer=text("first_diverging_layer"),
        explanation=text("explanation"),
        other=other,
    )


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
        elif isinstance(value, (dict, list)) and len(json.dumps(value, default=str)) > 300:
            tables.append(Table(title=f"{title}: {key}", columns=["json"], rows=[[display(value, limit=2000)]]))
        else:
            scalars.append([key.replace("_", " "), display(value)])
    if scalars:
        tables.insert(0, Table(title=title, columns=["key", "value"], rows=scalars))
    return tables


def read_evidence(evidence: Mapping[str, Any], tolerance_hint: float | None) -> EvidenceViews:
    views = EvidenceViews()
    read_sweep(evidence, tolerance_hint, views)
    read_distribution(evidence, views)
    read_slices(evidence, views)
    consumed: set[str] = set()
    if views.sweep is not None or "lengths" in evidence:
        consumed.update(SWEEP_KEYS)
    if views.distribution is not None:
        consumed.update((*DISTRIBUTION_KEYS, "distribution"))
    if views.slices:
        consumed.update(SLICE_KEYS)
    rest = {k: v for k, v in evidence.items() if k not in consumed}
    if rest:
        views.tables.extend(generic_tables("Other evidence", rest))
    return views
