"""Approvals: a reviewer's signed decision that an awaiting-approval dossier may ship.

An approval binds to the sha256 of the run's signed in-toto statement (the DSSE payload of
attestation.dsse.json, unchanged when signatures are added). `gate approve` records it three ways:
a second DSSE signature on attestation.dsse.json by the approver's key; its own statement
(APPROVAL_PREDICATE) in a DSSE envelope signed by that key; and a ledger entry of kind "approval"
holding that envelope, whose receipt goes into DIR/approval.json.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import BaseModel, ConfigDict, ValidationError

from gate._util.atomic import write_bytes_atomic
from gate._util.digest import sha256_file
from gate.trust.approval_predicate import (
    APPROVAL_FILE,
    APPROVAL_PREDICATE,
    APPROVED_ENVELOPE,
    APPROVED_FILES,
    APPROVED_PREDICATE,
    RUN_STATEMENT_SUBJECT,
    ApprovalPredicate,
    ApprovalRefused,
    ApprovedDossierPredicate,
    ApprovedManifest,
    RunStatement,
    read_run_statement,
)
from gate.trust.attest import ENVELOPE_NAME, check_files, read_envelope, verifies
from gate.trust.keys import keyid, public_key_b64, public_key_from_b64
from gate.trust.ledger import Receipt
from gate.trust.statement import (
    PAYLOAD_TYPE,
    STATEMENT_TYPE,
    Envelope,
    Statement,
    Subject,
    parse_statement,
)


def approval_statement(
    run: RunStatement, *, approver: str, reason: str, approved_at: str, run_signers: list[str], trust: str = ""
) -> Statement:
    pred = run.predicate
    return Statement(
        subject=[Subject(name=RUN_STATEMENT_SUBJECT, digest={"sha256": run.sha256}), *run.statement.subject],
        predicateType=APPROVAL_PREDICATE,
        predicate=ApprovalPredicate(
            decision="approved",
            approver=approver,
            reason=reason,
            approved_at=approved_at,
            run_statement_sha256=run.sha256,
            run_predicate_type=run.statement.predicateType,
            verdict=pred.verdict,
            manifest=ApprovedManifest(name=pred.manifest.name, sha256=pred.manifest.sha256),
            intervention=pred.intervention,
            claim=pred.claim_level,
            commit=run.commit,
            run_signers=run_signers,
            trust_policy_sha256=trust,
            evidence_sha256=run.evidence,
            policies=pred.policies,
            site_policy=pred.site_policy,
        ).dump(),
    )


def approved_statement(directory: Path, run: RunStatement, keyids: list[str]) -> Statement:
    """The approved-dossier statement: the files a reviewer reads after approval, by sha256."""
    subjects = [Subject(name=RUN_STATEMENT_SUBJECT, digest={"sha256": run.sha256})]
    subjects += [Subject(name=n, digest={"sha256": sha256_file(directory / n)}) for n in APPROVED_FILES]
    return Statement(
        subject=subjects,
        predicateType=APPROVED_PREDICATE,
        predicate=ApprovedDossierPredicate(
            run_statement_sha256=run.sha256, approval_keyids=sorted(keyids), commit=run.commit
        ).model_dump(mode="json", by_alias=True),
    )


def check_approved_files(
    directory: Path, run_sha256: str, counted: Mapping[str, Ed25519PublicKey]
) -> tuple[list[str], list[str]]:
    """Verify DIR/approval.dsse.json against the approved files: (matched names, problems)."""
    if not (present := [n for n in (*APPROVED_FILES, APPROVED_ENVELOPE) if (directory / n).exists()]):
        return [], []
    path = directory / APPROVED_ENVELOPE
    if not path.is_file():
        return [], [f"{', '.join(present)}: covered by no signed statement ({APPROVED_ENVELOPE} is missing)"]
    try:
        envelope, payload = read_envelope(path)
        stmt = parse_statement(payload)
    except ValueError as err:
        return [], [f"{APPROVED_ENVELOPE}: {err}"]
    problems: list[str] = []
    signers = [k for k, pub in counted.items() if any(verifies(pub, payload, s.sig) for s in envelope.signatures)]
    if not signers:
        problems.append(f"{APPROVED_ENVELOPE}: not signed by an approver whose approval counts")
    try:
        named = ApprovedDossierPredicate.model_validate(stmt.predicate).run_statement_sha256
    except ValidationError:
        named = None
    if stmt.predicateType != APPROVED_PREDICATE or named != run_sha256:
        problems.append(f"{APPROVED_ENVELOPE}: not an approved-dossier statement for this run")
    files = {n: d for n, d in stmt.files().items() if n != RUN_STATEMENT_SUBJECT}
    if missing := [n for n in APPROVED_FILES if n not in files]:
        problems.append(f"{APPROVED_ENVELOPE}: does not bind {', '.join(missing)}")
    matched: list[str] = []
    check_files(directory, files, matched, problems)
    return matched, problems


MALFORMED = "the approval record is malformed"


@dataclass
class ApprovalCheck:
    """What `verify_approval` found."""

    approver: str = ""
    reason: str = ""
    approved_at: str = ""
    keyid: str = ""
    statement_sha256: str = ""
    """The run statement the approval names."""
    evidence_sha256: str = ""
    """The approved run's evidence digest; empty for an older approval."""
    carried: bool = False
    """True when it counts for another run with the same evidence (not the run it was given)."""
    site_policy: list[str] = field(default_factory=list)
    intervention: str | None = None
    claim: str | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_approval(
    record: ApprovalRecord | None,
    *,
    expected_statement: str | None = None,
    expected_evidence: str | None = None,
    trusted_keyids: list[str] | None = None,
    directory: Path | None = None,
) -> ApprovalCheck:
    """Verify one approval record offline (None: an entry that holds no well-formed record). It must name
    `expected_statement`, or else carry over (`carried`) with the same `expected_evidence`; with
    `directory`, that run's attestation must carry the approver's signature unless it carried over."""
    out = ApprovalCheck()
    if record is None:
        out.problems.append(MALFORMED)
        return out
    try:
        pub = public_key_from_b64(record.public_key)
        envelope = record.envelope
        payload = envelope.payload_bytes()
        statement = parse_statement(payload)
    except ValueError:
        out.problems.append(MALFORMED)
        return out
    out.keyid = keyid(pub)
    if envelope.payloadType != PAYLOAD_TYPE:
        out.problems.append(f"approval payloadType is {envelope.payloadType!r}")
    if not any(verifies(pub, payload, s.sig) for s in envelope.signatures):
        out.problems.append(f"the approval is not signed by key {out.keyid[:16]} (forged or wrong key)")
    if trusted_keyids is not None and out.keyid not in trusted_keyids:
        out.problems.append(f"approval key {out.keyid[:16]} is not a trusted approver key")
    if statement.type != STATEMENT_TYPE or statement.predicateType != APPROVAL_PREDICATE:
        out.problems.append("the envelope does not hold a gate approval statement")
        return out
    try:
        pred = ApprovalPredicate.model_validate(statement.predicate)
    except ValidationError:
        out.problems.append("the approval statement's predicate is malformed")
        return out
    out.approver, out.reason, out.approved_at = pred.approver, pred.reason, pred.approved_at
    out.intervention, out.claim = pred.intervention, pred.claim
    out.evidence_sha256 = pred.evidence_sha256 or ""
    out.site_policy = pred.site_policy
    named = [s.digest.get("sha256") for s in statement.subject if s.name == RUN_STATEMENT_SUBJECT]
    out.statement_sha256 = str(named[0]) if named else ""
    if not named or pred.run_statement_sha256 != out.statement_sha256:
        out.problems.append("the approval names no run statement")
    if pred.decision != "approved" or pred.verdict != "awaiting-approval":
        out.problems.append(f"the approval is for a {pred.verdict!r} run, not an awaiting-approval one")
    for key, shown, signed in (("approver", record.approver, pred.approver), ("reason", record.reason, pred.reason)):
        if shown != signed:
            out.problems.append(f"the record's {key} differs from the signed statement's")
    if expected_statement is not None and out.statement_sha256 != expected_statement:
        if expected_evidence and out.evidence_sha256 == expected_evidence:
            out.carried = True
        else:
            out.problems.append(
                f"the approval is for another dossier (statement {out.statement_sha256[:16]}, "
                f"this one is {expected_statement[:16]}) with other evidence (evidence "
                f"{out.evidence_sha256[:16] or 'not bound'}, this one is {(expected_evidence or 'not bound')[:16]})"
            )
    if directory is not None and not out.carried:
        found = _second_signature_problems(directory, pub, out.statement_sha256)
        if found and expected_evidence and out.evidence_sha256 == expected_evidence:
            out.carried = True  # a byte-identical re-run: its attestation is new, the evidence the same
        else:
            out.problems += found
    return out


def _second_signature_problems(directory: Path, pub: Ed25519PublicKey, statement_sha256: str) -> list[str]:
    try:
        run = read_run_statement(directory)
        envelope, _payload = read_envelope(directory / ENVELOPE_NAME)
    except (ApprovalRefused, ValueError):
        return [f"{directory}: no readable run attestation"]
    if run.sha256 != statement_sha256:
        return [f"{directory}: its run statement is not the one approved"]
    if not any(verifies(pub, run.payload, s.sig) for s in envelope.signatures):
        return [f"{ENVELOPE_NAME} carries no signature by the approver's key"]
    return []


class ApprovalRecord(BaseModel):
    """One approval as approval.json holds it and its ledger entry carries it (the signed envelope counts;
    the plain fields repeat it). `dump` writes the keys it was read with, so approval.json keeps its bytes."""

    model_config = ConfigDict(extra="forbid")

    approver: str
    reason: str
    approved_at: str
    statement_sha256: str | None
    evidence_sha256: str | None = None
    """None: the run binds none, or the record is older than evidence binding."""
    keyid: str
    public_key: str
    """The approver's raw public key, base64."""
    envelope: Envelope
    """The approval statement (APPROVAL_PREDICATE) in a DSSE envelope signed by that key."""
    ledger: Receipt | None = None
    """The ledger receipt of the approval's entry; only in approval.json."""

    @classmethod
    def of_entry(cls, body: Mapping[str, Any]) -> ApprovalRecord | None:
        """The record an approval entry's body carries (None: no well-formed one)."""
        try:
            return cls.model_validate({k: body[k] for k in RECORD_FIELDS if k in body})
        except ValidationError:
            return None

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True)


RECORD_FIELDS = tuple(name for name in ApprovalRecord.model_fields if name != "ledger")
"""The fields of an approval record (approval.json) that its ledger entry also keeps."""


def load_approvals(directory: Path) -> list[ApprovalRecord]:
    """The records in DIR/approval.json (none without one); ApprovalRefused when unreadable."""
    path = directory / APPROVAL_FILE
    if not path.is_file():
        return []
    try:
        return ApprovalFile.model_validate_json(path.read_bytes()).approvals
    except (OSError, ValueError):  # ValidationError is a ValueError
        raise ApprovalRefused(f"{path}: not a readable approval file") from None


class ApprovalFile(BaseModel):
    """DIR/approval.json."""

    model_config = ConfigDict(extra="forbid")

    approvals: list[ApprovalRecord]

    def dump(self) -> bytes:
        return (json.dumps({"approvals": [r.dump() for r in self.approvals]}, indent=2) + "\n").encode()


def write_approvals(directory: Path, records: list[ApprovalRecord]) -> Path:
    return write_bytes_atomic(directory / APPROVAL_FILE, ApprovalFile(approvals=records).dump())


def approval_record(envelope: Envelope, key: Ed25519PrivateKey, statement: Statement) -> ApprovalRecord:
    pred = ApprovalPredicate.model_validate(statement.predicate)
    return ApprovalRecord(
        approver=pred.approver,
        reason=pred.reason,
        approved_at=pred.approved_at,
        statement_sha256=pred.run_statement_sha256,
        evidence_sha256=pred.evidence_sha256,
        keyid=keyid(key.public_key()),
        public_key=public_key_b64(key.public_key()),
        envelope=envelope,
    )


def display_rows(record: ApprovalRecord) -> dict[str, str]:
    """One approval as the dossier's 'Waivers and approvals' section shows it."""
    entry = record.ledger.entry if record.ledger is not None else None
    return {
        "approver": record.approver,
        "reason": record.reason,
        "approved at": record.approved_at,
        "key id": record.keyid,
        "dossier digest": f"sha256:{record.statement_sha256}",
        "evidence digest": f"sha256:{record.evidence_sha256}" if record.evidence_sha256 else "not bound",
        "ledger entry": f"#{entry.seq} ({entry.hash[:16]})" if entry is not None else "not recorded",
        "verify": "gate audit trace DIGEST --trust trust.yaml, or gate verify DIR --trust trust.yaml",
    }
