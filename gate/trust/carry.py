"""Approvals carried over: a signed awaiting-approval run whose evidence an earlier run's approvals
already cover (gate.trust.evidence) is written approved, as `gate approve` (gate.trust.approve) would
have written it, without an approver signing again."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gate.trust.approval_predicate import APPROVAL_KIND, APPROVED_ENVELOPE, read_run_statement
from gate.trust.approvals import ApprovalRecord, approved_statement, verify_approval, write_approvals
from gate.trust.approve import approved_report, render_approved
from gate.trust.attest import envelope_for, write_envelope
from gate.trust.keys import keyid, load_private_key
from gate.trust.landing import approval_landing
from gate.trust.ledger import Ledger, receipt
from gate.trust.ledger_store import is_url
from gate.trust.policy import find_trust
from gate.trust.revocation import read_revocations
from gate.trust.verify_run import approval_problems
from gate.trust.waivers import require_verified

if TYPE_CHECKING:
    from gate.report.model import ReportData


@dataclass
class Carried:
    """Approvals of an identical earlier run (same evidence digest) that count for this one."""

    approved_by: list[str]
    required: int
    entries: list[int]
    """The ledger entries of the approvals that count."""
    notes: list[str]
    """Approvals of the same evidence that do not count, and why."""
    written: list[Path]
    report: ReportData | None = None
    """The approved rendering's report (set when approvals were written)."""

    @property
    def approved(self) -> bool:
        return len(self.approved_by) >= self.required


def carry_over(
    directory: Path,
    ledger_path: Path,
    trust_path: Path | None,
    sign_key: Path,
    *,
    final_dir: Path | None = None,
) -> Carried | None:
    """Write the ledger's approvals of the same evidence that count into DIR, as `gate approve` would
    (approval.dsse.json signed by the run's key); None when there is nothing to look at."""
    run = read_run_statement(directory)
    trust = find_trust(trust_path)
    if run.predicate.verdict != "awaiting-approval" or run.evidence is None or trust is None:
        return None
    if not (is_url(ledger_path) or ledger_path.is_file()):
        return None
    run_key = keyid(load_private_key(sign_key).public_key())
    records: dict[str, ApprovalRecord] = {}
    names: dict[str, str] = {}
    seqs: dict[str, int] = {}
    notes: list[str] = []
    with Ledger.open(ledger_path, writable=False, create=False) as ledger:
        require_verified(ledger, "no approval in it can be trusted")
        revoked = read_revocations(ledger, trust)
        for entry in ledger.entries(APPROVAL_KIND):
            found = ApprovalRecord.of_entry(entry.body)
            evidence, landed = run.evidence, None
            if entry.body.get("evidence_sha256") != run.evidence:
                landed = approval_landing(found, directory, run.commit, run)  # of the commit this one lands
                if landed is None or landed.evidence != entry.body.get("evidence_sha256"):
                    continue
                evidence = landed.evidence
            check = verify_approval(found, expected_statement=run.sha256, expected_evidence=evidence)
            if problems := approval_problems(check, trust, revoked, entry.time, [run_key]):
                notes.append(f"approval #{entry.seq} by {check.approver or '?'} does not count: {'; '.join(problems)}")
                continue
            if (checkpoint := ledger.checkpoint(entry.seq)) is None:
                notes.append(f"approval #{entry.seq}: no signed checkpoint covers it")
                continue
            assert found is not None  # it verified
            found.ledger = receipt(ledger, entry, checkpoint)
            records[check.keyid] = found
            if landed is not None:
                notes.append(f"{landed.says(f'approval #{entry.seq}')}: it counts for this run")
            names[check.keyid] = trust.name_of(check.keyid) or check.approver
            seqs[check.keyid] = entry.seq
    carried = Carried(sorted(set(names.values())), trust.policy.required_approvals, sorted(seqs.values()), notes, [])
    if not records:
        return carried
    mine = list(records.values())
    carried.written.append(write_approvals(directory, mine))
    carried.written += render_approved(directory, mine, trust.policy.required_approvals, final_dir=final_dir)
    carried.report = approved_report(directory, mine, trust.policy.required_approvals, final_dir=final_dir)
    statement = approved_statement(directory, run, [r.keyid for r in mine])
    key = load_private_key(sign_key)
    carried.written.append(write_envelope(directory / APPROVED_ENVELOPE, envelope_for(statement, key)))
    return carried
