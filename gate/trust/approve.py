"""`gate approve`: verify an awaiting-approval dossier, then sign, record and show the approval.

See gate.trust.approvals for what an approval is and how it binds to the dossier.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gate._util.atomic import write_bytes_atomic
from gate._util.clock import now_utc
from gate.trust.approvals import (
    APPROVAL_FILE,
    APPROVAL_KIND,
    ApprovalRefused,
    RunStatement,
    approval_record,
    approval_statement,
    display_rows,
    load_approvals,
    read_run_statement,
    sign_envelope,
    verify_approval,
)
from gate.trust.attest import ENVELOPE_NAME, add_signature, keyid, load_private_key, verify_envelope
from gate.trust.ledger import RECEIPT, RUN_KIND, Entry, Ledger, receipt
from gate.trust.ledger_verify import verify_chain
from gate.trust.run_record import recorded_signer_key

APPROVED_HTML = "dossier.approved.html"
APPROVED_MD = "dossier.approved.md"


def clear_stale_records(directory: Path) -> None:
    """Remove a previous run's ledger receipt, approvals and approved copies from a re-used DIR."""
    for name in (RECEIPT, APPROVAL_FILE, APPROVED_HTML, APPROVED_MD):
        (directory / name).unlink(missing_ok=True)


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


def check_approvable(directory: Path, run: RunStatement, run_keys: dict[str, Path]) -> list[str]:
    """Verify the dossier against trusted run keys and require an awaiting-approval verdict.

    Returns the key ids that verified; raises ApprovalRefused naming every problem.
    """
    if not run_keys:
        raise ApprovalRefused(
            f"{directory}: no trusted key to verify the run with: give --run-key RUN.pub, or record "
            "the run in the ledger (gate run --sign-key KEY --ledger PATH)"
        )
    report = verify_envelope(directory, run_keys, require_all=False)
    if not report.valid:
        raise ApprovalRefused(f"{directory}: the dossier does not verify: " + "; ".join(report.failures))
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
    approver: str,
    reason: str,
    key_path: Path,
    ledger_path: Path,
    ledger_key: Path | None = None,
    run_keys: list[Path] | None = None,
) -> Approved:
    """Approve the dossier in `directory` (see gate.trust.approvals); refuses anything that does not verify."""
    if not approver.strip() or not reason.strip():
        raise ApprovalRefused("an approval needs an approver name and a reason")
    run = read_run_statement(directory)
    key = load_private_key(key_path)
    with Ledger.open(ledger_path, key_path=ledger_key) as ledger:
        chain = verify_chain(ledger)
        bad = chain.first_bad()
        if bad is not None:
            raise ApprovalRefused(f"{ledger_path}: the ledger does not verify: {bad.message}")
        run_entry = find_run_entry(ledger, run.sha256)
        seq, body = (run_entry.seq, run_entry.body) if run_entry else (0, {})  # no entry: nothing recorded
        with recorded_signer_key(seq, body) as recorded:
            trusted = {str(p): p for p in run_keys} if run_keys else recorded
            signers = check_approvable(directory, run, trusted)
        if keyid(key.public_key()) in signers:
            raise ApprovalRefused(
                "the approver's key is the key that signed the run: an approval needs a second, independent key"
            )
        entry, reused, record = _append_or_reuse(ledger, run, run_entry, directory, key, approver, reason, signers)
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
        write_bytes_atomic(directory / APPROVAL_FILE, (json.dumps({"approvals": records}, indent=2) + "\n").encode())
    ]
    check = verify_approval(record, expected_statement=run.sha256, directory=directory)
    if not check.ok:  # a bug, not a user error: say so loudly
        raise ApprovalRefused("the approval just written does not verify: " + "; ".join(check.problems))
    written += render_approved(directory, records)
    return Approved(record, entry, written, reused)


def _append_or_reuse(
    ledger: Ledger,
    run: RunStatement,
    run_entry: Entry | None,
    directory: Path,
    key: Any,
    approver: str,
    reason: str,
    signers: list[str],
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
    statement = approval_statement(run, approver=approver, reason=reason, approved_at=now_utc(), run_signers=signers)
    record = approval_record(sign_envelope(statement, key), key, statement)
    pred = statement["predicate"]
    payload = {
        **record,
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


def render_approved(directory: Path, records: list[dict[str, Any]]) -> list[Path]:
    """Re-render the dossier with its approvals as dossier.approved.html/.md beside the signed originals.

    The signed dossier.html cannot change (its digest is in the attestation); these copies are
    derived from the signed results.json and the signed approvals, so anyone can regenerate them.
    """
    from gate.core.result import GateResult
    from gate.report.build import Signing, build_report
    from gate.report.render import render_html, render_markdown

    result = GateResult.model_validate_json((directory / "results.json").read_bytes())
    run = read_run_statement(directory)
    envelope = json.loads((directory / ENVELOPE_NAME).read_bytes())
    first = (envelope.get("signatures") or [{}])[0]
    mine = [r for r in records if r.get("statement_sha256") == run.sha256]
    data = build_report(
        result, Signing(signed=True, keyid=str(first.get("keyid"))), approvals=[display_rows(r) for r in mine]
    )
    names = ", ".join(str(r.get("approver")) for r in mine)
    banner = replace(
        data.banner,
        label="APPROVED",
        tone="good",
        summary=f"{data.banner.summary}; approved by {names} (signed approval, see below)",
    )
    data = replace(data, banner=banner)
    return [
        write_bytes_atomic(directory / APPROVED_HTML, render_html(data).encode()),
        write_bytes_atomic(directory / APPROVED_MD, render_markdown(data).encode()),
    ]
