"""Auditing the ledger offline: verify every record, and trace a deployed change to its evidence.

`verify_ledger` checks the hash chain and checkpoints (gate.trust.ledger_verify), then each entry's own
signatures: an approval's DSSE envelope and the run it names, a waiver's optional signature.
`trace` starts from a commit or a digest and finds the run(s), their dossiers, approvals and waivers,
verifying each: the dossier's files against the digests the ledger recorded, its attestation
against the run signer, each approval against the dossier, and the receipts the dossier holds
(ledger.json, approval.json) as checkpoints the ledger must still match.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gate.trust.approvals import APPROVAL_FILE, APPROVAL_KIND, verify_approval
from gate.trust.ledger import RECEIPT, RUN_KIND, Checkpoint, Entry, Ledger
from gate.trust.ledger_verify import ChainReport, Findings, Problem, verify_chain
from gate.trust.waivers import WAIVER_KIND, WaiverGrant, check_waiver_signature

MIN_REF = 7
"""Shortest commit or digest prefix `trace` accepts (git's short hash)."""


@dataclass
class AuditReport(Findings):
    """The chain report plus each entry's own signature checks."""

    chain: ChainReport
    problems: list[Problem] = field(default_factory=list)
    """Chain problems and entry problems together."""


def held_checkpoints(path: Path) -> list[Checkpoint]:
    """Checkpoints kept outside the ledger: a checkpoint file, a receipt (ledger.json), an approval.json,
    or a dossier directory holding those."""
    if path.is_dir():
        return [
            cp for name in (RECEIPT, APPROVAL_FILE) if (path / name).is_file() for cp in held_checkpoints(path / name)
        ]
    data = json.loads(path.read_bytes())
    if isinstance(data, dict) and "approvals" in data:
        return [
            Checkpoint.model_validate(r["ledger"]["checkpoint"])
            for r in data["approvals"]
            if isinstance(r, dict) and isinstance(r.get("ledger"), dict)
        ]
    if isinstance(data, dict) and "checkpoint" in data:
        return [Checkpoint.model_validate(data["checkpoint"])]
    return [Checkpoint.model_validate(data)]


def _entry_problems(entry: Entry, statements: dict[int, str], approver_keyids: list[str] | None) -> list[str]:
    body = entry.body
    if entry.kind == APPROVAL_KIND:
        check = verify_approval(
            body, expected_statement=str(body.get("statement_sha256")), trusted_keyids=approver_keyids
        )
        problems = list(check.problems)
        run = body.get("run_entry")
        if run is not None and statements.get(int(run)) != body.get("statement_sha256"):
            problems.append(f"it names run entry #{run}, whose dossier has another digest")
        return problems
    if entry.kind == WAIVER_KIND:
        try:
            grant = WaiverGrant.model_validate({k: v for k, v in body.items() if k not in ("kind", "time")})
        except ValidationError as err:
            return [f"malformed waiver ({err.error_count()} errors)"]
        bad = check_waiver_signature(grant, approver_keyids)
        return [f"waiver signature: {bad}"] if bad else []
    if entry.kind == RUN_KIND:
        missing = [k for k in ("manifest", "verdict", "dossier") if k not in body]
        return [f"run entry lacks {', '.join(missing)}"] if missing else []
    return []


def verify_ledger(
    ledger: Ledger,
    *,
    trusted: list[Checkpoint] | None = None,
    pinned_keyids: list[str] | None = None,
    approver_keyids: list[str] | None = None,
) -> AuditReport:
    """Chain, checkpoints (stored and held), and every entry's own signatures."""
    chain = verify_chain(ledger, trusted=trusted, pinned_keyids=pinned_keyids)
    report = AuditReport(chain=chain, problems=list(chain.problems))
    statements: dict[int, str] = {}
    for entry in ledger.entries():
        if entry.seq > chain.verified:
            break
        if entry.kind == RUN_KIND:
            statements[entry.seq] = str((entry.body.get("dossier") or {}).get("statement_sha256"))
        for message in _entry_problems(entry, statements, approver_keyids):
            report.problems.append(Problem(entry.seq, f"entry {entry.seq} ({entry.kind}): {message}"))
    return report


# --- finding ------------------------------------------------------------------------------------


def _normalise(ref: str) -> str:
    ref = ref.strip().lower()
    return ref.split(":", 1)[1] if ref.startswith("sha256:") else ref


def run_digests(body: dict[str, Any]) -> list[str]:
    """Every digest a run entry can be found by: commit, dossier statement, files, manifest."""
    dossier = body.get("dossier") or {}
    found = [
        (body.get("change") or {}).get("commit"),
        dossier.get("statement_sha256"),
        (body.get("manifest") or {}).get("sha256"),
        *(dossier.get("files") or {}).values(),
    ]
    return [str(d).lower() for d in found if d]


def find_runs(ledger: Ledger, ref: str) -> list[Entry]:
    """Run entries whose commit or any recorded digest starts with `ref` (at least MIN_REF characters)."""
    ref = _normalise(ref)
    if len(ref) < MIN_REF:
        return []
    return [e for e in ledger.entries(RUN_KIND) if any(d.startswith(ref) for d in run_digests(e.body))]


def approvals_for(ledger: Ledger, statement_sha256: str) -> list[Entry]:
    return [e for e in ledger.entries(APPROVAL_KIND) if e.body.get("statement_sha256") == statement_sha256]


def waivers_for(ledger: Ledger, run: Entry) -> list[Entry]:
    """The waivers the run applied, and any other waiver granted for its exact manifest."""
    manifest = run.body.get("manifest") or {}
    applied = set(run.body.get("waivers") or [])
    return [
        e
        for e in ledger.entries(WAIVER_KIND)
        if e.seq in applied
        or (
            e.body.get("manifest_name") == manifest.get("name")
            and e.body.get("manifest_sha256") == manifest.get("sha256")
        )
    ]


# --- tracing --------------------------------------------------------------------------------------


@dataclass
class Finding:
    """One line of a trace: `ok` true (verified), false (failed) or None (information)."""

    ok: bool | None
    text: str


@dataclass
class RunTrace:
    run: Entry
    dossier: Path
    findings: list[Finding] = field(default_factory=list)
    approvals: list[Entry] = field(default_factory=list)
    waivers: list[Entry] = field(default_factory=list)
    approved_by: list[str] = field(default_factory=list)
    """Approvers whose approval verified."""

    @property
    def status(self) -> str:
        """The run's standing: its verdict, or APPROVED / NOT APPROVED for an awaiting-approval run."""
        verdict = str(self.run.body.get("verdict"))
        if verdict != "awaiting-approval":
            return verdict.upper()
        return f"APPROVED by {', '.join(self.approved_by)}" if self.approved_by else "AWAITING APPROVAL (not approved)"

    @property
    def ok(self) -> bool:
        return all(f.ok is not False for f in self.findings)


@contextmanager
def _signer_keys(run: Entry, trusted: list[Path]) -> Iterator[dict[str, Path]]:
    """Keys the dossier must be signed by: the given ones, else the signer the ledger recorded."""
    if trusted:
        yield {str(p): p for p in trusted}
        return
    from gate.trust.run_record import recorded_signer_key

    with recorded_signer_key(run.seq, run.body) as recorded:
        yield recorded


def _check_dossier(trace: RunTrace, trusted: list[Path]) -> None:
    from gate.trust.attest import ENVELOPE_NAME, sha256_file, verify_envelope

    run, out = trace.run, trace.dossier
    dossier = run.body.get("dossier") or {}
    add = trace.findings.append
    if not out.is_dir():
        add(Finding(False, f"dossier {out} not found (copy it here or pass --dossier DIR)"))
        return
    for name, digest in sorted((dossier.get("files") or {}).items()):
        if name == ENVELOPE_NAME:
            continue  # approvals add signatures to it; its signed statement is checked below
        path = out / name
        if not path.is_file():
            add(Finding(False, f"{name}: missing from the dossier"))
        elif sha256_file(path) != digest:
            add(Finding(False, f"{name}: differs from the sha256 the ledger recorded"))
        else:
            add(Finding(True, f"{name}: sha256 matches the ledger"))
    if not dossier.get("statement_sha256"):
        add(Finding(False, "the run was recorded UNSIGNED: nothing binds its dossier"))
        return
    with _signer_keys(run, trusted) as keys:
        if not keys:
            add(Finding(False, "no key to verify the attestation (pass --key RUN.pub)"))
            return
        report = verify_envelope(out, keys, require_all=False)
    from gate.trust.run_record import statement_digest

    if statement_digest(out / ENVELOPE_NAME) != dossier["statement_sha256"]:
        add(Finding(False, f"{ENVELOPE_NAME}: its statement is not the one the ledger recorded"))
    for failure in report.failures:
        add(Finding(False, f"attestation: {failure}"))
    for signer in report.signed_by:
        add(Finding(True, f"attestation signed by {signer.label} (keyid {signer.keyid[:16]})"))


def trace(
    ledger: Ledger,
    ref: str,
    *,
    dossier: Path | None = None,
    trusted_keys: list[Path] | None = None,
    approver_keyids: list[str] | None = None,
) -> tuple[AuditReport, list[RunTrace]]:
    """From a commit or digest to each matching run's dossier, approvals and waivers, all verified."""
    runs = find_runs(ledger, ref)
    traces = []
    held: list[Checkpoint] = []
    for run in runs:
        out = dossier or Path(str((run.body.get("dossier") or {}).get("dir", "")))
        item = RunTrace(run=run, dossier=out)
        _check_dossier(item, trusted_keys or [])
        statement = str((run.body.get("dossier") or {}).get("statement_sha256"))
        item.approvals = approvals_for(ledger, statement)
        run_signer = (run.body.get("signer") or {}).get("keyid")
        for approval in item.approvals:
            check = verify_approval(
                approval.body,
                expected_statement=statement,
                trusted_keyids=approver_keyids,
                directory=out if out.is_dir() else None,
            )
            if run_signer and check.keyid == run_signer:
                check.problems.append("approved by the key that signed the run (an approval needs a second key)")
            who = f"approval #{approval.seq} by {check.approver} ({check.approved_at}, key {check.keyid[:16]})"
            if check.ok:
                item.approved_by.append(check.approver)
            item.findings.append(Finding(check.ok, who + ("" if check.ok else ": " + "; ".join(check.problems))))
        if run.body.get("verdict") == "awaiting-approval" and not item.approvals:
            item.findings.append(Finding(None, "awaiting approval: no approval is recorded"))
        item.waivers = waivers_for(ledger, run)
        if out.is_dir():
            try:
                held += held_checkpoints(out)
            except (ValueError, KeyError, TypeError, ValidationError):
                item.findings.append(Finding(False, f"{out}: its ledger receipts are unreadable"))
        traces.append(item)
    return verify_ledger(ledger, trusted=held, approver_keyids=approver_keyids), traces
