"""The adapters' capability lists for a manifest, and the sweep coverage they imply, before a run.

`gate plan` calls `plan_with_capabilities`: each adapter states from its options alone (no model
built or run, no torch imported by the built-in adapters) what its path will offer and how long a
sequence it accepts (`Adapter.capabilities`, gate.protocols). From that, every sweep check of the
plan gets its coverage: the lengths the policy wants and the ones both paths can reach
(gate.checks.planning, the same rule the check applies when it runs).
"""

from __future__ import annotations

from gate.checks.planning import planned_coverage
from gate.core.manifest import Manifest
from gate.core.plan import Plan
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
        p.model_copy(update={"coverage": planned_coverage(p.check, p.params, reach, geometry)}) for p in plan.checks
    ]
    return plan.model_copy(update={"paths": paths, "checks": checks})
