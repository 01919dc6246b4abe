"""The report data: everything the dossier templates show, already decided and formatted.

`build_report(result)` fills these from a GateResult; the templates only loop and branch over them.
Numbers arrive as display strings (gate.report.fmt) so HTML, Markdown and JUnit agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gate.report.divergence import LayerPlot, TokenView
from gate.report.perf_plots import LatencyPlot, LivePlot
from gate.report.plots import DistributionPlot, SlicePlot, SweepPlot

Tone = str
"""One of "good", "bad", "warn", "muted", "await", "unproven" (amber: power not shown, never the
pass colour), "waived" (held except for signed waivers): the colour a template gives a status."""


@dataclass(frozen=True)
class KeyValue:
    """One labelled value in a definition list or a two-column table."""

    key: str
    value: str


@dataclass(frozen=True)
class Reproducer:
    """A minimal failing schedule (schedule-fuzz's `reproducer`) and the Python that replays it."""

    steps: list[str]
    failure: str
    snippet: str
    note: str | None = None


@dataclass(frozen=True)
class Banner:
    """The verdict banner at the top of every output."""

    verdict: str
    """pass, fail, error or awaiting-approval."""
    label: str
    """PASS, FAIL, ERROR or AWAITING APPROVAL."""
    tone: Tone
    exit_code: int
    summary: str
    signed: bool
    signed_label: str
    """SIGNED or UNSIGNED."""
    keyid: str | None
    name: str
    """Manifest name of the change."""
    counts: list[KeyValue]
    """Check counts by status, e.g. pass: 4, fail: 1."""
    exit_words: str = ""
    """How the run exits, in words: `exit code N`; an approved run's says it gates as exit 0."""
    notes: list[str] = field(default_factory=list)
    """First-screen facts that qualify the verdict: site policies that replaced or weakened the
    built-in rule, waived checks with approver and expiry, checks whose power is unproven."""


@dataclass(frozen=True)
class ClaimView:
    """What changed and what kind of "same" it claims (release-gate steps 1 and 2)."""

    intervention: str
    intervention_words: str
    approximate: bool
    level: str
    claim_words: str
    parameters: list[KeyValue]
    """The claim's own parameters (atol, alpha, tokens...)."""
    envelopes: list[str]
    """For bounded-degradation claims: each slice envelope in words."""
    rule: str
    """The policy rule that admitted the claim, quoted."""
    rule_source: str
    description: str
    identity_declared: list[str]
    identity_required: list[str]
    transfer: str
    """What the evidence does and does not transfer to (exact vs approximate)."""


@dataclass(frozen=True)
class InvariantRow:
    """One promise of an approximate cache (quant-invariants, evict-invariants) and whether the cache
    kept it after every step, shown beside the envelopes."""

    check: str
    invariant: str
    """The invariant (its failure's bug class), or "every invariant" where the check judged none."""
    held: str
    """held, BROKEN, or the check's status where it judged none (UNPROVEN, ERROR, NOT RUN ...)."""
    tone: Tone
    detail: str = ""
    """Where the check judged none: its message (why the cache's state could not be read)."""


@dataclass(frozen=True)
class HazardView:
    """A design hazard a failed check showed (gate.core.hazards) and the configuration that avoids it."""

    name: str
    check: str
    design: str
    shown: str
    avoid: str


@dataclass(frozen=True)
class Failure:
    """One headline problem, shown right under the banner."""

    check: str
    status: str
    step: int
    message: str
    detected_at: str | None
    """Where it first failed, e.g. "prefix length 512"."""
    bug_class: str | None
    first_diverging_layer: str | None
    explanation: str | None
    """The diagnosis's explanation of the bug class, in words."""
    anchor: str
    """Fragment id of the check's section."""
    hazard: HazardView | None = None


@dataclass(frozen=True)
class ControlRow:
    fault: str
    cells: list[ControlLine | None]
    """One per matrix column; None where the check did not run this fault."""


@dataclass(frozen=True)
class ControlMatrix:
    """Fault x check: did each check catch each planted bug, and from which length."""

    checks: list[str]
    rows: list[ControlRow]


@dataclass(frozen=True)
class Diagnosis:
    """Failure profile and likely bug class, as the failing check reported it."""

    profile: str | None
    likely_bug_class: str | None
    first_diverging_layer: str | None
    explanation: str | None
    other: list[KeyValue]
    layers: LayerPlot | None = None
    """Per-layer divergence from the reference's full pass, when the check traced layers."""
    hazard: HazardView | None = None


@dataclass(frozen=True)
class SliceRow:
    """One quality slice against its envelope."""

    slice: str
    metric: str
    point: str
    bound: str
    comparator: str
    threshold: str
    n: str
    passed: bool | None
    held: str
    """yes, NO or ? (not recorded)."""
    tone: Tone
    plot: SlicePlot | None
    detail: str = ""
    """Confidence of the bound and the check's reason, in words."""
    confidence: str = ""
    """The one-sided confidence of `bound` (e.g. 95%)."""


@dataclass(frozen=True)
class Table:
    """A generic evidence table for keys no dedicated renderer consumes."""

    title: str
    columns: list[str]
    rows: list[list[str]]
    note: str = ""
    folded: int = 0
    """Rows folded into marker rows (passing runs of a long sweep); `note` says so."""


@dataclass(frozen=True)
class Download:
    """A file written beside the dossier for a reader to download (e.g. a slice's samples as JSONL)."""

    file: str
    """Path relative to the dossier, e.g. samples/needle.jsonl."""
    label: str
    lines: list[str]
    """The file's lines (JSON objects), written by gate.report.write_report."""


@dataclass(frozen=True)
class Distribution:
    """Observed against expected counts (speculative sampling)."""

    plot: DistributionPlot | None
    facts: list[KeyValue]
    rows: list[list[str]]
    """category, observed, expected."""
    note: str


@dataclass(frozen=True)
class ControlLine:
    fault: str
    kind: str
    """adapter, generic (with the generic fault's name) or — when nothing could be planted."""
    outcome: str
    tone: Tone
    detected_at: str | None
    output_difference: str | None
    message: str
    duration: str
    """Wall time of this control (it stops at its first failure)."""

    @property
    def title(self) -> str:
        """Hover text in the control matrix: the message and output difference."""
        difference = f" (output difference {self.output_difference})" if self.output_difference is not None else ""
        return self.message + difference


@dataclass(frozen=True)
class WaiverView:
    check: str
    reason: str
    approver: str
    expires: str
    expired: bool
    ledger_id: str | None


@dataclass(kw_only=True)
class Views:
    """What a check's evidence shows, as its reader made it (gate.report.evidence.EvidenceViews)."""

    sweep: SweepPlot | None = None
    latency: LatencyPlot | None = None
    """Latency distributions of both paths (phase-performance)."""
    live: LivePlot | None = None
    """Live KV bytes over time of both paths (phase-performance)."""
    slices: list[SliceRow] = field(default_factory=list)
    distribution: Distribution | None = None
    tables: list[Table] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What the renderer could not show (a missing or malformed evidence key)."""
    sweep_facts: list[KeyValue] = field(default_factory=list)
    """Which comparison each |Δ| of the sweep is against (full pass, same cached schedule)."""
    sweep_table: Table | None = None
    """The sweep's lengths, long passing runs folded (failing and boundary rows always shown)."""
    tokens: list[TokenView] = field(default_factory=list)
    """Greedy continuations that diverge, token by token."""
    downloads: list[Download] = field(default_factory=list)
    reproducer: Reproducer | None = None
    """The minimal failing schedule and the code that replays it (schedule-fuzz)."""


@dataclass(kw_only=True)
class CheckSection(Views):
    """Everything the dossier shows for one check: its evidence's views, and what the run recorded."""

    check: str
    anchor: str
    status: str
    status_label: str
    tone: Tone
    severity: str
    unproven: str
    """deny or warn: what unproven power means for the gate (policy)."""
    step: int
    step_title: str
    message: str
    why: str
    policy_rule: str
    detected_at: str | None
    metrics: list[KeyValue]
    params: list[KeyValue]
    exercise: list[KeyValue]
    diagnosis: Diagnosis | None
    controls: list[ControlLine]
    error: str | None
    """Exception type and message, when the check errored."""
    traceback: str | None
    waiver: WaiverView | None
    needs: str | None = None
    """What the check needs and what the candidate offers, as the run decided it before the check
    ran (the words of `gate plan`); None: a run that recorded no decision."""
    means: str | None = None
    """What that meant: runs with its own controls, with stand-ins, or not applicable (never started)."""
    duration: str = ""
    timing: str = ""
    """Where the time went: the check's own run, its controls, and the shares of model forwards, the
    subject's other work and gate's own work."""


@dataclass(frozen=True)
class NextStep:
    """One thing a reader can do next, with the exact command."""

    title: str
    command: str
    note: str = ""
    expect_exit: int | None = None
    """The exit code this command ends with, derived from this dossier's own results
    (gate.report.next_steps.expected_run); None: not predicted."""
    expect: str = ""
    """That exit code in words: `FAIL`, `PARTIAL`, `NOT DEPLOYABLE`, ..."""

    @property
    def expectation(self) -> str:
        """`expect exit 1 (FAIL)`, as the dossier shows it; empty when not predicted."""
        if self.expect_exit is None:
            return ""
        return f"expect exit {self.expect_exit}" + (f" ({self.expect})" if self.expect else "")


@dataclass(frozen=True)
class ProvenanceGroup:
    title: str
    items: list[KeyValue]


@dataclass(frozen=True)
class ReportData:
    """The whole dossier."""

    banner: Banner
    claim: ClaimView
    failures: list[Failure]
    plan: list[CheckSection]
    """Every check in plan order (`sections` shows failures first)."""
    sections: list[CheckSection]
    controls: ControlMatrix
    waivers: list[WaiverView]
    approvals: list[list[KeyValue]]
    provenance: list[ProvenanceGroup]
    started_at: str
    finished_at: str
    gate_version: str
    next_steps: list[NextStep] = field(default_factory=list)
    """The "What next" box: reproduce, widen, approve (empty on a plain pass)."""
    downloads: list[Download] = field(default_factory=list)
    """Every section's downloads, for the writer."""
    envelopes: list[SliceRow] = field(default_factory=list)
    """A bounded-degradation claim's decision: every envelope judged, right under the banner."""
    invariants: list[InvariantRow] = field(default_factory=list)
    """Beside the envelopes: each invariant an approximate cache was held to, held or broken."""

    @property
    def held(self) -> bool:
        """The verdict held (pass, pass with waivers, awaiting approval): what `failures` lists (a
        warn-severity failure, a waived one, an amber unproven) is a note, not why it did not pass."""
        return self.banner.verdict in ("pass", "pass-with-waivers", "awaiting-approval")
