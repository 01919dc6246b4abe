"""build_report(GateResult) -> ReportData: every decision the dossier shows, made once, in Python.

Reads only the result record, tolerant of older or newer runners (plan and manifest as plain dicts).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from pydantic import ValidationError

from gate.checks.faces import EVIDENCE
from gate.checks.prefix_sweep.evidence import SweepEvidence
from gate.core.hazards import hazard_summary
from gate.core.plan import CheckCapabilities
from gate.core.result import CheckResult, ControlResult, GateResult, Status, time_buckets
from gate.report.evidence import read_diagnosis, read_evidence
from gate.report.fmt import as_float, as_mapping, duration, number
from gate.report.model import (
    Banner,
    CheckSection,
    ControlLine,
    ControlMatrix,
    ControlRow,
    Failure,
    KeyValue,
    ReportData,
    Views,
    WaiverView,
)
from gate.report.next_steps import CommandContext, next_steps
from gate.report.provenance import claim_view, invariant_rows, key_values, provenance
from gate.report.words import CONTROL_TONES, STATUSES, STEP_TITLES, verdict_label


@dataclass(frozen=True)
class Signing:
    signed: bool = False
    keyid: str | None = None


def anchor(name: str) -> str:
    """A fragment id for a check's section: lowercase letters, digits and dashes."""
    return "check-" + (re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unnamed")


def _status(check: CheckResult) -> tuple[str, str, str]:
    status = check.status.value
    label, tone = STATUSES.get(status, (status.upper(), "muted"))
    if status == "fail" and check.severity == "warn":
        label, tone = "FAIL (warn only)", "warn"
    return status, label, tone


def _detected_at(check: CheckResult, first_failing_length: float | None) -> str | None:
    """Where the check first failed: a recorded detected_at, else the sweep's first argmax flip, else
    the diagnosis's first deviating length (which also counts lengths merely over tolerance)."""
    unit = "prefix length" if EVIDENCE.get(check.check) is SweepEvidence else "index"
    diagnosis = as_mapping(check.diagnosis)
    value = as_float(check.metrics.get("detected_at"))  # the runner's copy of Outcome.detected_at
    if value is not None:
        return f"{unit} {number(value)}"
    if check.status not in (Status.failed, Status.error):
        return None
    if first_failing_length is not None:
        return f"prefix length {number(first_failing_length)}"
    deviating = as_float(diagnosis.get("first_deviating_length"))  # gate.checks._diagnosis.length_profile
    return f"prefix length {number(deviating)}" if deviating is not None else None


def _control_line(control: ControlResult) -> ControlLine:
    outcome = control.outcome.value
    diff = control.output_difference
    kind: str = control.kind or "—"
    if control.kind == "generic" and control.applied:
        kind = f"generic: {control.applied}"
    return ControlLine(
        fault=control.fault,
        kind=kind,
        outcome=outcome,
        tone=CONTROL_TONES.get(outcome, "muted"),
        detected_at=number(control.detected_at) if control.detected_at is not None else None,
        output_difference=number(diff) if diff is not None else None,
        message=control.message,
        duration=duration(control.duration_s) if control.duration_s else "",
    )


def timing(check: CheckResult) -> str:
    """e.g. `run 8.3 s + 9 controls 2.0 s; 90% model forwards, 6% the subject's other work, 4% gate's
    own` ("" for a record from before gate kept these times)."""
    spent = sum(c.duration_s for c in check.controls)
    if not check.positive_s and not spent:
        return ""
    text = f"run {duration(check.positive_s)}"
    if check.controls:
        text += f" + {len(check.controls)} controls {duration(spent)}"
    if check.forward_s is not None and check.duration_s > 0:
        share = [100 * x / check.duration_s for x in time_buckets(check.duration_s, check.forward_s, check.subject_s)]
        text += (
            f"; {share[0]:.0f}% model forwards, {share[1]:.0f}% the subject's other work, {share[2]:.0f}% gate's own"
        )
    return text


def _waiver(check: CheckResult) -> WaiverView | None:
    waiver = check.waiver
    if waiver is None:
        return None
    ledger_id = str(waiver.ledger_id) if waiver.ledger_id is not None else None
    return WaiverView(**waiver.model_dump(exclude={"ledger_id"}), ledger_id=ledger_id)


def _decided(result: GateResult) -> dict[str, tuple[str, str]]:
    """Per check, what it needs and what the candidate offers, and what that meant, as the run's plan
    records it (`CheckCapabilities.in_words`, the words of `gate plan`); empty for an older run."""
    decided = {}
    for planned in (result.plan or {}).get("checks") or []:
        recorded = planned.get("capabilities") if isinstance(planned, dict) else None
        if isinstance(recorded, dict):
            try:
                decided[str(planned.get("check"))] = CheckCapabilities.model_validate(recorded).in_words()
            except ValidationError:
                continue  # a record this gate cannot read: the section shows the rest
    return decided


def _section(check: CheckResult, decided: tuple[str, str] | None = None) -> CheckSection:
    status, label, tone = _status(check)
    views = read_evidence(check.check, check.evidence)
    diagnosis, diagnosis_tables = read_diagnosis(check.diagnosis)
    error = check.error
    shown = {f.name: getattr(views, f.name) for f in fields(Views) if f.name != "tables"}
    return CheckSection(
        check=check.check,
        anchor=anchor(check.check),
        status=status,
        status_label=label,
        tone=tone,
        severity=check.severity,
        unproven=check.unproven,
        step=check.step,
        step_title=STEP_TITLES.get(check.step, ""),
        message=check.message,
        why=check.why,
        policy_rule=check.policy_rule,
        detected_at=_detected_at(check, views.first_failing_length),
        metrics=key_values(check.metrics),
        params=key_values(check.params),
        exercise=key_values(check.exercise),
        diagnosis=diagnosis,
        controls=[_control_line(c) for c in check.controls],
        tables=[*views.tables, *diagnosis_tables],
        error=f"{error.type}: {error.message}" if error else None,
        traceback=error.traceback if error else None,
        waiver=_waiver(check),
        needs=decided[0] if decided else None,
        means=decided[1] if decided else None,
        duration=duration(check.duration_s),
        timing=timing(check),
        **shown,
    )


def _failures(sections: Sequence[CheckSection]) -> list[Failure]:
    failing = [s for s in sections if s.status in ("fail", "error", "unproven")]
    failing.sort(key=lambda s: (s.severity != "deny", s.status == "unproven", s.status != "fail"))
    return [
        Failure(
            check=s.check,
            status=s.status_label,
            step=s.step,
            message=s.message or (s.error or ""),
            detected_at=s.detected_at,
            bug_class=s.diagnosis.likely_bug_class if s.diagnosis else None,
            first_diverging_layer=s.diagnosis.first_diverging_layer if s.diagnosis else None,
            explanation=s.diagnosis.explanation if s.diagnosis else None,
            anchor=s.anchor,
            hazard=s.diagnosis.hazard if s.diagnosis and s.status == "fail" else None,
        )
        for s in failing
    ]


def _controls(result: GateResult) -> ControlMatrix:
    checks = [c for c in result.checks if c.controls]
    faults: list[str] = []
    for check in checks:
        faults.extend(c.fault for c in check.controls if c.fault not in faults)
    rows = [
        ControlRow(
            fault=fault,
            cells=[next((_control_line(c) for c in check.controls if c.fault == fault), None) for check in checks],
        )
        for fault in faults
    ]
    return ControlMatrix(checks=[c.check for c in checks], rows=rows)


def _banner_notes(result: GateResult) -> list[str]:
    notes = list(result.site_policy)
    for bug in result.known_bugs:  # the change's own manifest relaxes its verdict: first screen, always
        notes.append(f"{bug.note} [declared by the manifest: {bug.reason}; expires {bug.expires}]")
    for check in result.checks:
        waiver = check.waiver
        if check.status == Status.waived and waiver is not None:
            notes.append(
                f"waived: {check.check} ({waiver.reason}); approved by {waiver.approver}, expires {waiver.expires}"
            )
        if check.status == Status.unproven:
            denies = "denies" if check.unproven == "deny" else "warns only"
            lacking = check.evidence.get("unproven_assertions") if check.evidence else None
            if lacking and isinstance(lacking, dict):
                why = f"{len(lacking)} of its assertions need what the candidate lacks ({', '.join(lacking)})"
            elif check.covered_by:
                by = ", ".join(check.covered_by)
                why = f"not applicable on this candidate; its rule is observed at model level by {by}"
            elif check.controls and not any(c.outcome.value == "detected" for c in check.controls):
                why = "none of its negative controls could run or show anything"
            else:
                why = "could not cover what the policy requires (see the check)"
            notes.append(f"unproven ({denies}): {check.check}: {why}")
    return notes


SECTION_ORDER = {"fail": 0, "error": 0, "unproven": 1, "warn": 1, "waived": 2}
"""Evidence order: failing and erroring checks first, then warnings and waivers, passing evidence after."""


def _claim_level(result: GateResult) -> str:
    return str((result.plan or {}).get("claim") or (result.manifest.get("claim") or {}).get("level") or "")


def _banner_words(result: GateResult, approvals: Sequence[Mapping[str, Any]], required: int) -> tuple[str, str, str]:
    """Label, tone and summary; an awaiting-approval run with enough signed approvals reads APPROVED."""
    verdict = result.verdict.value
    label, tone = verdict_label(verdict, sum(1 for c in result.checks if c.status.value == "unproven"))
    if verdict != "awaiting-approval" or not approvals:
        return label, tone, result.summary + hazard_summary(result.checks)
    names = sorted({str(a.get("approver", "")) for a in approvals if a.get("approver")})
    if len(names) < required:
        return (
            f"{label} ({len(names)} of {required} required approvals)",
            tone,
            f"approved so far by {', '.join(names)}; {required - len(names)} more approval(s) required",
        )
    # what decide() said held (its tally when a warning stood, then: every envelope, or no envelope check ran)
    held = result.summary.split("; an approximate change waits")[0]
    return (
        "APPROVED",
        "good",
        f"approved for release by {', '.join(names)}: {held}; {len(names)} signed "
        f"approval{'s' if len(names) != 1 else ''} {'is' if len(names) == 1 else 'are'} attached below",
    )


def build_report(
    result: GateResult,
    signing: Signing | None = None,
    approvals: Sequence[Mapping[str, Any]] = (),
    *,
    out_dir: str | None = None,
    required_approvals: int = 1,
    commands: CommandContext | None = None,
) -> ReportData:
    """Everything the dossier shows for `result`; the banner reads APPROVED once `required_approvals`
    distinct approvers signed `approvals`; `out_dir` and `commands` feed the What-next box."""
    signing = signing or Signing()
    decided = _decided(result)
    sections = [_section(check, decided.get(check.check)) for check in result.checks]
    counts = Counter(check.status.value for check in result.checks)
    label, tone, summary = _banner_words(result, approvals, required_approvals)
    banner = Banner(
        verdict=result.verdict.value,
        label=label,
        tone=tone,
        exit_code=result.exit_code,
        summary=summary,
        signed=signing.signed,
        signed_label="SIGNED" if signing.signed else "UNSIGNED",
        keyid=signing.keyid,
        name=str(result.manifest.get("name", "")),
        counts=[
            KeyValue(k, str(v))
            for k, v in sorted(counts.items(), key=lambda kv: list(STATUSES).index(kv[0]) if kv[0] in STATUSES else 99)
        ],
        exit_words=(
            f"exit code 0 once approved; the signed run recorded {result.exit_code}, awaiting approval"
            if label == "APPROVED"
            else f"exit code {result.exit_code}"
        ),
        notes=_banner_notes(result),
    )
    return ReportData(
        banner=banner,
        claim=claim_view(result),
        failures=_failures(sections),
        plan=sections,
        sections=sorted(sections, key=lambda s: SECTION_ORDER.get(s.status, 3)),
        next_steps=next_steps(result, sections, out_dir, commands, signed=signing.signed)
        if label != "APPROVED"
        else [],
        downloads=[d for s in sections for d in s.downloads],
        envelopes=[row for s in sections for row in s.slices] if _claim_level(result) == "bounded-degradation" else [],
        invariants=invariant_rows(result) if _claim_level(result) == "bounded-degradation" else [],
        controls=_controls(result),
        waivers=[s.waiver for s in sections if s.waiver is not None],
        approvals=[key_values(a) for a in approvals],
        provenance=provenance(result),
        started_at=result.started_at,
        finished_at=result.finished_at,
        gate_version=result.gate_version,
    )
