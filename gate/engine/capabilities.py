"""The adapters' capability lists for a manifest, and the sweep coverage they imply, before a run.

`gate plan` calls `plan_with_capabilities`: each adapter states from its options alone (no model
built or run, no torch imported by the built-in adapters) what its path will offer and how long a
sequence it accepts (`Adapter.capabilities`, gate.protocols). From that, every sweep check of the
plan gets its coverage: the lengths the policy wants and the ones both paths can reach
(gate.checks.planning, the same rule the check applies when it runs).
"""

from __future__ import annotations

from gate.checks.planning import DECLARED, offered_capabilities, planned_coverage
from gate.core.manifest import Manifest
from gate.core.plan import CheckCapabilities, Plan, PlannedCheck
from gate.core.registry import load_adapter
from gate.protocols import PathCapabilities


def path_capabilities(manifest: Manifest) -> dict[str, PathCapabilities]:
    """Per role, what its adapter states about the path; an adapter that states nothing before a run
    (a third-party one without `capabilities`) is recorded as such."""
    out: dict[str, PathCapabilities] = {}
    for role in ("reference", "candidate"):
        spec = getattr(manifest.subject, role)
        adapter = load_adapter(spec.adapter)()
        describe = getattr(adapter, "capabilities", None)
        if describe is None:
            out[role] = PathCapabilities(path=spec.adapter, max_len_from="the adapter states nothing before a run")
            continue
        try:
            caps = describe(adapter.Options.model_validate(spec.options))
        except Exception as err:  # the run itself will name a bad option; the plan says what it could not state
            caps = PathCapabilities(path=spec.adapter, max_len_from=f"not stated: {err.__class__.__name__}: {err}")
        out[role] = caps if isinstance(caps, PathCapabilities) else PathCapabilities.model_validate(caps)
    return out


def plan_with_capabilities(manifest: Manifest, plan: Plan) -> Plan:
    """The plan with each role's capabilities and each sweep check's length coverage."""
    paths = path_capabilities(manifest)
    reach = {role: (caps.max_len, caps.max_len_from) for role, caps in paths.items()}
    geometry = paths["candidate"].cache_geometry
    checks = [
        p.model_copy(
            update={
                "coverage": planned_coverage(p.check, p.params, reach, geometry),
                "capabilities": check_capabilities(p, paths["candidate"]),
            }
        )
        for p in plan.checks
    ]
    return plan.model_copy(update={"paths": paths, "checks": checks})


def stand_ins(check: str, fault: str) -> list[str]:
    """The generic faults that can stand in for `fault` under `check` (in the order a run tries them)."""
    from gate.engine.generic_faults import GENERIC_FAULTS

    return [g.name for g in GENERIC_FAULTS if (fault == g.name or fault in g.stands_for) and check in g.proves]


def check_capabilities(planned: PlannedCheck, candidate: PathCapabilities) -> CheckCapabilities:
    """What the check needs (its package's declaration), what the candidate states it offers, and
    what that means: runs with its own controls, runs with stand-ins, or not applicable (and what
    would make it run). Before a run, from the options alone."""
    declared = DECLARED.get(planned.check)
    stated = candidate.max_len_from != "the adapter states nothing before a run"
    offers = offered_capabilities(candidate.offers) if stated else None
    base = {
        "needs": sorted(declared.needs) if declared else None,
        "optional": {c.value: why for c, why in declared.optional.items()} if declared else {},
        "offered": sorted(offers) if offers is not None else None,
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
            meaning=f"not applicable: the candidate's adapter does not state {lacking} (one that depends on the "
            f"installed library is stated only when the path runs); offering {lacking} would make the check run",
        )
    extras = [f"{c.value} would add: {why}" for c, why in declared.optional.items() if c not in offers]
    more = f"; {'; '.join(extras)}" if extras else ""
    covered = {c.fault: stand_ins(planned.check, c.fault) for c in planned.controls if c.expect == "detect"}
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
