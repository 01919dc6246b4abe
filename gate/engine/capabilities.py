"""The adapters' capability lists for a manifest, and the sweep coverage they imply, before a run.

`gate plan` decides each check's capabilities from the adapters' options alone
(`plan_with_capabilities`); `gate run` makes the same decision on the built candidate
(`path_check_capabilities`) and never starts a check it finds not applicable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from gate.checks.planning import ABSENT, DECLARED, offered_capabilities, path_offers, planned_coverage
from gate.core.manifest import Manifest
from gate.core.plan import CheckCapabilities, Plan, PlannedCheck
from gate.core.registry import load_adapter
from gate.protocols import Capability, PathCapabilities

if TYPE_CHECKING:
    from gate.core.check import Outcome


NOTHING_STATED = "the adapter states nothing before a run"


def path_capabilities(manifest: Manifest) -> dict[str, PathCapabilities]:
    """Per role, what its adapter states about the path; an adapter that states nothing before a run
    (a third-party one without `capabilities`) is recorded as such."""
    out: dict[str, PathCapabilities] = {}
    for role in ("reference", "candidate"):
        spec = getattr(manifest.subject, role)
        adapter = load_adapter(spec.adapter)()
        describe = getattr(adapter, "capabilities", None)
        if describe is None:
            out[role] = PathCapabilities(path=spec.adapter, max_len_from=NOTHING_STATED)
            continue
        try:
            caps = describe(adapter.Options.model_validate(spec.options))
        except Exception as err:  # the run itself will name a bad option; the plan says what it could not state
            caps = PathCapabilities(path=spec.adapter, max_len_from=f"not stated: {err.__class__.__name__}: {err}")
        out[role] = caps if isinstance(caps, PathCapabilities) else PathCapabilities.model_validate(caps)
    return out


def plan_with_capabilities(manifest: Manifest, plan: Plan) -> Plan:
    """The plan with each role's capabilities, each sweep check's length coverage, and each check's
    capabilities (`decide_needs`) before a run, from the options alone."""
    paths = path_capabilities(manifest)
    reach = {role: (caps.max_len, caps.max_len_from) for role, caps in paths.items()}
    candidate = paths["candidate"]
    stated = candidate.max_len_from != NOTHING_STATED
    offers = offered_capabilities(candidate.offers) if stated else None

    def lacks(lacking: str) -> str:
        return (
            f"the candidate's adapter does not state {lacking} (one that depends on the installed "
            "library is stated only when the path runs)"
        )

    checks = [
        p.model_copy(
            update={
                "coverage": planned_coverage(p.check, p.params, reach, candidate.cache_geometry),
                "capabilities": decide_needs(p, offers, read_from="options", lacks=lacks),
            }
        )
        for p in plan.checks
    ]
    return plan.model_copy(update={"paths": paths, "checks": checks})


def path_check_capabilities(planned: PlannedCheck, candidate: object) -> CheckCapabilities:
    """In a run, from the built candidate path (`path_offers`): the decision the run keeps. A check
    found not applicable here is never started (gate.engine.checking.run_check)."""
    name = getattr(candidate, "name", "the candidate")
    return decide_needs(
        planned, path_offers(candidate), read_from="path", lacks=lambda lacking: f"{name} offers no {lacking}"
    )


def decide_needs(
    planned: PlannedCheck,
    offers: frozenset[Capability] | None,
    *,
    read_from: Literal["options", "path"],
    lacks: Callable[[str], str],
) -> CheckCapabilities:
    """What the check needs, what the candidate offers (None: not known before a run), and what that
    means; `lacks(capabilities)` says in words that the candidate lacks them."""
    declared = DECLARED.get(planned.check)
    base = {
        "needs": sorted(declared.needs) if declared else None,
        "optional": {c.value: why for c, why in declared.optional.items()} if declared else {},
        "offered": sorted(offers) if offers is not None else None,
        "read_from": read_from,
    }
    if declared is None:
        return CheckCapabilities(**base, runs="at-run-time", meaning="a plugin check: it declares no needs")
    if offers is None:
        return CheckCapabilities(
            **base,
            runs="at-run-time",
            meaning=f"needs {', '.join(sorted(declared.needs))}; the candidate's adapter states what it offers only "
            "when it runs (an adapter states it before a run with `capabilities(options)`)",
        )
    missing = sorted(declared.missing(offers))
    if missing:
        lacking = ", ".join(missing)
        return CheckCapabilities(
            **base,
            runs="not-applicable",
            would_run_with=missing,
            meaning=f"not applicable: {lacks(lacking)}; offering {lacking} would make the check run",
        )
    extras = [f"{c.value} would add: {why}" for c, why in declared.optional.items() if c not in offers]
    more = f"; {'; '.join(extras)}" if extras else ""
    from gate.engine.generic_faults import stand_ins

    covered = {
        c.fault: [g.name for g in stand_ins(planned.check, c.fault)] for c in planned.controls if c.expect == "detect"
    }
    backed = [f"{fault} ({', '.join(names)})" for fault, names in covered.items() if names]
    alone = [fault for fault, names in covered.items() if not names]
    if backed:
        own = f"; only the adapter's own: {', '.join(alone)}" if alone else ""
        return CheckCapabilities(
            **base,
            runs="stand-ins",
            meaning=f"runs; where the adapter plants no fault of its own, generic stand-ins cover {len(backed)} of "
            f"{len(covered)} controls: {', '.join(backed)}{own}{more}",
        )
    return CheckCapabilities(
        **base,
        runs="own-controls",
        meaning=(
            f"runs with the adapter's own controls: no generic fault stands in for {', '.join(alone)}"
            if alone
            else "runs (the policy names no control to detect)"
        )
        + more,
    )


def not_applicable_outcome(planned: PlannedCheck, decision: CheckCapabilities) -> Outcome:
    """The skip a check the run found not applicable would have returned: naming the capability that
    would make it run, with the package's `covered_by` and the rule's `absent`."""
    from gate.core.check import Outcome

    lacking = [Capability(c) for c in decision.would_run_with]
    return Outcome(
        "skip",
        decision.meaning.removeprefix("not applicable: "),
        covered_by=dict(DECLARED[planned.check].covered_by),
        absent=next((ABSENT[c] for c in lacking if c in ABSENT), None),
    )
