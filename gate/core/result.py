"""The result record (results.json): every check's status, metrics and evidence.

Rendering, signing and the ledger read only this record, so a dossier can be rebuilt from an old
results.json with no model present. The shape may not change without bumping `RESULT_VERSION`.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import Field

from gate.core.manifest import Record

RESULT_VERSION = 1

# Where a control's or a check's wall time (its `duration_s`) went: one definition for both records
# (fields of their own, so results.json keeps its shape and order).
ForwardSeconds = Annotated[
    float | None, Field(description="Of duration_s, seconds inside model forward passes (None: not measured).")
]
SubjectSeconds = Annotated[
    float | None,
    Field(
        description="Of duration_s, seconds inside the subject's own call regions (gate.protocols.subject_call)\n"
        "outside model forwards: its prefix store, hashing, sampler, cache copies (None: not measured).\n"
        "The rest (duration_s - forward_s - subject_s) is gate's own work."
    ),
]


class Status(str, Enum):
    """Outcome of one check."""

    passed = "pass"
    failed = "fail"
    warn = "warn"
    error = "error"
    skip = "skip"
    waived = "waived"
    unproven = "unproven"
    """The check passed but none of its negative controls could run (its power is not shown), or
    some of its assertions need a capability the candidate lacks (named in its evidence)."""
    not_applicable = "not-applicable"
    """The check has nothing to judge on this path, as its policy rule states (`not_applicable`: e.g.
    no cross-request cache, so no entry to invalidate): reported with the reason, never a warning,
    never colouring the verdict."""


class Verdict(str, Enum):
    """Outcome of the whole gate."""

    passed = "pass"
    failed = "fail"
    error = "error"
    awaiting_approval = "awaiting-approval"
    passed_with_waivers = "pass-with-waivers"
    """Every check held except the waived ones (exit 0; the waivers are named on the first screen)."""
    unproven = "unproven"
    """A check whose unproven power denies (policy `unproven: deny`) could not run its controls."""
    partial = "partial"
    """Only part of the plan ran (`gate run --check`) and nothing failed: never a PASS for the manifest."""


VERDICT_PRECEDENCE: tuple[Verdict, ...] = (
    Verdict.error,
    Verdict.failed,
    Verdict.unproven,
    Verdict.partial,
    Verdict.awaiting_approval,
    Verdict.passed_with_waivers,
    Verdict.passed,
)
"""The order in which one verdict overrides another, as `decide()` applies it within a run; a batch
of runs (`gate run M1 M2 ...`) takes the first verdict in this order that any of its runs has."""


def worst_verdict(verdicts: list[Verdict]) -> Verdict:
    """The verdict of a batch: the earliest in VERDICT_PRECEDENCE among `verdicts` (pass when empty)."""
    return min(verdicts, key=VERDICT_PRECEDENCE.index, default=Verdict.passed)


WALL_CLOCK_KEYS = frozenset(
    {
        "started_at",
        "finished_at",
        "duration_s",
        "positive_s",
        "forward_s",
        "wall_s",
        "samples_per_s",
        "samples_per_second",
        "outside_forward_share",
    }
)
"""Keys of results.json whose values are wall-clock measurements (times, rates): they differ between
any two runs of the same manifest, on any executor."""
WALL_CLOCK_CHECKS = frozenset({"phase-performance"})
"""Checks whose observation is itself wall-clock (serving latencies, throughput, memory over time):
only their status is comparable between two runs."""


def without_wall_clock(document: Any) -> Any:
    """A results.json document (parsed) with every wall-clock value set to None and, for the checks
    in WALL_CLOCK_CHECKS, message, metrics, evidence and controls blanked too: what two runs of one
    manifest must agree on exactly, whichever machine, process or executor ran them."""
    if isinstance(document, list):
        return [without_wall_clock(item) for item in document]
    if not isinstance(document, dict):
        return document
    out = {key: None if key in WALL_CLOCK_KEYS else without_wall_clock(value) for key, value in document.items()}
    if out.get("check") in WALL_CLOCK_CHECKS and "status" in out:
        out.update({key: None for key in ("message", "metrics", "evidence", "controls") if key in out})
    return out


class ControlOutcome(str, Enum):
    """What a negative control showed about a check's power."""

    detected = "detected"
    """The fault changed the computation and the check failed: the check has power."""
    missed = "missed"
    """The fault changed the computation and the check still passed: no power."""
    unobservable = "unobservable"
    """The fault did not change the outputs the check observes at these lengths."""
    unsupported = "unsupported"
    """The candidate path cannot apply this fault."""
    tolerated = "tolerated"
    """A harmless fault (expect: pass) left the check passing, as it should."""
    over_rejected = "over-rejected"
    """A harmless fault (expect: pass) made the check fail: the check over-rejects."""
    error = "error"
    """The control could not run."""


class ControlResult(Record):
    """One negative control: a fault applied to the candidate path, and whether the check caught it."""

    fault: str
    """Fault name, e.g. mask-origin-reset."""
    kind: Literal["adapter", "generic"] | None = None
    """adapter: the candidate adapter planted its own fault; generic: a protocol-level fault
    (gate.engine.generic_faults) stood in for it; None: nothing could be planted."""
    applied: str | None = None
    """The fault actually applied (for kind generic, the generic fault's name)."""
    stand_in: str | None = None
    """Why a generic fault stood in for the named one (kind generic): the adapter plants no such
    fault, declares it invisible on its architecture, or its own fault ran and could not show at
    run time (unobservable: it moved nothing beyond the path's rounding). None: nothing stood in."""
    outcome: ControlOutcome
    """detected, missed, unobservable or error."""
    detected_at: int | None = None
    """Smallest prefix length (or sample index) at which the check failed, when it says."""
    output_difference: float | None = None
    """max |Δ| between the clean and the faulty candidate's observed outputs."""
    message: str = ""
    """Human-readable explanation."""
    metrics: dict[str, Any] = Field(default_factory=dict)
    """The faulty run's headline metrics."""
    duration_s: float = 0.0
    """Wall time of this control (it stops at the first failure it finds)."""
    forward_s: ForwardSeconds = None
    subject_s: SubjectSeconds = None


class ErrorInfo(Record):
    """An exception raised inside a check, kept for the record."""

    type: str
    message: str
    traceback: str


class Waiver(Record):
    """A recorded waiver that applied to a check."""

    check: str
    reason: str
    approver: str
    expires: str
    ledger_id: int | None = None
    expired: bool = False


KnownBugDisposition = Literal["applies", "not-affected", "expired", "expected", "not-showing", "not-run"]


class KnownBugRecord(Record):
    """One known bug the manifest declares (gate.core.known_bugs) and what became of it."""

    id: str
    link: str
    affects: str
    check: str
    bug_class: str = Field(alias="class")
    expires: str
    reason: str
    installed: str | None
    """The installed version of the package `affects` names (None: not installed)."""
    disposition: KnownBugDisposition
    """Planned: applies, not-affected (the installed version is outside `affects`) or expired
    (ignored, with a warning). After the run an applying one is expected (its check failed with
    the declared class), not-showing (fixed upstream? remove the declaration) or not-run."""
    note: str
    """The disposition in words, as the dossier prints it."""


class CheckResult(Record):
    """One check's outcome."""

    check: str
    """Registered check name."""
    status: Status
    """pass, fail, warn, error, skip, waived or unproven."""
    severity: Literal["deny", "warn"]
    """What a failure means for the gate: deny fails it, warn only reports."""
    unproven: Literal["deny", "warn"] = "deny"
    """What unproven power means for the gate (policy rule, else the claim's default)."""
    step: int = Field(ge=1, le=8)
    """Release-gate step (background: the release gate) the check serves."""
    why: str = ""
    """Why the policy requires it."""
    policy_rule: str = ""
    """policy file and rule path that required it."""
    message: str = ""
    """One-line summary of the outcome."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Parameters it ran with (policy merged with manifest overrides), to reproduce the run."""
    metrics: dict[str, Any] = Field(default_factory=dict)
    """Headline numbers (max |Δlogit|, argmax agreement, p-value, ...)."""
    evidence: dict[str, Any] = Field(default_factory=dict)
    """Tables and series the dossier plots (per-length deltas, observed vs expected, ...)."""
    exercise: dict[str, Any] = Field(default_factory=dict)
    """Proof that the candidate path really ran: cache lengths, cached steps, bytes held."""
    controls: list[ControlResult] = Field(default_factory=list)
    """Negative controls run for this check."""
    covered_by: dict[str, str] = Field(default_factory=dict)
    """A check that could not run on this candidate: the checks of the same run that observe its
    rule at model level -> what each observes (e.g. mask-oracle without an AttentionProbe: the
    sweep's and the fuzzer's logits against a full pass). It is unproven-not-applicable (a warning)
    when each of them passed with its power shown, else unproven as its policy rule says."""
    diagnosis: dict[str, Any] | None = None
    """Failure profile and likely bug class, when the check failed."""
    error: ErrorInfo | None = None
    """The exception, when status is error."""
    waiver: Waiver | None = None
    """The waiver that applied, when status is waived (or one that expired)."""
    known_bug: str | None = None
    """The manifest's known bug (its id) this failure is: the check failed with the declared class
    on an affected version, so it reads "known bug, expected" as a warning (see `known_bugs`)."""
    duration_s: float = 0.0
    """Wall time of the check including its controls."""
    positive_s: float = 0.0
    """Wall time of the check's own run on the candidate, without its controls."""
    forward_s: ForwardSeconds = None
    subject_s: SubjectSeconds = None


class Digest(Record):
    """A file and its sha256."""

    path: str
    sha256: str


class GateResult(Record):
    """The whole run: written atomically to DIR/results.json."""

    result_version: int = RESULT_VERSION
    """Version of this record's shape."""
    gate_version: str
    """gate package version that produced it."""
    verdict: Verdict
    """pass, pass-with-waivers, fail, unproven, error, awaiting-approval, or partial (`gate run
    --check`: only part of the plan ran)."""
    exit_code: int
    """Process exit code the verdict maps to (see README)."""
    summary: str = ""
    """One-line summary of the verdict."""
    manifest: dict[str, Any]
    """The manifest as validated (aliases applied), with the commit recorded."""
    manifest_digest: Digest
    """Path and sha256 of the manifest file."""
    policies: list[Digest]
    """Every policy file that took part in planning, with its sha256."""
    baseline: dict[str, Any] | None = None
    """The stored reference answers the run used (gate.adapters.recorded.store): kind (recorded baseline or
    reference cache), path, sha256 of baseline.json, key, the gate commit that recorded it, and how
    many answers were read and computed, and the live reference a replay built for clocks and layer
    traces (`live_reference`, docs/baselines.md). None: the reference computed everything live."""
    site_policy: list[str] = Field(default_factory=list)
    """How a --policy-dir replaced or extended the built-in rule and what it dropped (the banner says so)."""
    plan: dict[str, Any]
    """The plan that was run (see gate.core.plan.Plan)."""
    checks: list[CheckResult]
    """Each planned check's result, in plan order."""
    subjects: dict[str, Any] = Field(default_factory=dict)
    """Identity of each path: model config hash, weights sha256, library versions."""
    servers: dict[str, Any] | None = None
    """The server processes the run started (an engine adapter's, gate.protocols.CountsServers): starts
    for the checks and for their controls, why each happened, launch configurations, the most alive at
    once. None: the subjects start no servers."""
    datasets: dict[str, str] = Field(default_factory=dict)
    """Dataset fingerprints used by quality slices."""
    environment: dict[str, Any] = Field(default_factory=dict)
    """Versions of gate, python, torch, transformers; device; host facts."""
    started_at: str
    """UTC ISO-8601 start time."""
    finished_at: str
    """UTC ISO-8601 end time."""
    known_bugs: list[KnownBugRecord] = Field(default_factory=list)
    """Every known bug the manifest declares and what became of it (expected, not showing, not
    affected, expired): a relaxation the change's own manifest asks for, shown to the approver."""
    trust_policy: Digest | None = None
    """Path and sha256 of the trust policy (trust.yaml) waivers were judged under; None: none found."""


def time_buckets(wall: float, forward_s: float, subject_s: float | None) -> tuple[float, float, float]:
    """(model forwards, the subject's other work, gate's own work) of a stretch that took `wall`
    seconds, from its recorded forward_s and subject_s; the three sum to `wall`."""
    forward = min(max(forward_s, 0.0), wall)
    subject = min(max(subject_s or 0.0, 0.0), wall - forward)
    return forward, subject, wall - forward - subject
