"""The gate predicate of a run's in-toto statement: one model that `gate run` writes it with and that
verify, approve and the ledger read it back with (gate.trust.attest signs and verifies the statement).

Its keys are camelCase as signed; statements signed before this model existed validate into it
unchanged (tests/trust/test_keys.py holds one).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gate.core.result import GateResult

if TYPE_CHECKING:
    from gate.trust.statement import Statement


class PredicateManifest(BaseModel):
    """The manifest as the run predicate names it."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    """The manifest's `name`."""
    file: str | None = None
    """The manifest copy among the signed subjects (a name inside the dossier directory)."""
    sha256: str | None = None
    """sha256 of the manifest the run read."""
    path: str | None = None
    """Where the run read it."""


class PredicateCheck(BaseModel):
    """One check's line in the run predicate."""

    model_config = ConfigDict(extra="forbid")

    check: str | None = None
    """The check's name."""
    status: str | None = None
    """Its status (gate.core.result.Status)."""
    severity: str | None = None
    """deny or warn."""
    step: int | None = None
    """The ladder step it belongs to."""
    controls: dict[str, str | None] = Field(default_factory=dict)
    """Each negative control's fault and outcome."""


class RunPredicate(BaseModel):
    """The gate predicate of a run's statement (PREDICATE_TYPE): what `gate run` signs about the
    run, read back from the signed results.json bytes. Used both to write and to read it."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    verdict: str | None = None
    """The run's verdict (gate.core.result.Verdict)."""
    exit_code: int | None = Field(default=None, alias="exitCode")
    """The exit code `gate run` gave."""
    summary: str = ""
    """The one-line summary."""
    intervention: str | None = None
    """The manifest's intervention."""
    claim: dict[str, Any] | None = None
    """The manifest's claim (level and its bounds), as the manifest states it."""
    approximate: bool = False
    """Whether the plan judged the change approximate (it then needs approvals)."""
    manifest: PredicateManifest = Field(default_factory=PredicateManifest)
    """The manifest the run read and its signed copy."""
    policies: list[dict[str, Any]] = Field(default_factory=list)
    """The policy files the plan was built from (path, sha256)."""
    site_policy: list[str] = Field(default_factory=list, alias="sitePolicy")
    """How a site policy changed the rule the run was planned by."""
    subjects: dict[str, Any] = Field(default_factory=dict)
    """Identity of each path (reference, candidate)."""
    datasets: dict[str, str] = Field(default_factory=dict)
    """Fingerprint of each quality slice."""
    checks: list[PredicateCheck] = Field(default_factory=list)
    """One line per check."""
    counts: dict[str, int] = Field(default_factory=dict)
    """How many checks ended in each status."""
    gate_version: str | None = Field(default=None, alias="gateVersion")
    """The gate that ran."""
    started_at: str | None = Field(default=None, alias="startedAt")
    """When the run started (UTC)."""
    finished_at: str | None = Field(default=None, alias="finishedAt")
    """When it finished (UTC)."""
    trust_policy: dict[str, Any] | None = Field(default=None, alias="trustPolicy")
    """The trust policy the run was made under (path, sha256): the verifier re-judges under its own."""
    baseline: dict[str, Any] | None = None
    """The recorded reference a replay answered from, as results.json's subject names it (path,
    sha256, signed_by key id, signed_for_commit, signed_for_manifest, recorded_adapter): the verifier
    re-judges its signer under its own trust policy."""
    evidence_sha256: str | None = Field(default=None, alias="evidenceSha256")
    """The run's evidence digest (gate.trust.evidence), that an approval binds to; absent in
    statements signed before approvals bound to evidence."""

    @property
    def claim_level(self) -> str | None:
        """The claim's level."""
        level = self.claim.get("level") if self.claim is not None else None
        return None if level is None else str(level)

    @classmethod
    def of_run(cls, result: GateResult, manifest_file: str) -> RunPredicate:
        """The predicate of a run, from the results.json record the statement also binds."""
        counts: dict[str, int] = {}
        for check in result.checks:
            counts[check.status.value] = counts.get(check.status.value, 0) + 1
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
            counts=counts,
            trust_policy=result.trust_policy.model_dump(mode="json") if result.trust_policy is not None else None,
            baseline=replayed_baseline(result.subjects),
            gate_version=result.gate_version,
            started_at=result.started_at,
            finished_at=result.finished_at,
        )

    @classmethod
    def read(cls, statement: Statement) -> RunPredicate:
        """The run predicate a statement carries (gate.trust.attest); ValueError saying what is wrong."""
        try:
            return cls.model_validate(statement.predicate)
        except ValidationError as err:
            first = err.errors(include_url=False)[0]
            where = ".".join(str(p) for p in first["loc"]) or "(predicate)"
            raise ValueError(f"predicate is not a gate run predicate ({where}: {first['msg']})") from None

    def dump(self) -> dict[str, Any]:
        """The predicate as signed (camelCase keys; no evidenceSha256, trustPolicy or baseline when
        there is none, so a statement reads as before where they do not apply)."""
        absent = {"evidence_sha256", "trust_policy", "baseline"}
        return self.model_dump(mode="json", by_alias=True, exclude={k for k in absent if getattr(self, k) is None})


def replayed_baseline(subjects: dict[str, Any]) -> dict[str, Any] | None:
    """The signed baseline a path answered from (the reference's, as the recorded adapter names it)."""
    for role in ("reference", "candidate"):
        found = (subjects.get(role) or {}).get("baseline") if isinstance(subjects.get(role), dict) else None
        if isinstance(found, dict):
            return {"role": role, **found}
    return None


__all__ = ["PredicateCheck", "PredicateManifest", "RunPredicate"]
