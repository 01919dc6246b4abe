"""The planner: manifest + policies -> Plan (which checks, why, with what parameters).

Rejections quote the policy rule and point at the manifest line that made them necessary.
This module imports no torch.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from gate._util.yamlio import LoadedYaml
from gate.core.manifest import ClaimLevel, Intervention, Manifest, Record
from gate.core.policy import ControlSpec, NotApplicable, PolicySet
from gate.core.registry import check_names
from gate.core.result import Digest, KnownBugRecord
from gate.errors import InputError
from gate.protocols import PathCapabilities

CLAIM_IN_WORDS = {
    ClaimLevel.exact: "bit-identical logits: the candidate computes exactly the same numbers as the reference",
    ClaimLevel.tolerance: "tolerance-bounded logits: the same argmax everywhere, logits within a stated "
    "tolerance (what a correct cached step can honestly promise against a full pass)",
    ClaimLevel.greedy_tokens: "identical greedy continuations token for token over the stated lengths",
    ClaimLevel.distribution: "the same output distribution under sampling, tested at a stated significance level",
    ClaimLevel.bounded_degradation: "an approximation: task quality stays inside a stated envelope on each "
    "evaluated slice, and only there",
}

UNPROVEN_DEFAULT = {ClaimLevel.exact: "deny", ClaimLevel.tolerance: "deny"}
"""A numeric claim whose checks cannot show power is not a claim: unproven denies by default."""


class LengthCoverage(Record):
    """One sweep check's lengths: wanted by the policy and manifest, reachable by both paths."""

    wanted: list[int]
    """Lengths the policy (and the manifest's params) want visited, within any `longest` scope."""
    scoped_to: int | None = None
    """The manifest's `longest`: a claim scoped to prefixes up to it (None: unscoped)."""
    reachable_longest: int | None
    """Longest length both paths can reach (None: a path states its context only when it runs)."""
    unreachable: list[int] = Field(default_factory=list)
    """Wanted lengths beyond reach."""
    effect: str
    """What an unreachable wanted length does to the check."""
    limited_by: dict[str, str] = Field(default_factory=dict)
    """Per role, where that path's longest sequence comes from (a preset, config.json, a launch flag)."""
    planned_on: str | None = None
    """The candidate engine's cache geometry the lengths were planned on, in words (None: not planned on one)."""
    not_reusable: list[int] = Field(default_factory=list)
    """Wanted lengths shorter than the engine's first reuse block: compared, and missing by design."""

    def as_dict(self) -> dict[str, Any]:
        """The keys a check's evidence records (`coverage`)."""
        return self.model_dump(mode="json", exclude={"effect", "limited_by", "planned_on", "not_reusable"})


class CheckCapabilities(Record):
    """A check's declared needs against what the candidate offers, and what that means: before a run
    from what its adapter states (`gate plan`), in a run from what the built path offers (`gate run`,
    which never starts a check it finds not applicable)."""

    needs: list[str] | None = None
    """Capabilities the check must have to run (its package's NEEDS); None: not declared (a plugin check)."""
    optional: dict[str, str] = Field(default_factory=dict)
    """Capabilities it uses when offered -> what each adds (its package's OPTIONAL)."""
    offered: list[str] | None = None
    """Capabilities the candidate offers; None: its adapter states nothing before a run."""
    read_from: Literal["options", "path"] = "options"
    """options: `offered` is what the adapter states from the options alone, before a run (`gate
    plan`); path: what the built candidate offers (`gate run`): this decision is the one the run keeps."""
    runs: Literal["own-controls", "stand-ins", "not-applicable", "at-run-time"]
    """own-controls: it runs, and no generic fault stands in for any control the policy names (only the
    adapter's own faults show its power); stand-ins: it runs, and generic stand-ins cover some or all of
    the controls where the adapter plants none of its own; not-applicable: a needed capability is
    missing, so a run never starts the check; at-run-time: the needs or the offer are known only when
    the paths run."""
    would_run_with: list[str] = Field(default_factory=list)
    """not-applicable: the capabilities whose offer would make the check run."""
    meaning: str
    """The same in words, with the capability that would make it run."""

    def in_words(self) -> tuple[str, str]:
        """What `gate plan`, the run's log and the dossier say of it: what the check needs and what
        the candidate offers; what that means."""
        needs = ", ".join(self.needs) if self.needs is not None else "not declared"
        offered = ", ".join(self.offered) if self.offered is not None else "not stated before a run"
        return f"{needs}; the candidate offers: {offered}", f"{self.runs}: {self.meaning}"


class PlannedCheck(Record):
    """One check the plan will run."""

    check: str
    """Registered check name."""
    step: int
    """Release-gate step it serves."""
    severity: Literal["deny", "warn"]
    """deny or warn."""
    why: str
    """Why the policy requires it."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Policy parameters merged with the manifest's overrides."""
    controls: list[ControlSpec] = Field(default_factory=list)
    """Negative controls the check must pass."""
    unproven: Literal["deny", "warn"] = "deny"
    """What it means when none of the controls can run: deny fails the gate, warn reports."""
    not_applicable: NotApplicable | None = None
    """When the check has nothing to judge on a path, and why (the policy rule's `not_applicable`)."""
    missing_capability: Literal["deny", "warn"] = "deny"
    """What assertions left unproven by a capability the candidate lacks mean (the controls did run)."""
    source: str
    """Policy file and rule path that required it."""
    resolution: list[str] = Field(default_factory=list)
    """How the rule resolved across policy directories."""
    available: bool
    """Whether a registered implementation exists."""
    coverage: LengthCoverage | None = None
    """A sweep check's wanted and reachable lengths, from the adapters' capability lists (`gate plan`)."""
    capabilities: CheckCapabilities | None = None
    """What the check needs of the candidate, what the candidate offers, and what that means (`gate plan`)."""


class Plan(Record):
    """What `gate run` will do for a manifest."""

    manifest_name: str
    intervention: Intervention
    intervention_summary: str
    approximate: bool
    claim: ClaimLevel
    claim_in_words: str
    claim_rule: str
    """The policy rule that admitted the claim."""
    claim_source: str
    identity_required: list[str]
    identity_declared: list[str]
    checks: list[PlannedCheck]
    policies: list[Digest]
    site_policy: list[str] = Field(default_factory=list)
    """How a --policy-dir replaced or extended the built-in rule, and what it dropped."""
    paths: dict[str, PathCapabilities] = Field(default_factory=dict)
    """Per role, what the adapter states the path will offer, from the options alone (`gate plan`)."""
    known_bugs: list[KnownBugRecord] = Field(default_factory=list)
    """The manifest's known bugs, each planned on this installation today: applies, not-affected
    (the installed version is outside `affects`) or expired (ignored, with a warning)."""


def build_plan(manifest: Manifest, doc: LoadedYaml, policies: PolicySet) -> Plan:
    """Resolve the manifest against the policies, or raise an InputError that quotes the rule."""
    intervention = manifest.intervention
    level = ClaimLevel(manifest.claim.level)
    resolved = policies.interventions.get(intervention)
    if resolved is None:
        raise doc.error_at(("intervention",), f"no policy covers intervention {intervention.value!r}", "intervention")
    claim = resolved.claims.get(level)
    if claim is None or not claim.rule.admissible:
        admissible = sorted(c.value for c, r in resolved.claims.items() if r.rule.admissible)
        quoted = f' policy {claim.source.path} says: "{claim.rule.rule.strip()}"' if claim else ""
        raise doc.error_at(
            ("claim", "level"),
            f"intervention {intervention.value!r} cannot claim {level.value!r}.{quoted} "
            f"Admissible claims: {', '.join(admissible) or 'none'}",
            "claim.level",
        )
    declared = {f.value for f in manifest.identity}
    missing = [field for field in resolved.identity.required if field.value not in declared]
    if missing:
        field, others = missing[0], missing[1:]
        line, col = doc.locate(("identity",)) if "identity" in (doc.data or {}) else (1, 1)
        reason = resolved.identity.why.get(field, "it can change the cached K/V, mask or position")
        source = resolved.identity_source.path if resolved.identity_source else "policy"
        also = f" (also missing: {', '.join(repr(f.value) for f in others)})" if others else ""
        raise InputError(
            doc.path,
            f"identity must declare {field.value!r} for intervention {intervention.value!r} ({source}): {reason}{also}",
            line=line,
            col=col,
            field="identity",
        )
    registered = set(check_names())
    planned: list[PlannedCheck] = []
    for index, (rule, rule_source) in enumerate(claim.checks):
        override = manifest.checks.get(rule.check)
        planned.append(
            PlannedCheck(
                check=rule.check,
                step=rule.step,
                severity=rule.severity,
                why=rule.why,
                params={**rule.params, **(override.params if override is not None else {})},
                controls=rule.controls,
                unproven=rule.unproven or UNPROVEN_DEFAULT.get(level, "warn"),
                not_applicable=rule.not_applicable,
                missing_capability=rule.missing_capability,
                source=f"{rule_source.shown}: interventions.{intervention.value}.claims.{level.value}.checks[{index}]",
                resolution=claim.history,
                available=rule.check in registered,
            )
        )
    planned_names = {p.check for p in planned}
    not_planned = f"not in the plan for this claim (planned: {', '.join(sorted(planned_names)) or 'none'})"
    for name in manifest.checks:
        if name not in planned_names:
            raise doc.error_at(("checks", name), f"check {name!r} is {not_planned}", f"checks.{name}")
    for index, bug in enumerate(manifest.known_bugs):
        if bug.check not in planned_names:
            raise doc.error_at(
                ("known_bugs", index, "check"),
                f"known bug {bug.id!r} names check {bug.check!r}, which is {not_planned}",
                f"known_bugs[{index}].check",
            )
    from gate._util.clock import today_utc
    from gate.core.known_bugs import plan_known_bugs

    return Plan(
        manifest_name=manifest.name,
        intervention=intervention,
        intervention_summary=resolved.summary,
        approximate=resolved.approximate,
        claim=level,
        claim_in_words=CLAIM_IN_WORDS[level],
        claim_rule=claim.rule.rule,
        claim_source=claim.source.shown,
        identity_required=[f.value for f in resolved.identity.required],
        identity_declared=sorted(declared),
        checks=planned,
        policies=policies.digests(),
        site_policy=claim.site_changes,
        known_bugs=plan_known_bugs(manifest.known_bugs, today_utc()),
    )
