"""What an approval names and is read with: its constants, predicates and the run's signed statement
(`read_run_statement`); gate.trust.approvals signs and verifies approvals with them."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gate.errors import EXIT_GATE_FAILED, GateError
from gate.trust.attest import ENVELOPE_NAME, read_envelope
from gate.trust.statement import RunPredicate, Statement, parse_statement

APPROVAL_KIND = "approval"
APPROVAL_PREDICATE = "https://gate.dev/approval/v1"
APPROVAL_FILE = "approval.json"
APPROVED_HTML = "dossier.approved.html"
APPROVED_MD = "dossier.approved.md"
APPROVED_ENVELOPE = "approval.dsse.json"
APPROVED_PREDICATE = "https://gate.dev/approved-dossier/v1"
APPROVED_FILES = (APPROVAL_FILE, APPROVED_HTML, APPROVED_MD)
"""What a reviewer reads after approval; the approved-dossier statement (APPROVED_ENVELOPE) binds them."""
RUN_STATEMENT_SUBJECT = f"{ENVELOPE_NAME}#payload"
"""Subject name under which an approval names the run statement's digest."""


class ApprovalRefused(GateError):
    """The dossier cannot be approved (does not verify, failed, already final): exit 1."""

    exit_code = EXIT_GATE_FAILED


class ApprovedManifest(BaseModel):
    """The manifest of the run an approval approves, as the approval names it."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    sha256: str | None = None


class ApprovalPredicate(BaseModel):
    """The predicate of an approval statement (APPROVAL_PREDICATE)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    decision: str = ""
    """Always `approved`."""
    approver: str = ""
    reason: str = ""
    approved_at: str = Field(default="", alias="approvedAt")
    run_statement_sha256: str | None = Field(default=None, alias="runStatementSha256")
    """sha256 of the approved run statement's payload bytes."""
    run_predicate_type: str | None = Field(default=None, alias="runPredicateType")
    verdict: str | None = None
    manifest: ApprovedManifest = Field(default_factory=ApprovedManifest)
    intervention: str | None = None
    claim: str | None = None
    """The approved run's claim level."""
    commit: str | None = None
    run_signers: list[str] = Field(default_factory=list, alias="runSigners")
    trust_policy_sha256: str = Field(default="", alias="trustPolicySha256")
    evidence_sha256: str | None = Field(default=None, alias="evidenceSha256")
    """The approved run's evidence digest (gate.trust.evidence); None for a run that binds none."""
    policies: list[dict[str, Any]] = Field(default_factory=list)
    site_policy: list[str] = Field(default_factory=list, alias="sitePolicy")
    """How a site policy changed the approved run's rule (the approver saw this)."""

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


class ApprovedDossierPredicate(BaseModel):
    """The predicate of the approved-dossier statement (APPROVED_PREDICATE)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    run_statement_sha256: str | None = Field(default=None, alias="runStatementSha256")
    approval_keyids: list[str] = Field(default_factory=list, alias="approvalKeyids")
    """Key ids of the approvals shown, sorted."""
    commit: str | None = None


@dataclass(frozen=True)
class RunStatement:
    """The run's signed statement, as read from attestation.dsse.json (unverified until checked)."""

    payload: bytes
    sha256: str
    statement: Statement
    predicate: RunPredicate

    @property
    def commit(self) -> str | None:
        return self.statement.commit

    @property
    def evidence(self) -> str | None:
        """The run's evidence digest (gate.trust.evidence), when its statement carries one."""
        return self.predicate.evidence_sha256 or None


def read_run_statement(directory: Path) -> RunStatement:
    """The statement inside DIR/attestation.dsse.json; ApprovalRefused when absent or unreadable."""
    path = directory / ENVELOPE_NAME
    if not path.is_file():
        raise ApprovalRefused(f"{directory}: no {ENVELOPE_NAME}: an UNSIGNED run cannot be approved")
    try:
        _envelope, payload = read_envelope(path)
        statement = parse_statement(payload)
        predicate = RunPredicate.read(statement)
    except ValueError as err:
        raise ApprovalRefused(f"{path}: not a readable DSSE envelope ({err})") from None
    return RunStatement(payload, hashlib.sha256(payload).hexdigest(), statement, predicate)
