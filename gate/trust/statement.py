"""The wire formats of a signed run: a DSSE v1 envelope around an in-toto Statement v1 whose subjects
are file digests, the change's commit and the baseline (signed and verified in gate.trust.attest), and
its gate predicate (`RunPredicate`), written by `gate run` and read back by verify, approve and the
ledger. The predicate's keys are camelCase as signed; statements signed before the model existed
validate into it unchanged (tests/trust/test_keys.py holds one)."""

from __future__ import annotations

import base64
import binascii
import json
from collections import Counter
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gate.core.result import GateResult

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://gate.dev/release-gate/v1"
BASELINE_SUBJECT = "baseline:"
"""Subject name prefix of the recorded baseline a run's reference answers came from."""


class DsseSignature(BaseModel):
    """The signer's key id and base64 Ed25519 signature over PAE(type, payload)."""

    model_config = ConfigDict(extra="allow")

    keyid: str = ""
    sig: str


class Envelope(BaseModel):
    """A DSSE v1 envelope (https://github.com/secure-systems-lab/dsse)."""

    model_config = ConfigDict(extra="forbid")

    payloadType: str
    payload: str
    signatures: list[DsseSignature]

    def payload_bytes(self) -> bytes:
        try:
            return base64.b64decode(self.payload, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("payload is not valid base64") from None

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class Subject(BaseModel):
    """An in-toto ResourceDescriptor as gate uses it: a name and its digests."""

    model_config = ConfigDict(extra="allow")

    name: str = ""
    digest: dict[str, str] = Field(default_factory=dict)


class Statement(BaseModel):
    """An in-toto Statement v1 (https://github.com/in-toto/attestation/blob/main/spec/v1/statement.md)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    type: str = Field(default=STATEMENT_TYPE, alias="_type")
    subject: list[Subject] = Field(min_length=1)
    predicateType: str
    predicate: dict[str, Any] = Field(default_factory=dict)

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)

    def canonical(self) -> bytes:
        return json.dumps(self.dump(), sort_keys=True, separators=(",", ":")).encode()

    @property
    def commit(self) -> str | None:
        return next((s.digest["gitCommit"] for s in self.subject if s.digest.get("gitCommit")), None)

    def files(self) -> dict[str, str]:
        """name -> sha256 of every file subject (the baseline subject names no file here)."""
        return {
            s.name: s.digest["sha256"]
            for s in self.subject
            if "sha256" in s.digest and not s.name.startswith(BASELINE_SUBJECT)
        }


def parse_statement(payload: bytes) -> Statement:
    try:
        return Statement.model_validate_json(payload)
    except ValidationError as err:
        raise ValueError(f"payload is not an in-toto statement ({first_error(err, '(statement)')})") from None


def first_error(err: ValidationError, whole: str) -> str:
    """`where: what` of a validation error's first problem (`whole`: where the value itself is wrong)."""
    first = err.errors(include_url=False)[0]
    return f"{'.'.join(str(p) for p in first['loc']) or whole}: {first['msg']}"


class PredicateManifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    file: str | None = None
    """The manifest copy among the signed subjects (a name inside the dossier directory)."""
    sha256: str | None = None
    path: str | None = None


class PredicateCheck(BaseModel):
    model_config = ConfigDict(extra="forbid")

    check: str | None = None
    status: str | None = None
    severity: str | None = None
    step: int | None = None
    controls: dict[str, str | None] = Field(default_factory=dict)


class RunPredicate(BaseModel):
    """The gate predicate of a run's statement (PREDICATE_TYPE), from the signed results.json bytes."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    verdict: str | None = None
    exit_code: int | None = Field(default=None, alias="exitCode")
    summary: str = ""
    intervention: str | None = None
    claim: dict[str, Any] | None = None
    approximate: bool = False
    """Whether the plan judged the change approximate (it then needs approvals)."""
    manifest: PredicateManifest = Field(default_factory=PredicateManifest)
    policies: list[dict[str, Any]] = Field(default_factory=list)
    site_policy: list[str] = Field(default_factory=list, alias="sitePolicy")
    """How a site policy changed the rule the run was planned by."""
    subjects: dict[str, Any] = Field(default_factory=dict)
    datasets: dict[str, str] = Field(default_factory=dict)
    checks: list[PredicateCheck] = Field(default_factory=list)
    counts: dict[str, int] = Field(default_factory=dict)
    gate_version: str | None = Field(default=None, alias="gateVersion")
    started_at: str | None = Field(default=None, alias="startedAt")
    finished_at: str | None = Field(default=None, alias="finishedAt")
    trust_policy: dict[str, Any] | None = Field(default=None, alias="trustPolicy")
    """The trust policy the run was made under (path, sha256): the verifier re-judges under its own."""
    baseline: dict[str, Any] | None = None
    """The recorded reference a replay answered from (path, sha256, signer key id, commit, manifest,
    adapter): the verifier re-judges its signer under its own trust policy."""
    evidence_sha256: str | None = Field(default=None, alias="evidenceSha256")
    """The run's evidence digest (gate.trust.evidence), that an approval binds to; absent in
    statements signed before approvals bound to evidence."""

    @property
    def claim_level(self) -> str | None:
        level = self.claim.get("level") if self.claim is not None else None
        return None if level is None else str(level)

    @classmethod
    def of_run(cls, result: GateResult, manifest_file: str) -> RunPredicate:
        return cls(
            verdict=result.verdict.value,
            exit_code=result.exit_code,
            summary=result.summary,
            intervention=result.manifest.get("intervention"),
            claim=result.manifest.get("claim"),
            approximate=bool(result.plan.get("approximate")),
            manifest=PredicateManifest(
                name=result.manifest.get("name"),
                file=manifest_file,
                sha256=result.manifest_digest.sha256,
                path=result.manifest_digest.path,
            ),
            policies=[p.model_dump(mode="json") for p in result.policies],
            site_policy=list(result.site_policy),
            subjects=result.subjects,
            datasets=result.datasets,
            checks=[
                PredicateCheck(
                    check=c.check,
                    status=c.status.value,
                    severity=c.severity,
                    step=c.step,
                    controls={x.fault: x.outcome.value for x in c.controls},
                )
                for c in result.checks
            ],
            counts=dict(Counter(c.status.value for c in result.checks)),
            trust_policy=result.trust_policy.model_dump(mode="json") if result.trust_policy is not None else None,
            baseline=replayed_baseline(result.subjects),
            gate_version=result.gate_version,
            started_at=result.started_at,
            finished_at=result.finished_at,
        )

    @classmethod
    def read(cls, statement: Statement) -> RunPredicate:
        """ValueError saying what is wrong."""
        try:
            return cls.model_validate(statement.predicate)
        except ValidationError as err:
            raise ValueError(f"predicate is not a gate run predicate ({first_error(err, '(predicate)')})") from None

    def dump(self) -> dict[str, Any]:
        """The predicate as signed (no evidenceSha256, trustPolicy or baseline when there is none, so a
        statement reads as before where they do not apply)."""
        absent = {"evidence_sha256", "trust_policy", "baseline"}
        return self.model_dump(mode="json", by_alias=True, exclude={k for k in absent if getattr(self, k) is None})


def replayed_baseline(subjects: dict[str, Any]) -> dict[str, Any] | None:
    for role in ("reference", "candidate"):
        found = (subjects.get(role) or {}).get("baseline") if isinstance(subjects.get(role), dict) else None
        if isinstance(found, dict):
            return {"role": role, **found}
    return None
