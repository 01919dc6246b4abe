"""Reading a check's evidence dict into report views, by shape rather than by check name.

A check that puts {"lengths", "max_abs_delta", ...} in its evidence gets the prefix-sweep plot,
whatever it is called; the keys consumed here are listed in docs/report-evidence.md. Anything
malformed degrades to a note and a plain table, never to an exception: a dossier must render
from any results.json, including one written by a newer or buggier check.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gate.report.divergence import TokenView, layer_plot, token_view
from gate.report.fmt import as_float, display, number
from gate.report.model import Diagnosis, Distribution, Download, KeyValue, SliceRow, Table
from gate.report.plots import (
    LatencyPlot,
    LivePlot,
    SweepPlot,
    distribution_plot,
    latency_plot,
    live_plot,
    slice_plot,
    sweep_plot,
)
from gate.report.words import BITWISE_COMPARISON, SWEEP_COMPARISON

SWEEP_KEYS = ("per_length", "lengths", "length", "max_abs_delta", "argmax_agree", "ties", "tie", "tolerance")
"""A sweep's series sit at the top level or under `per_length` (as gate's prefix-sweep writes them)."""
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
SLICE_KEYS = ("envelopes", "slices")
"""Envelope records (point, bound, threshold...) under `envelopes`, or under `slices` when those carry them."""
SERVING_KEYS = ("latency_samples", "live_bytes_over_time", "clocks")
"""Per-path latency samples and live bytes over time (plots), and per-clock ratio records (a table)."""
SERVING_CLOCKS = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("itl_s", "ITL"))
DIAGNOSIS_KEYS = ("profile", "likely_bug_class", "bug_class", "first_diverging_layer", "explanation")
MAX_CATEGORIES = 40
MAX_TABLE_ROWS = 50
FOLD_ABOVE = 40
"""A sweep table longer than this folds its passing runs (failing and boundary rows always stay)."""


@dataclass
class EvidenceViews:
    """What the evidence of one check turned into."""

    sweep: SweepPlot | None = None
    latency: LatencyPlot | None = None
    live: LivePlot | None = None
    slices: list[SliceRow] = field(default_factory=list)
    distribution: Distribution | None = None
    tables: list[Table] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sweep_facts: list[KeyValue] = field(default_factory=list)
    sweep_table: Table | None = None
    tokens: list[TokenView] = field(default_factory=list)
    downloads: list[Download] = field(default_factory=list)
    first_failing_length: float | None = None
    consumed: set[str] = field(default_factory=set)
    """Evidence keys a dedicated view showed; the rest become generic tables."""


def _floats(values: Any) -> list[float | None] | None:
    if not isinstance(values, list):
        return None
    return [as_float(v) for v in values]


def _bools(values: Any, size: int) -> list[bool | None]:
    if not isinstance(values, list) or len(values) != size:
        return [None] * size
    return [v if isinstance(v, bool) else None for v in values]


def _tie_lengths(ties: Any, lengths: list[float]) -> set[float]:
    """Ties as one flag per length, as the lengths at which the top-2 logits tied, or as records
    with a `length` (gate's prefix-sweep)."""
    if not isinstance(ties, list):
        return set()
    if ties and all(isinstance(t, bool) for t in ties):
        return {length for length, tied in zip(lengths, ties, strict=False) if tied}
    found = {as_float(t.get("length") if isinstance(t, Mapping) else t) for t in ties}
    return {t for t in found if t is not None}


def _tolerance(value: Any) -> float | None:
    """A number, or gate's {"atol", "rtol", "source"} (the line is drawn at atol)."""
    if isinstance(value, Mapping):
        return as_float(value.get("atol"))
    return as_float(value)


def _tolerance_words(value: Any) -> str | None:
    if not isinstance(value, Mapping) or as_float(value.get("atol")) is None:
        return None
    words = f"atol {number(float(value['atol']))}"
    if as_float(value.get("rtol")):
        words += f" + rtol {number(float(value['rtol']))}·|ref|"
    return words + (f" ({value['source']})" if value.get("source") else "")


def read_sweep(evidence: Mapping[str, Any], tolerance_hint: float | None, views: EvidenceViews) -> None:
    nested = evidence.get("per_length")
    series: Mapping[str, Any] = nested if isinstance(nested, Mapping) else evidence
    if not any(k in series for k in ("lengths", "length")) and "max_abs_delta" not in series:
        return
    where = "evidence.per_length" if series is nested else "evidence"
    lengths_raw = _floats(series.get("lengths", series.get("length")))
    deltas = _floats(series.get("max_abs_delta"))
    if lengths_raw is None or any(v is None for v in lengths_raw) or not lengths_raw:
        views.notes.append(f"prefix sweep: {where}.lengths is missing or not a list of numbers; no plot")
        return
    lengths = [float(v) for v in lengths_raw if v is not None]
    if deltas is None or len(deltas) != len(lengths):
        views.notes.append(
            f"prefix sweep: {where}.max_abs_delta is missing or does not match lengths; |Δlogit| not plotted"
        )
        deltas = [None] * len(lengths)
    agree = _bools(series.get("argmax_agree"), len(lengths))
    if "argmax_agree" not in series:
        views.notes.append(f"prefix sweep: {where}.argmax_agree is missing; argmax agreement not shown")
    tolerance = _tolerance(evidence.get("tolerance", series.get("tolerance")))
    if tolerance is None:
        tolerance = tolerance_hint
    ties = _tie_lengths(series.get("tie", series.get("ties")), lengths) | _tie_lengths(evidence.get("ties"), lengths)
    plot = sweep_plot(
        lengths, deltas, agree, ties, tolerance, _tolerance_words(evidence.get("tolerance")), _boundaries(evidence)
    )
    views.sweep = plot
    views.sweep_facts = _comparisons(evidence)
    views.consumed.update(k for k in SWEEP_KEYS if k != "ties")
    if not (isinstance(evidence.get("ties"), list) and any(isinstance(t, Mapping) for t in evidence["ties"])):
        views.consumed.add("ties")  # tie records (row, margin) stay visible as a table
    views.first_failing_length = plot.first_failure
    rows, failing = [], []
    for length, delta, ok in zip(lengths, deltas, agree, strict=True):
        over = delta is not None and tolerance is not None and not delta <= tolerance
        failing.append((ok is False and length not in ties) or over)
        rows.append(
            [
                number(length),
                number(delta) if delta is not None else "—",
                {True: "yes", False: "NO", None: "—"}[ok],
                "tie" if length in ties else ("over tolerance" if over else ""),
            ]
        )
    edges = set(_boundaries(evidence))
    shown, folded = fold_rows(rows, failing, pinned=[length in edges for length in lengths])
    views.sweep_table = Table(
        title="Prefix sweep",
        columns=["prefix length", "max |Δlogit| vs the full pass", "argmax agrees", ""],
        rows=shown,
        note=(
            f"{folded} of {len(rows)} rows folded (all passing); every failing length, every layout "
            "boundary and the lengths either side of each change are shown (all rows: results.json)"
            if folded
            else ""
        ),
        folded=folded,
    )


def fold_rows(
    rows: list[list[str]], failing: list[bool], pinned: list[bool] | None = None, keep: int = FOLD_ABOVE
) -> tuple[list[list[str]], int]:
    """Rows with long passing runs folded into one marker row: the first and last row, every
    failing row, the rows either side of each pass/fail change and every `pinned` row (layout
    boundaries) stay. Returns (rows, how many were folded)."""
    if len(rows) <= keep:
        return rows, 0
    kept = {0, len(rows) - 1} | {i for i, pin in enumerate(pinned or []) if pin}
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


def _boundaries(evidence: Mapping[str, Any]) -> list[float]:
    """The candidate's layout boundaries gate's prefix-sweep records (all, else the first few)."""
    raw = evidence.get("boundaries")
    if not isinstance(raw, Mapping):
        return []
    values = raw.get("lengths", raw.get("first"))
    found = _floats(values) or []
    return [v for v in found if v is not None]


def _comparisons(evidence: Mapping[str, Any]) -> list[KeyValue]:
    """Which comparison each |Δ| in the sweep is against, in words."""
    facts = [KeyValue("max |Δlogit| in the plot", SWEEP_COMPARISON)]
    bitwise = evidence.get("bitwise")
    if isinstance(bitwise, Mapping):
        against = BITWISE_COMPARISON.format(path=display(bitwise.get("reference_path", "the reference")))
        same = display(bitwise.get("lengths_bit_identical"))
        facts.append(KeyValue("bit identity", f"{against}: {same} of {display(bitwise.get('lengths'))} lengths"))
        if bitwise.get("max_abs_delta_vs_cached") is not None:
            facts.append(
                KeyValue("max |Δlogit| against that cached schedule", display(bitwise["max_abs_delta_vs_cached"]))
            )
    return facts


def read_tokens(evidence: Mapping[str, Any], views: EvidenceViews) -> None:
    """Two greedy continuations that diverge: gate's greedy-parity (`runs[].first_divergence`)
    or spec-greedy (`example.target` / `example.candidate`)."""
    runs = evidence.get("runs")
    if isinstance(runs, list):
        for run in runs:
            first = run.get("first_divergence") if isinstance(run, Mapping) else None
            if not isinstance(first, Mapping) or not isinstance(first.get("reference_tokens"), list):
                continue
            start = int(as_float(first.get("tokens_from")) or 0)
            tie = " (within the tie band: not a bug on its own)" if first.get("tie") else ""
            view = token_view(
                f"prompt length {display(run.get('prompt_len'))}, row {display(first.get('row'))}: "
                f"continuations part at step {display(first.get('step'))}{tie}",
                first["reference_tokens"],
                first.get("candidate_tokens") or [],
                start,
                note="token ids; step 0 is the first generated token",
            )
            if view is not None:
                views.tokens.append(view)
    example = evidence.get("example")
    if isinstance(example, Mapping) and isinstance(example.get("target"), list):
        view = token_view(
            "target greedy tokens against the speculative candidate's",
            example["target"],
            candidate if isinstance(candidate := example.get("candidate"), list) else [],
            note="token ids",
        )
        if view is not None:
            views.tokens.append(view)
            views.consumed.add("example")


def read_samples(evidence: Mapping[str, Any], views: EvidenceViews) -> None:
    """Per-slice sample records (gate's quality-slices `samples`) become JSONL downloads."""
    samples = evidence.get("samples")
    if not isinstance(samples, Mapping):
        return
    for name, records in samples.items():
        if not isinstance(records, list) or not all(isinstance(r, Mapping) for r in records):
            continue
        flipped = sum(1 for r in records if r.get("flipped"))
        views.downloads.append(
            Download(
                file=f"samples/{_file_safe(str(name))}.jsonl",
                label=f"{name}: {len(records)} samples, {flipped} flipped",
                lines=[json.dumps(r, sort_keys=True, ensure_ascii=False, default=str) for r in records],
            )
        )
    views.consumed.add("samples")


def _file_safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "slice"


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


def _is_envelope(item: Mapping[str, Any]) -> bool:
    return any(k in item for k in ("point", "bound", "threshold"))


def read_slices(evidence: Mapping[str, Any], views: EvidenceViews) -> None:
    """Envelope records from `envelopes` (gate's quality-slices) or from `slices` when they carry them."""
    present = [k for k in SLICE_KEYS if k in evidence]
    if not present:
        return
    key, items = next(
        ((k, _slice_items(evidence[k])) for k in present if any(_is_envelope(v) for _, v in _slice_items(evidence[k]))),
        (None, []),
    )
    if key is None:
        if not any(isinstance(evidence[k], (list, Mapping)) for k in present):
            views.notes.append(f"quality slices: evidence.{present[0]} is neither a list of records nor a mapping")
        return
    views.consumed.add(key)
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
            and all(v is None or math.isfinite(v) for v in (point, bound, threshold))
        ):
            plot = slice_plot(point, bound, threshold, interval, passed)
        n = display(item.get("n"))
        if item.get("n_required") is not None:
            n += f" (needs {display(item.get('n_required'))})"
        confidence = as_float(item.get("confidence"))
        detail = " ".join(
            part
            for part in (
                f"{confidence:.0%} one-sided bound." if confidence is not None else "",
                str(item.get("reason") or ""),
            )
            if part
        )
        metric = display(item.get("metric", ""))
        views.slices.append(
            SliceRow(
                slice=name,
                metric=metric,
                point=display(point),
                bound=display(bound),
                comparator=display(item.get("comparator", "")),
                threshold=display(item.get("threshold")),
                n=n,
                passed=passed,
                held={True: "yes", False: "NO", None: "?"}[passed],
                tone={True: "good", False: "bad", None: "muted"}[passed],
                plot=plot,
                detail=detail,
            )
        )
        worst = item.get("worst")
        if isinstance(worst, list) and worst and all(isinstance(w, Mapping) for w in worst):
            table = generic_tables("Worst samples", {f"{name} / {metric}": worst})[-1]
            views.tables.append(table)


def read_diagnosis(diagnosis: Mapping[str, Any] | None) -> tuple[Diagnosis | None, list[Table]]:
    """The diagnosis box, plus tables for its per-layer records (gate.checks._diagnosis `layers`)."""
    if not diagnosis:
        return None, []

    def text(*keys: str) -> str | None:
        for key in keys:
            if diagnosis.get(key) not in (None, ""):
                return display(diagnosis[key], limit=2000)
        return None

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
    box = Diagnosis(
        layers=layer_plot(layers, diagnosis.get("traced_prefix_len")) if isinstance(layers, list) else None,
        profile=text("profile"),
        likely_bug_class=text("likely_bug_class", "bug_class"),
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


def _ratio_words(row: Mapping[str, Any]) -> str:
    ratio, low, high = (as_float(row.get(k)) for k in ("ratio", "low", "high"))
    if ratio is None:
        return "—"
    if low is None or high is None:
        return f"x{number(ratio)}"
    return f"x{number(ratio)} [{number(low)}, {number(high)}]"


def read_serving(evidence: Mapping[str, Any], views: EvidenceViews) -> None:
    """Latency distributions and live bytes over time of both paths, and the table of clocks."""
    latency = evidence.get("latency_samples")
    if isinstance(latency, Mapping):
        series = []
        for key, label in SERVING_CLOCKS:
            for kind in ("reference", "candidate"):
                values = _floats((latency.get(kind) or {}).get(key) if isinstance(latency.get(kind), Mapping) else None)
                if values:
                    series.append((label, kind, [v for v in values if v is not None]))
        views.latency = latency_plot(series)
        views.consumed.add("latency_samples")
    live = evidence.get("live_bytes_over_time")
    if isinstance(live, Mapping):
        panels = []
        for kind in ("reference", "candidate"):
            item = live.get(kind)
            if not isinstance(item, Mapping):
                continue
            times, held = _floats(item.get("t_s")), _floats(item.get("live_bytes"))
            theory = _floats(item.get("theory_bytes"))
            if times and held and None not in times and None not in held:
                clean_theory = [t for t in theory if t is not None] if theory else None
                panels.append(
                    (kind, [t for t in times if t is not None], [b for b in held if b is not None], clean_theory)
                )
        views.live = live_plot(panels)
        if views.live is None:
            views.notes.append("live_bytes_over_time: no usable series")
        views.consumed.add("live_bytes_over_time")
    clocks = evidence.get("clocks")
    if isinstance(clocks, list) and clocks and all(isinstance(r, Mapping) for r in clocks):
        rows = [
            [
                str(r.get("clock", "")),
                display(r.get("reference")),
                display(r.get("candidate")),
                _ratio_words(r),
                str(r.get("budget", "")),
                str(r.get("verdict", "")),
            ]
            for r in clocks[:MAX_TABLE_ROWS]
        ]
        views.tables.insert(
            0,
            Table(
                title="Four clocks",
                columns=["clock", "reference", "candidate", "candidate/reference [interval]", "budget", "verdict"],
                rows=rows,
            ),
        )
        views.consumed.add("clocks")


def read_evidence(evidence: Mapping[str, Any], tolerance_hint: float | None) -> EvidenceViews:
    views = EvidenceViews()
    read_sweep(evidence, tolerance_hint, views)
    read_serving(evidence, views)
    read_distribution(evidence, views)
    read_slices(evidence, views)
    read_tokens(evidence, views)
    read_samples(evidence, views)
    if views.distribution is not None:
        views.consumed.update((*DISTRIBUTION_KEYS, "distribution"))
    rest = {k: v for k, v in evidence.items() if k not in views.consumed}
    if rest:
        views.tables.extend(generic_tables("Other evidence", rest))
    return views
