"""What verifying one dossier found (`RunCheck`, made by gate.trust.verify_run.check_run): the findings,
the signed statement, who approved, and what the verdict stands as (`standing`, `deployable`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gate.trust.approvals import ApprovalRecord
from gate.trust.ledger import Entry
from gate.trust.statement import PredicateManifest, RunPredicate, Statement

AWAITING = "awaiting-approval"
PASS = "pass"
PASS_WITH_WAIVERS = "pass-with-waivers"


@dataclass
class Finding:
    """One line of a report: `ok` true (verified), false (failed) or None (information)."""

    ok: bool | None
    text: str


@dataclass
class ApprovalInput:
    """An approval record to judge, where it came from, and when it was signed (None: unknown)."""

    record: ApprovalRecord | None
    """None: a ledger entry that holds no well-formed record (it is reported, and does not count)."""
    label: str
    at: str | None = None

    @classmethod
    def of_entry(cls, entry: Entry) -> ApprovalInput:
        return cls(ApprovalRecord.of_entry(entry.body), f"approval #{entry.seq}", entry.time)


@dataclass
class RunCheck:
    """What `check_run` found about one dossier."""

    directory: Path
    findings: list[Finding] = field(default_factory=list)
    statement: Statement | None = None
    predicate: RunPredicate | None = None
    statement_sha256: str = ""
    approved_by: list[str] = field(default_factory=list)
    """Distinct approvers whose approval counted."""
    required: int = 1
    approximate: bool = False
    """The verifier's own decision (verify_run.is_approximate), not the run's."""
    waived: list[str] = field(default_factory=list)
    waivers_count: bool | None = None
    """Every waived check's waiver counts under the verifier's policy (None: not judged, no ledger)."""
    other_policy: str | None = None
    """The run's own trust policy, when it is not the verifier's (it decides nothing here)."""
    not_mains: list[str] = field(default_factory=list)
    """Each input that shaped the verdict and is not main's (a policy file, the baseline): the run is
    then not deployable, whatever it verified as."""

    def add(self, ok: bool | None, text: str) -> None:
        self.findings.append(Finding(ok, text))

    @property
    def ok(self) -> bool:
        return self.statement is not None and all(f.ok is not False for f in self.findings)

    @property
    def verdict(self) -> str:
        return str(self.predicate.verdict) if self.predicate is not None else "?"

    @property
    def commit(self) -> str | None:
        return self.statement.commit if self.statement else None

    @property
    def manifest(self) -> PredicateManifest:
        return self.predicate.manifest if self.predicate is not None else PredicateManifest()

    @property
    def site_policy(self) -> list[str]:
        return self.predicate.site_policy if self.predicate is not None else []

    @property
    def approved(self) -> bool:
        return self.verdict == AWAITING and len(self.approved_by) >= self.required

    @property
    def standing(self) -> str:
        """The verdict, or APPROVED / AWAITING APPROVAL; never a verdict that did not verify."""
        if not self.ok:
            return f"NOT VERIFIED (the dossier claims {self.verdict})"
        if self.not_mains:
            return f"{self.verdict.upper()} under inputs that are not main's (NOT DEPLOYABLE)"
        if self.verdict != AWAITING:
            return self.verdict.upper() + (self._waiver_note() if self.verdict == PASS_WITH_WAIVERS else "")
        if self.approved:
            return f"APPROVED by {', '.join(self.approved_by)}" + self._waiver_note()
        return f"AWAITING APPROVAL ({len(self.approved_by)} of {self.required} required approvals)"

    def _waiver_note(self) -> str:
        if not self.waived:
            return ""
        if self.waivers_count is None:
            return f" ({len(self.waived)} waived: NOT JUDGED, give --ledger to re-check the waivers)"
        if not self.waivers_count:
            return f" ({len(self.waived)} waived: a waiver does NOT COUNT under the verifier's trust policy)"
        return f" ({len(self.waived)} waived, each counting under the verifier's trust policy)"

    @property
    def deployable(self) -> bool:
        """Verified, and a verdict a deploy may ship: pass, approved, or pass-with-waivers whose
        waivers all count under the verifier's policy (waivers inside an approved change too)."""
        if not self.ok or self.not_mains:
            return False
        waivers_hold = not self.waived or self.waivers_count is True
        if self.verdict == AWAITING:
            return self.approved and waivers_hold
        return self.verdict in (PASS, PASS_WITH_WAIVERS) and not self.approximate and waivers_hold

    def summary(self) -> str:
        m = self.manifest
        other = f" (the run used another trust policy: {self.other_policy})" if self.other_policy else ""
        return (
            f"commit {self.commit or '(none signed)'}, manifest {m.name} (sha256 {str(m.sha256)[:16]}), "
            f"verdict {self.standing}{other}"
        )
