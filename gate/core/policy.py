"""Versioned policies: which claims each intervention may make, and which checks each claim needs.

Policy files are YAML under `policies/`; users add directories with `--policy-dir`. Files are read
directory by directory (built-in first, then each `--policy-dir` in order; inside one, by file name).
Two files of one directory may not define the same (intervention, claim) rule. A later directory's
rule *replaces* the earlier one, unless it says `mode: extend` (its checks merged in by check name).
Intervention `summary`, `approximate` and `identity` come from the last file that sets them.
This module imports no torch.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from gate._util.resources import data_dir
from gate._util.yamlio import parse_model, read_yaml
from gate.core.manifest import ClaimLevel, IdentityField, Intervention, Record
from gate.core.result import Digest
from gate.errors import InputError


class ControlSpec(Record):
    """A negative control: a fault the check must detect (or, with expect: pass, must tolerate)."""

    fault: str
    """Fault name, applied to the candidate path with `with_fault`."""
    expect: Literal["detect", "pass"] = "detect"
    """detect: the check must fail under the fault. pass: the fault must not change the verdict
    (a harmless bug; shows the check does not over-reject)."""


class NotApplicable(Record):
    """When a check has nothing to judge on a path: the path lacks what the check judges."""

    without: Literal["cross-request-cache", "slot-files", "cache-salt"]
    """What the candidate path lacks (the check reports it as `absent` when it cannot run): `slot-files`, an
    engine server without saved slot states gate can reach (engine-slot-restore); `cache-salt`, an engine
    with no cache salt or tenant key, so no per-tenant cache (engine-isolation)."""
    because: str
    """Why the check then has nothing to judge, shown in the plan and the dossier."""


class CheckRule(Record):
    """One check a claim requires."""

    check: str
    """Registered check name (entry point group `gate.checks`)."""
    step: int = Field(ge=1, le=8)
    """Release-gate step (background: the release gate) this check serves."""
    severity: Literal["deny", "warn"] = "deny"
    """deny: a failure fails the gate. warn: it is reported only."""
    why: str
    """Why the claim needs this check, shown in the plan and the dossier."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Parameters, validated by the check's Params model at run time."""
    controls: list[ControlSpec] = Field(default_factory=list)
    """Faults the check must detect (release-gate step 5)."""
    unproven: Literal["deny", "warn"] | None = None
    """When none of the controls can run on the candidate (power unproven): deny fails the gate
    (verdict unproven, exit 1), warn only reports. Default: deny for exact and tolerance claims,
    warn otherwise."""
    not_applicable: NotApplicable | None = None
    """When the check has nothing to judge on a path (e.g. no cross-request cache: no invalidation):
    it is then `not-applicable` with this reason, neither unproven nor a warning."""
    missing_capability: Literal["deny", "warn"] = "deny"
    """When the check's controls show power but some of its assertions need a capability the
    candidate lacks (those assertions are `unproven`, each with the capability named): deny fails the
    gate (verdict unproven), warn reports them amber and lets the rest decide."""

    @field_validator("controls", mode="before")
    @classmethod
    def _controls_shorthand(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [{"fault": item} if isinstance(item, str) else item for item in value]
        return value


class ClaimRule(Record):
    """Whether a claim is admissible for an intervention, and what it requires."""

    admissible: bool
    """False: a manifest making this claim is rejected, quoting `rule`."""
    rule: str
    """The rule in words: why this claim is (in)admissible and what it must show."""
    mode: Literal["replace", "extend"] = "replace"
    """How this rule combines with an earlier directory's rule for the same claim."""
    checks: list[CheckRule] = Field(default_factory=list)
    """Required checks, in run order."""


class IdentityRule(Record):
    """Cache-identity fields an intervention's manifest must declare (release-gate step 3)."""

    required: list[IdentityField] = Field(default_factory=list)
    """Fields that must appear in the manifest's `identity` list."""
    why: dict[IdentityField, str] = Field(default_factory=dict)
    """Why each field matters (background: cache identity), quoted when a manifest omits it."""


class InterventionRule(Record):
    """Everything a policy says about one intervention."""

    summary: str | None = None
    """What kind of change this is, in words."""
    approximate: bool | None = None
    """True when the change alters the computed values (quantisation, eviction)."""
    identity: IdentityRule | None = None
    """Identity fields the manifest must declare."""
    claims: dict[ClaimLevel, ClaimRule] = Field(default_factory=dict)
    """Rules per claim level."""


class PolicyFile(Record):
    """One policy file."""

    api_version: Literal["gate/policy/v1"] = Field(alias="apiVersion")
    """Policy format version."""
    name: str
    """Policy name."""
    version: str
    """Policy version; bump it when a rule changes."""
    description: str = ""
    """What this policy file is for."""
    interventions: dict[Intervention, InterventionRule] = Field(default_factory=dict)
    """Rules per intervention."""


@dataclass
class LoadedPolicy:
    """A parsed policy file with its digest."""

    path: Path
    policy: PolicyFile
    sha256: str
    ref: str
    """The file by its path relative to its policy root, named by the root's folder
    (`policies/quantisation.yaml`): what plans and dossiers show, never a machine-local path."""

    @property
    def shown(self) -> str:
        """The file as plans and dossiers name it: its path under the policy root and its digest."""
        return f"{self.ref} (sha256 {self.sha256[:12]})"

    @property
    def label(self) -> str:
        return f"{self.policy.name}@{self.policy.version} ({self.shown})"


@dataclass
class ResolvedClaim:
    """The effective rule for one (intervention, claim), with where it came from."""

    rule: ClaimRule
    source: LoadedPolicy
    checks: list[tuple[CheckRule, LoadedPolicy]]
    history: list[str]
    site_changes: list[str] = field(default_factory=list)
    """Lines saying how a --policy-dir replaced or extended the rule, and what it dropped."""


@dataclass
class ResolvedIntervention:
    """The effective rules for one intervention."""

    summary: str = ""
    approximate: bool = False
    identity: IdentityRule = field(default_factory=IdentityRule)
    identity_source: LoadedPolicy | None = None
    claims: dict[ClaimLevel, ResolvedClaim] = field(default_factory=dict)


@dataclass
class PolicySet:
    """All policy files taking part, resolved per intervention and claim."""

    files: list[LoadedPolicy]
    interventions: dict[Intervention, ResolvedIntervention]

    def digests(self) -> list[Digest]:
        return [Digest(path=f.ref, sha256=f.sha256) for f in self.files]


def _directory_files(directory: Path) -> list[LoadedPolicy]:
    """Each policy file of `directory`, parsed (errors name the file, line and field), with its digest."""
    if not directory.is_dir():
        raise InputError(str(directory), "policy directory does not exist")
    return [
        LoadedPolicy(
            path,
            parse_model(read_yaml(path), PolicyFile),
            hashlib.sha256(path.read_bytes()).hexdigest(),
            f"{directory.name}/{path.relative_to(directory).as_posix()}",
        )
        for path in sorted(directory.glob("*.yaml")) + sorted(directory.glob("*.yml"))
    ]


def site_change(earlier: ResolvedClaim, later: list[CheckRule], source: LoadedPolicy, verb: str) -> str:
    """One line for the banner: which site policy changed the rule, and what it dropped."""
    after = {c.check: {k.fault for k in c.controls} for c in later}
    checks_dropped = [c.check for c, _ in earlier.checks if c.check not in after]
    controls_dropped = sum(len({k.fault for k in c.controls} - after.get(c.check, set())) for c, _ in earlier.checks)
    added = [c for c in after if c not in {e.check for e, _ in earlier.checks}]
    line = (
        f"site policy {source.label} {verb} the rule of "
        f"{earlier.source.policy.name}: {len(checks_dropped)} checks and {controls_dropped} controls dropped"
    )
    if checks_dropped:
        line += f" (checks dropped: {', '.join(checks_dropped)})"
    return line + (f"; {len(added)} added ({', '.join(added)})" if added else "")


def _merge_claim(
    earlier: ResolvedClaim | None, rule: ClaimRule, source: LoadedPolicy, where: str, site: bool
) -> ResolvedClaim:
    own = [(c, source) for c in rule.checks]
    if earlier is None:
        return ResolvedClaim(rule, source, own, [f"{where}: defined"])
    effective, merged, verb = rule, own, "replace"
    if rule.mode == "extend":
        merged, verb = list(earlier.checks), "extend"
        for check_rule, src in own:
            index = next((i for i, (c, _) in enumerate(merged) if c.check == check_rule.check), None)
            if index is None:
                merged.append((check_rule, src))
            else:
                merged[index] = (check_rule, src)
        effective = rule.model_copy(update={"checks": [c for c, _ in merged]})
    changes = list(earlier.site_changes)
    if site:
        changes.append(site_change(earlier, effective.checks, source, f"{verb}d"))
    history = [*earlier.history, f"{where}: {verb}s {earlier.source.shown}"]
    return ResolvedClaim(effective, source, merged, history, changes)


def load_policies(extra_dirs: list[Path] | None = None) -> PolicySet:
    """Load the built-in policies, then each extra directory, and resolve the rules."""
    files: list[LoadedPolicy] = []
    resolved: dict[Intervention, ResolvedIntervention] = {}
    for index, directory in enumerate([data_dir("policies"), *(extra_dirs or [])]):
        defined_here: dict[tuple[Intervention, ClaimLevel], LoadedPolicy] = {}
        for loaded in _directory_files(directory):
            files.append(loaded)
            for intervention, irule in loaded.policy.interventions.items():
                target = resolved.setdefault(intervention, ResolvedIntervention())
                if irule.summary is not None:
                    target.summary = irule.summary
                if irule.approximate is not None:
                    target.approximate = irule.approximate
                if irule.identity is not None:
                    target.identity, target.identity_source = irule.identity, loaded
                for level, crule in irule.claims.items():
                    key = (intervention, level)
                    if key in defined_here:
                        raise InputError(
                            str(loaded.path),
                            f"rule interventions.{intervention.value}.claims.{level.value} is also defined "
                            f"in {defined_here[key].path} in the same directory; move one to another "
                            "--policy-dir to override it",
                        )
                    defined_here[key] = loaded
                    where = f"{loaded.shown}: interventions.{intervention.value}.claims.{level.value}"
                    target.claims[level] = _merge_claim(target.claims.get(level), crule, loaded, where, site=index > 0)
    return PolicySet(files, resolved)
