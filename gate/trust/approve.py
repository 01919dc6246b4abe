"""`gate approve`: verify an awaiting-approval dossier, then sign, record and show the approval.
Approvals of one dossier are serialised by a lock on DIR/.approve.lock, so parallel `gate approve`s
lose no signature or record and one key appends once."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from gate._util.atomic import write_bytes_atomic
from gate._util.clock import now_utc
from gate._util.text import require_single_lines
from gate.trust.approval_predicate import (
    APPROVAL_KIND,
    APPROVED_ENVELOPE,
    APPROVED_HTML,
    APPROVED_MD,
    ApprovalPredicate,
    ApprovalRefused,
    RunStatement,
    read_run_statement,
)
from gate.trust.approvals import (
    ApprovalRecord,
    approval_record,
    approval_statement,
    approved_statement,
    display_rows,
    load_approvals,
    verify_approval,
    write_approvals,
)
from gate.trust.attest import ENVELOPE_NAME, add_signature, envelope_for, read_envelope, verify_envelope, write_envelope
from gate.trust.key_refusal import approver_refusal, revoked_refusal, unknown_key
from gate.trust.keys import keyid, load_private_key
from gate.trust.ledger import RECEIPT, RUN_KIND, Entry, Ledger, Receipt, receipt
from gate.trust.ledger_paths import DEFAULT_LEDGER, ENV_LEDGER, named_ledger
from gate.trust.ledger_store import is_url, ledger_location
from gate.trust.ledger_verify import verify_chain
from gate.trust.policy import Trust, require_trust
from gate.trust.revocation import Revocations, read_revocations

if TYPE_CHECKING:
    from gate.report.model import ReportData

LOCK_NAME = ".approve.lock"


@contextmanager
def dossier_lock(directory: Path) -> Iterator[None]:
    with (directory / LOCK_NAME).open("a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


@dataclass
class Approved:
    """What `approve` did."""

    record: ApprovalRecord
    entry: Entry
    written: list[Path]
    reused: bool
    """True when this key had already approved this dossier (nothing new was appended)."""
    summary: str = ""
    site_policy: list[str] = field(default_factory=list)


def approval_ledger(explicit: Path | None, directory: Path) -> tuple[Path, str]:
    """The ledger `gate approve` records into, and why: --ledger, $GATE_LEDGER, the one DIR/ledger.json
    names (when it is here), else ./.gate/ledger.sqlite."""
    if (named := named_ledger(explicit)) is not None:
        return named
    try:
        recorded = Receipt.model_validate_json((directory / RECEIPT).read_bytes()).ledger
    except (OSError, ValueError):  # ValidationError is a ValueError
        recorded = None
    if recorded:
        path = ledger_location(recorded)
        if is_url(path) or path.is_file():
            return path, f"the ledger the run was recorded in, from {directory / RECEIPT}"
    made = "" if DEFAULT_LEDGER.is_file() else "; created now"
    return DEFAULT_LEDGER, f"the default ledger: no --ledger, no ${ENV_LEDGER}, no receipt in {directory}{made}"


def find_run_entry(ledger: Ledger, statement_sha256: str) -> Entry | None:
    found = [e for e in ledger.entries(RUN_KIND) if e.dossier.get("statement_sha256") == statement_sha256]
    return found[-1] if found else None


def _run_keys(trust: Trust, revoked: Revocations | None = None, at: str | None = None) -> dict[str, Ed25519PublicKey]:
    """The run signers' keys not revoked at `at`, labelled one per key (a person may hold several)."""
    gone = revoked or Revocations()
    keys = trust.run_signer_keys().items()
    return {f"{i.name} (key {k[:16]})" if i.name else k: i.public_key for k, i in keys if gone.key(k, at) is None}


def check_approvable(directory: Path, run_keys: dict[str, Ed25519PublicKey]) -> list[str]:
    """The run signers' key ids that verified the awaiting-approval dossier; else ApprovalRefused."""
    if not run_keys:
        raise ApprovalRefused(f"{directory}: the trust policy names no run signer key to verify the run with")
    report = verify_envelope(directory, run_keys, require_all=False)
    if not report.valid:
        raise ApprovalRefused(f"{directory}: the dossier does not verify: " + "; ".join(report.problems))
    verdict = report.predicate.verdict if report.predicate is not None else None
    if verdict != "awaiting-approval":
        what = "failed" if verdict in ("fail", "error") else "does not need approval"
        raise ApprovalRefused(
            f"{directory}: the run's signed verdict is {verdict!r}: it {what}; only an "
            "awaiting-approval run can be approved"
        )
    return [s.keyid for s in report.signed_by]


def approve(
    directory: Path,
    *,
    approver: str | None,
    reason: str,
    key_path: Path,
    ledger_path: Path,
    trust: Trust | None = None,
    ledger_key: Path | None = None,
) -> Approved:
    """Approve the dossier in `directory`; refuses anything that does not verify (`trust`: None finds one)."""
    if trust is None:
        trust = require_trust(None, "gate approve")
    key = load_private_key(key_path)
    mine = keyid(key.public_key())
    if unknown := unknown_key(trust, mine):  # before the name: a stranger's key has none to default to
        raise ApprovalRefused(f"{key_path}: {unknown}: approve with an approver's key")
    approver = approver if approver is not None else trust.name_of(mine)
    if not approver or not approver.strip() or not reason.strip():
        raise ApprovalRefused("an approval needs an approver name and a reason (non-blank)")
    require_single_lines(("--reason", reason), ("--approver", approver))  # exit 2: before anything is read or written
    with dossier_lock(directory):
        run = read_run_statement(directory)
        if bad := approver_refusal(trust, mine, approver, run.predicate.intervention, run.predicate.claim_level):
            raise ApprovalRefused(f"{key_path}: {bad}")
        if not (is_url(ledger_path) or ledger_path.is_file()):
            # no ledger yet, so no revocation: refuse what can be refused before creating one
            check_approvable(directory, _run_keys(trust))
        with Ledger.open(ledger_path, key_path=ledger_key) as ledger:
            if (first := verify_chain(ledger).first_bad()) is not None:
                raise ApprovalRefused(f"{ledger_path}: the ledger does not verify: {first.message}")
            revoked = read_revocations(ledger, trust)
            run_entry = find_run_entry(ledger, run.sha256)
            signers = check_approvable(directory, _run_keys(trust, revoked, run_entry.time if run_entry else None))
            if mine in signers:
                raise ApprovalRefused(
                    "the approver's key is the key that signed the run: an approval needs a second, independent key"
                )
            if (gone := revoked.key(mine, now_utc())) is not None:
                raise ApprovalRefused(f"{key_path}: {revoked_refusal(trust, mine, gone, revoked)}")
            entry, reused, record = _append_or_reuse(
                ledger, run, run_entry, directory, key, approver, reason, signers, trust
            )
            checkpoint = ledger.checkpoint(entry.seq)
            assert checkpoint is not None
            record.ledger = receipt(ledger, entry, checkpoint)
        add_signature(directory / ENVELOPE_NAME, key_path)
        records = [
            r for r in load_approvals(directory) if not (r.keyid == record.keyid and r.statement_sha256 == run.sha256)
        ]
        records.append(record)
        written = [write_approvals(directory, records)]
        check = verify_approval(record, expected_statement=run.sha256, directory=directory)
        if not check.ok:  # a bug, not a user error: say so loudly
            raise ApprovalRefused("the approval just written does not verify: " + "; ".join(check.problems))
        written += render_approved(directory, records, trust.policy.required_approvals)
        statement = approved_statement(directory, run, [r.keyid for r in records])
        written.append(write_envelope(directory / APPROVED_ENVELOPE, envelope_for(statement, key)))
    return Approved(
        record,
        entry,
        written,
        reused,
        summary=run.predicate.summary,
        site_policy=run.predicate.site_policy,
    )


def _append_or_reuse(
    ledger: Ledger,
    run: RunStatement,
    run_entry: Entry | None,
    directory: Path,
    key: Ed25519PrivateKey,
    approver: str,
    reason: str,
    signers: list[str],
    trust: Trust,
) -> tuple[Entry, bool, ApprovalRecord]:
    mine = keyid(key.public_key())
    for entry in ledger.entries(APPROVAL_KIND):
        if entry.body.get("statement_sha256") == run.sha256 and entry.body.get("keyid") == mine:
            found = ApprovalRecord.of_entry(entry.body)
            if found is not None:  # else not an approval: this key appends one now
                return entry, True, found
    statement = approval_statement(
        run, approver=approver, reason=reason, approved_at=now_utc(), run_signers=signers, trust=trust.sha256
    )
    record = approval_record(envelope_for(statement, key), key, statement)
    pred = ApprovalPredicate.model_validate(statement.predicate)
    about_run = {"manifest", "intervention", "claim", "commit", "verdict", "policies", "site_policy"}
    payload = {
        **record.dump(),
        "trust_policy": trust.digest,
        "run_entry": run_entry.seq if run_entry else None,
        "dossier_dir": str(directory.resolve()),
        **pred.model_dump(mode="json", include=about_run),
    }
    entry, _checkpoint = ledger.append(APPROVAL_KIND, payload)
    return entry, False, record


def render_approved(
    directory: Path, records: list[ApprovalRecord], required: int = 1, *, final_dir: Path | None = None
) -> list[Path]:
    """Render dossier.approved.html/.md beside the signed originals from the signed results.json and
    approvals (`final_dir`: where DIR will be once the run is complete)."""
    from gate.report.render import render_html, render_markdown

    data = approved_report(directory, records, required, final_dir=final_dir)
    return [
        write_bytes_atomic(directory / APPROVED_HTML, render_html(data).encode()),
        write_bytes_atomic(directory / APPROVED_MD, render_markdown(data).encode()),
    ]


def approved_report(
    directory: Path, records: list[ApprovalRecord], required: int = 1, *, final_dir: Path | None = None
) -> ReportData:
    """The report of DIR's signed run with its approvals among `records` (by statement or evidence)."""
    from gate.core.result import GateResult
    from gate.report.build import Signing, build_report

    result = GateResult.model_validate_json((directory / "results.json").read_bytes())
    run = read_run_statement(directory)
    envelope, _payload = read_envelope(directory / ENVELOPE_NAME)
    first = envelope.signatures[0].keyid if envelope.signatures else ""
    mine = [
        r for r in records if r.statement_sha256 == run.sha256 or (run.evidence and r.evidence_sha256 == run.evidence)
    ]
    return build_report(
        result,
        Signing(signed=True, keyid=first),
        approvals=[display_rows(r) for r in mine],
        out_dir=str(final_dir or directory),
        required_approvals=required,
    )
