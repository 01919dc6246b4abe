"""A check's evidence into report views: a built-in check's evidence is validated into its typed
record (gate.core.evidence.EVIDENCE) and read by field; any other evidence becomes generic tables.

Evidence that does not validate (a results.json from another gate version, a hand-edited file)
degrades to a note naming the field and the same generic tables, never to an exception: a dossier
must render from any results.json. docs/report-evidence.md says what each view reads.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from gate.core.evidence import (
    EVIDENCE,
    Bitwise,
    CacheIdentityEvidence,
    ConversationsEvidence,
    DistributionEvidence,
    EvidenceRecord,
    GreedyEvidence,
    HashCollisionEvidence,
    InvalidationEvidence,
    PrefixReuseEvidence,
    ScheduleFuzzEvidence,
    ServedRequest,
    ServingEvidence,
    SlicesEvidence,
    SpecGreedyEvidence,
    StoreEvidence,
    SweepEvidence,
    TenantIsolationEvidence,
    ToleranceRecord,
)
from gate.core.hazards import HAZARDS, read_hazard
from gate.report.divergence import TokenView, layer_plot, token_view
from gate.report.fmt import display, number
from gate.report.model import Diagnosis, Distribution, Download, HazardView, KeyValue, Reproducer, SliceRow, Table
from gate.report.perf_plots import LatencyPlot, LivePlot, latency_plot, live_plot
from gate.report.plots import SweepPlot, distribution_plot, slice_plot, sweep_plot
from gate.report.words import BITWISE_COMPARISON, SWEEP_COMPARISON

SERVING_CLOCKS = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("itl_s", "ITL"))
DIAGNOSIS_KEYS = ("profile", "bug_class", "first_diverging_layer", "explanation", "hazard")
"""Diagnosis keys the box shows (gate.checks._diagnosis writes them); any other key is listed below it."""
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
    reproducer: Reproducer | None = None
    first_failing_length: float | None = None
    consumed: set[str] = field(default_factory=set)
    """Evidence keys a dedicated view showed; the rest become generic tables."""

    def table(self, title: str, columns: list[str], rows: list[list[str]], note: str = "") -> None:
        """Show `rows` as a table of their own."""
        self.tables.append(Table(title=title, columns=columns, rows=rows, note=note))


def _tolerance_words(tolerance: ToleranceRecord) -> str:
    words = f"atol {number(tolerance.atol)}"
    if tolerance.rtol:
        words += f" + rtol {number(tolerance.rtol)}·|ref|"
    return words + (f" ({tolerance.source})" if tolerance.source else "")


def read_sweep(evidence: SweepEvidence, views: EvidenceViews) -> None:
    """The |Δlogit| plot against prefix length, and its table with long passing runs folded."""
    series = evidence.per_length  # one entry per length in each series (validated)
    lengths = [float(x) for x in series.length]
    deltas, agree = series.max_abs_delta, series.argmax_agree
    ties = {length for length, tied in zip(lengths, series.tie, strict=True) if tied}
    ties |= {float(t.length) for t in evidence.ties}
    tolerance = evidence.tolerance.atol
    edges = {float(x) for x in evidence.boundaries.lengths}
    plot = sweep_plot(lengths, deltas, agree, ties, tolerance, _tolerance_words(evidence.tolerance), sorted(edges))
    views.sweep = plot
    views.sweep_facts = _comparisons(evidence.bitwise)
    views.consumed.update(("per_length", "tolerance"))  # tie and failure records stay visible as tables
    views.first_failing_length = plot.first_failure
    rows, failing = [], []
    for length, delta, ok in zip(lengths, deltas, agree, strict=True):
        over = not delta <= tolerance
        failing.append((not ok and length not in ties) or over)
        rows.append(
            [
                number(length),
                number(delta),
                "yes" if ok else "NO",
                "tie" if length in ties else ("over tolerance" if over else ""),
            ]
        )
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


def _comparisons(bitwise: Bitwise | None) -> list[KeyValue]:
    """Which comparison each |Δ| in the sweep is against, in words."""
    facts = [KeyValue("max |Δlogit| in the plot", SWEEP_COMPARISON)]
    if bitwise is not None:
        against = BITWISE_COMPARISON.format(path=display(bitwise.reference_path))
        same = f"{bitwise.lengths_bit_identical} of {bitwise.lengths} lengths"
        facts.append(KeyValue("bit identity", f"{against}: {same}"))
        facts.append(KeyValue("max |Δlogit| against that cached schedule", display(bitwise.max_abs_delta_vs_cached)))
    return facts


def read_greedy(evidence: GreedyEvidence, views: EvidenceViews) -> None:
    """Each diverging run's two continuations, token by token (the runs also stay as a table)."""
    for run in evidence.runs:
        first = run.first_divergence
        if first is None:
            continue
        tie = " (within the tie band: not a bug on its own)" if first.tie else ""
        view = token_view(
            f"prompt length {run.prompt_len}, row {first.row}: continuations part at step {first.step}{tie}",
            first.reference_tokens,
            first.candidate_tokens,
            first.tokens_from,
            note="token ids; step 0 is the first generated token",
        )
        if view is not None:
            views.tokens.append(view)


def read_spec_greedy(evidence: SpecGreedyEvidence, views: EvidenceViews) -> None:
    view = token_view(
        "target greedy tokens against the speculative candidate's",
        evidence.example.target,
        evidence.example.candidate,
        note="token ids",
    )
    if view is not None:
        views.tokens.append(view)
        views.consumed.add("example")


def read_schedule_fuzz(evidence: ScheduleFuzzEvidence, views: EvidenceViews) -> None:
    """The minimal failing schedule: its steps, the failure and the snippet that replays it."""
    found = evidence.reproducer
    if found is None:
        return
    after = found.found_after_schedules
    note = f"found after {after} schedule(s), then shrunk" if after else None
    if not found.reproduces_on_replay:
        note = (note + "; " if note else "") + "it did not fail again when replayed alone (state outlived the sessions)"
    views.reproducer = Reproducer(found.schedule, found.failure, found.snippet, note)
    views.consumed.add("reproducer")


def read_samples(samples: Mapping[str, list[dict[str, Any]]], views: EvidenceViews) -> None:
    """Per-slice sample records become JSONL downloads."""
    for name, records in samples.items():
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


def read_distribution(evidence: DistributionEvidence, views: EvidenceViews) -> None:
    """Observed against expected shares per continuation, and the test's numbers."""
    views.consumed.update(("categories", "observed", "expected", "statistic", "dof", "p_value", "alpha", "n_samples"))
    facts = [
        KeyValue("statistic", display(evidence.statistic)),
        KeyValue("degrees of freedom", display(evidence.dof)),
        KeyValue("p-value", display(evidence.p_value)),
        KeyValue("α", display(evidence.alpha)),
        KeyValue("samples", display(evidence.n_samples)),
    ]
    # one observed and one expected non-negative count per category (validated)
    rows = sorted(zip(evidence.categories, evidence.observed, evidence.expected, strict=True), key=lambda r: -r[2])
    note = ""
    if len(rows) > MAX_CATEGORIES:
        rest = rows[MAX_CATEGORIES - 1 :]
        note = f"{len(rest)} least expected categories folded into 'other'"
        rows = [*rows[: MAX_CATEGORIES - 1], ("other", sum(r[1] for r in rest), sum(r[2] for r in rest))]
    plot = distribution_plot([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
    views.distribution = Distribution(
        plot=plot, facts=facts, rows=[[name, number(o), number(e)] for name, o, e in rows], note=note
    )


def read_slices(evidence: SlicesEvidence, views: EvidenceViews) -> None:
    """Each envelope as a strip (threshold, point, bound) with its worst samples; the samples as downloads."""
    views.consumed.add("envelopes")
    for env in evidence.envelopes:
        threshold = float(env.threshold)
        plot = None
        if all(math.isfinite(v) for v in (env.point, env.bound, threshold)):
            plot = slice_plot(env.point, env.bound, threshold, None, env.passed)
        detail = " ".join(part for part in (f"{env.confidence:.0%} one-sided bound.", env.reason) if part)
        views.slices.append(
            SliceRow(
                slice=env.slice,
                metric=env.metric,
                point=display(env.point),
                bound=display(env.bound),
                comparator=env.comparator,
                threshold=env.threshold,
                n=f"{env.n} of {env.planned} (settled)" if env.planned else f"{env.n} (needs {env.n_required})",
                passed=env.passed,
                held="yes" if env.passed else "NO",
                tone="good" if env.passed else "bad",
                plot=plot,
                detail=detail,
                confidence=f"{env.confidence:.0%}",
            )
        )
        if env.worst:
            views.tables.append(generic_tables("Worst samples", {f"{env.slice} / {env.metric}": env.worst})[-1])
    read_samples(evidence.samples, views)


def _requests_table(requests: list[ServedRequest], views: EvidenceViews) -> None:
    """The reuse ledger: per request, what a correct cache may reuse against what was reused."""
    rows = []
    for r in requests[:MAX_TABLE_ROWS]:
        reuse = "BEYOND entitlement" if r.reused > r.entitled else ("below" if r.reused < r.entitled else "")
        counts = map(str, (r.prompt_tokens, r.entitled, r.reused))
        rows.append(
            [
                r.request,
                *counts,
                reuse,
                str(r.hit_blocks),
                str(r.computed),
                display(r.max_abs_delta),
                str(r.argmax_flips),
            ]
        )
    if rows:
        views.table(
            title="Requests: reuse against entitlement, outputs against a full recompute",
            columns=[
                "request",
                "prompt",
                "entitled",
                "reused",
                "",
                "hit blocks",
                "computed",
                "max |Δlogit|",
                "flips",
            ],
            rows=rows,
            note=f"first {MAX_TABLE_ROWS} of {len(requests)} rows" if len(requests) > MAX_TABLE_ROWS else "",
        )
    views.consumed.add("requests")


def _store_findings(evidence: StoreEvidence, views: EvidenceViews) -> None:
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


def read_prefix_reuse(evidence: PrefixReuseEvidence, views: EvidenceViews) -> None:
    _requests_table(evidence.requests, views)
    _store_findings(evidence, views)


def read_cache_identity(evidence: CacheIdentityEvidence, views: EvidenceViews) -> None:
    """One row per identity field: the variant request's reuse, which must be none it is not entitled to."""
    rows = []
    for name, probe in evidence.fields.items():
        reuse = "BEYOND entitlement" if probe.reused > probe.entitled else ""
        rows.append(
            [
                name,
                str(probe.prompt_tokens),
                str(probe.entitled),
                str(probe.reused),
                reuse,
                display(probe.repeat_reused),
                display(probe.computation_differs_by),
                display(probe.max_abs_delta),
            ]
        )
    rows += [[name, "", "", "", "not varied (unproven)", "", "", ""] for name in evidence.unverified]
    if evidence.identity_example is not None:  # the fixed example: B after A reuses exactly positions 0-1
        example = evidence.identity_example
        spans = ", ".join(f"{start}-{end - 1}" for start, end in example.spans) or "none"
        rows.append(
            [
                "identity example (B after A)",
                str(example.prompt_tokens),
                str(example.entitled),
                str(example.reused),
                f"positions {spans}",
                "",
                "",
                display(example.max_abs_delta),
            ]
        )
    views.table(
        title="Identity fields: a request that differs in one field only",
        columns=[
            "field",
            "prompt",
            "entitled",
            "reused",
            "",
            "repeat reused",
            "computation differs by",
            "max |Δlogit|",
        ],
        rows=rows,
        note="a field's variant may reuse only what it is entitled to; its repeat must hit (the cache is on); "
        "'computation differs by' shows the field changes the output"
        + ("; the identity the store reports was compared with its key" if evidence.identity_report_checked else ""),
    )
    views.consumed.update(("fields", "unverified", "identity_report_checked", "identity_example"))
    _requests_table(evidence.requests, views)
    _store_findings(evidence, views)


def read_store_requests(evidence: StoreEvidence, views: EvidenceViews) -> None:
    """tenant-isolation and hash-collision: the requests and what could not be asserted."""
    _requests_table(evidence.requests, views)
    _store_findings(evidence, views)


def _reasons(dropped: Mapping[str, int]) -> str:
    return "; ".join(f"{count} blocks: {reason}" for reason, count in dropped.items()) or "none"


def read_invalidation(evidence: InvalidationEvidence, views: EvidenceViews) -> None:
    """Updates and the restart as their own tables, then the requests."""
    if evidence.updates:
        views.table(
            title="Updates: reuse before, right after and after again",
            columns=["update", "computation changed by", "hit before", "reused right after", "hit after"],
            rows=[
                [
                    f"{name} weights",
                    display(u.computation_changed_by),
                    str(u.hit_before),
                    str(u.reused_after),
                    str(u.hit_after),
                ]
                for name, u in evidence.updates.items()
            ],
            note="right after an update nothing may be reused (entries of the old weights)",
        )
    if evidence.restart is not None:
        restart = evidence.restart
        views.table(
            title=f"Restart from a saved cache ({restart.blocks_saved} blocks saved)",
            columns=["restarted on", "admitted", "refused", "served"],
            rows=[
                [
                    "another checkpoint (must admit and serve nothing)",
                    str(restart.other_checkpoint.admitted),
                    _reasons(restart.other_checkpoint.dropped),
                    display(restart.other_checkpoint.consumed),
                ],
                [
                    "the same checkpoint (must admit and reuse)",
                    str(restart.same_checkpoint.admitted),
                    _reasons(restart.same_checkpoint.dropped),
                    display(restart.same_checkpoint.reused_tokens),
                ],
            ],
        )
    views.consumed.update(("updates", "restart"))
    _requests_table(evidence.requests, views)
    _store_findings(evidence, views)


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


def read_serving(evidence: ServingEvidence, views: EvidenceViews) -> None:
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
        [
            r.clock,
            display(r.reference),
            display(r.candidate),
            "—"
            if r.ratio is None
            else f"x{number(r.ratio)}"
            + (f" [{number(r.low)}, {number(r.high)}]" if r.low is not None and r.high is not None else ""),
            r.budget,
            r.verdict,
        ]
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


def read_conversations(evidence: ConversationsEvidence, views: EvidenceViews) -> None:
    """The failing replies with the request each is named with, then every request of the workload."""
    if evidence.failures:
        views.table(
            title="Replies that differ from the reference alone",
            columns=["request", "named with", "why", "failure"],
            rows=[[str(f.request), display(f.other_request), f.how, f.message] for f in evidence.failures],
        )
    if evidence.mechanisms:
        views.table(
            title="The candidate's reuse mechanisms: aimed at and reached, by the engine's own counters",
            columns=["mechanism", "aimed at", "lengths", "requests", "reached", "counted / why not"],
            rows=[
                [
                    m.mechanism,
                    str(m.aimed),
                    ", ".join(map(str, m.lengths)),
                    str(m.requests),
                    str(m.reached),
                    m.evidence,
                ]
                for m in evidence.mechanisms
            ],
            note="gate/checks/_mechanisms.py; the server log's counters: "
            + (
                ", ".join(f"{k} {v}" for k, v in evidence.engine_log_counters.items())
                if evidence.engine_log_counters
                else "not stated by its log"
            ),
        )
    views.table(
        title=(
            f"{len(evidence.requests)} requests: {evidence.conversations} conversations over {evidence.tenants} "
            f"tenants' {evidence.system_prefix}-token system prefixes, up to {evidence.max_concurrent} at once"
        ),
        columns=[
            "request",
            "conversation",
            "turn",
            "round",
            "kind",
            "prompt",
            "cached",
            "tokens match",
            "max |Δlogprob|",
        ],
        rows=[
            [
                str(r.id),
                str(r.conversation),
                str(r.turn),
                str(r.round),
                r.kind,
                str(r.prompt_tokens),
                display(r.cached_tokens),
                str(r.tokens_match),
                number(r.max_abs_dlogprob),
            ]
            for r in evidence.requests
        ],
        note="each reply against the reference's answer to the same prompt sent alone",
    )
    views.consumed.update({"requests", "failures", "mechanisms", "engine_log_counters"})


READERS: dict[type[EvidenceRecord], Callable[[Any, EvidenceViews], None]] = {
    SweepEvidence: read_sweep,
    GreedyEvidence: read_greedy,
    SpecGreedyEvidence: read_spec_greedy,
    DistributionEvidence: read_distribution,
    SlicesEvidence: read_slices,
    PrefixReuseEvidence: read_prefix_reuse,
    CacheIdentityEvidence: read_cache_identity,
    TenantIsolationEvidence: read_store_requests,
    HashCollisionEvidence: read_store_requests,
    InvalidationEvidence: read_invalidation,
    ServingEvidence: read_serving,
    ScheduleFuzzEvidence: read_schedule_fuzz,
    ConversationsEvidence: read_conversations,
}
"""The view each evidence record becomes."""


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
        READERS[type(record)](record, views)
    rest = {k: v for k, v in evidence.items() if k not in views.consumed}
    if rest:
        views.tables.extend(generic_tables("Other evidence", rest))
    return views
