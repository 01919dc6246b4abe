"""`gate approve`: verify an awaiting-approval dossier, then sign, record and show the approval.

See gate.trust.approvals for what an approval is and how it binds to the dossier. The trust policy
decides whose approval is accepted: the key must belong to an approver for the change's
intervention and claim, under the name given, and not be revoked; the run must be signed by a run
signer. Approvals of one dossier are serialised by an exclusive lock on DIR/.approve.lock (held
from reading the dossier to writing approval.dsse.json), and each ledger append is its own
transaction, so parallel `gate approve`s lose no signature or record and one key appends once.
"""

from __future__ import annotations

import fcntl
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from gate._util.atomic import write_bytes_atomic
from gate._util.clock import now_utc
from gate.trust.approvals import (
    APPROVAL_FILE,
    APPROVAL_KIND,
    APPROVED_ENVELOPE,
    APPROVED_HTML,
    APPROVED_MD,
    ApprovalRefused,
    RunStatement,
    approval_record,
    approval_statement,
    approved_statement,
    display_rows,
    load_approvals,
    read_run_statement,
    sign_envelope,
    verify_approval,
)
from gate.trust.attest import (
    ENVELOPE_NAME,
    add_signature,
    envelope_for,
    keyid,
    load_private_key,
    read_envelope,
    verify_envelope,
    write_envelope,
)
from gate.trust.ledger import RECEIPT, RUN_KIND, Entry, Ledger, receipt
from gate.trust.ledger_verify import verify_chain
from gate.trust.policy import Trust
from gate.trust.revocation import read_revocations

LOCK_NAME = ".approve.lock"


def clear_stale_records(directory: Path) -> None:
    """Remove a previous run's ledger receipt, approvals and approved copies from a re-used DIR."""
    for name in (RECEIPT, APPROVAL_FILE, APPROVED_HTML, APPROVED_MD, APPROVED_ENVELOPE):
        (directory / name).unlink(missing_ok=True)


@contextmanager
def dossier_lock(directory: Path) -> Iterator[None]:
    """An exclusive lock on the dossier directory (flock on DIR/.approve.lock), released on exit."""
    with (directory / LOCK_NAME).open("a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


@dataclass
class Approved:
    """What `approve` did."""

    record: dict[str, Any]
    """The approval record written to approval.json (envelope, public key, ledger receipt)."""
    entry: Entry
    written: list[Path]
    reused: bool
    """True when this key had already approved this dossier (nothing new was appended)."""


def find_run_entry(ledger: Ledger, statement_sha256: str) -> Entry | None:
    """The latest run entry whose dossier statement has this digest."""
    found = None
    for entry in ledger.entries(RUN_KIND):
        if (entry.body.get("dossier") or {}).get("statement_sha256") == statement_sha256:
            found = entry
    return found


def check_approvable(directory: Path, run_keys: dict[str, Ed25519PublicKey]) -> list[str]:
    """Verify the dossier against the run signers' keys and require an awaiting-approval verdict.

    Returns the key ids that verified; raises ApprovalRefused naming every problem.
    """
    if not run_keys:
        raise ApprovalRefused(f"{directory}: the trust policy names no run signer key to verify the run with")
    report = verify_envelope(directory, run_keys, require_all=False)
    if not report.valid:
        raise ApprovalRefused(f"{directory}: the dossier does not verify: " + "; ".join(report.problems))
    verdict = report.predicate.get("verdict")
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
    """Approve the dossier in `directory` (see gate.trust.approvals); refuses anything that does not verify.

    `trust`: the trust policy (None: $GATE_TRUST, else ./trust.yaml; none found is an InputError)."""
    if trust is None:
        from gate.trust.policy import require_trust

        trust = require_trust(None, "gate approve")
    key = load_private_key(key_path)
    mine = keyid(key.public_key())
    approver = approver if approver is not None else trust.name_of(mine)
    if not approver or not approver.strip() or not reason.strip():
        raise ApprovalRefused("an approval needs an approver name and a reason (non-blank)")
    with dossier_lock(directory):
        run = read_run_statement(directory)
        bad = trust.approver_problem(mine, approver, run.predicate.get("intervention"), _claim(run.predicate))
        if bad:
            raise ApprovalRefused(f"{bad} (trust policy {trust.path})")
        with Ledger.open(ledger_path, key_path=ledger_key) as ledger:
            chain = verify_chain(ledger)
            first = chain.first_bad()
            if first is not None:
                raise ApprovalRefused(f"{ledger_path}: the ledger does not verify: {first.message}")
            revoked = read_revocations(ledger, trust)
            run_entry = find_run_entry(ledger, run.sha256)
            run_keys = {
                i.name or k: i.public_key
                for k, i in trust.run_signer_keys().items()
                if revoked.key(k, run_entry.time if run_entry else None) is None
            }
            signers = check_approvable(directory, run_keys)
            if mine in signers:
                raise ApprovalRefused(
                    "the approver's key is the key that signed the run: an approval needs a second, independent key"
                )
            gone = revoked.key(mine, now_utc())
            if gone is not None:
                raise ApprovalRefused(f"key {mine[:16]} was {gone.says()}")
            entry, reused, record = _append_or_reuse(
                ledger, run, run_entry, directory, key, approver, reason, signers, trust
            )
            checkpoint = ledger.checkpoint(entry.seq)
            assert checkpoint is not None
            record["ledger"] = receipt(ledger, entry, checkpoint)
        add_signature(directory / ENVELOPE_NAME, key_path)
        records = [
            r
            for r in load_approvals(directory)
            if not (r.get("keyid") == record["keyid"] and r.get("statement_sha256") == run.sha256)
        ]
        records.append(record)
        written = [
            write_bytes_atomic(
                directory / APPROVAL_FILE, (json.dumps({"approvals": records}, indent=2) + "\n").encode()
            )
        ]
        check = verify_approval(record, expected_statement=run.sha256, directory=directory)
        if not check.ok:  # a bug, not a user error: say so loudly
            raise ApprovalRefused("the approval just written does not verify: " + "; ".join(check.problems))
        written += render_approved(directory, records, trust.policy.required_approvals)
        statement = approved_statement(directory, run, [str(r.get("keyid")) for r in records])
        written.append(write_envelope(directory / APPROVED_ENVELOPE, envelope_for(statement, key)))
    return Approved(record, entry, written, reused)


def _claim(pred: dict[str, Any]) -> Any:
    claim = pred.get("claim")
    return claim.get("level") if isinstance(claim, dict) else claim


def _append_or_reuse(
    ledger: Ledger,
    run: RunStatement,
    run_entry: Entry | None,
    directory: Path,
    key: Any,
    approver: str,
    reason: str,
    signers: list[str],
    trust: Trust,
) -> tuple[Entry, bool, dict[str, Any]]:
    """Append the approval, unless this key already approved this dossier (then reuse that entry)."""
    mine = keyid(key.public_key())
    for entry in ledger.entries(APPROVAL_KIND):
        body = entry.body
        if body.get("statement_sha256") == run.sha256 and body.get("keyid") == mine:
            record = {
                k: body[k]
                for k in ("approver", "reason", "approved_at", "statement_sha256", "keyid", "public_key", "envelope")
            }
            return entry, True, record
    statement = approval_statement(
        run, approver=approver, reason=reason, approved_at=now_utc(), run_signers=signers, trust=trust.sha256
    )
    record = approval_record(sign_envelope(statement, key), key, statement)
    pred = statement.predicate
    payload = {
        **record,
        "trust_policy": trust.digest,
        "run_entry": run_entry.seq if run_entry else None,
        "dossier_dir": str(directory.resolve()),
        "manifest": pred["manifest"],
        "intervention": pred["intervention"],
        "claim": pred["claim"],
        "commit": pred["commit"],
        "verdict": pred["verdict"],
    }
    entry, _checkpoint = ledger.append(APPROVAL_KIND, payload)
    return entry, False, record


def render_approved(directory: Path, records: list[dict[str, Any]], required: int = 1) -> list[Path]:
    """Re-render the dossier with its approvals as dossier.approved.html/.md beside the signed originals.

    The signed dossier.html cannot change (its digest is in the attestation); these copies are
    derived from the signed results.json and the signed approvals, so anyone can regenerate them.
    """
    from gate.core.result import GateResult
    from gate.report.build import Signing, build_report
    from gate.report.render import render_html, render_markdown

    result = GateResult.model_validate_json((directory / "results.json").read_bytes())
    run = read_run_statement(directory)
    envelope, _payload = read_envelope(directory / ENVELOPE_NAME)
    first = envelope.signatures[0].keyid if envelope.signatures else ""
    mine = [r for r in records if r.get("statement_sha256") == run.sha256]
    data = build_report(
        result,
        Signing(signed=True, keyid=first),
        approvals=[display_rows(r) for r in mine],
        out_dir=str(directory),
        required_approvals=required,
    )
    return [
        write_bytes_atomic(directory / APPROVED_HTML, render_html(data).encode()),
        write_bytes_atomic(directory / APPROVED_MD, render_markdown(data).encode()),
    ]
