"""`gate plan MANIFEST`: each required check, why, its parameters and severity."""

from __future__ import annotations

from pathlib import Path

import click

from gate.cli.common import echo, policy_dir_option, user_errors
from gate.core.plan import LengthCoverage, Plan
from gate.core.policy import NotApplicable


@click.command("plan")
@click.argument("manifest", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@policy_dir_option
def command(manifest: Path, fmt: str, policy_dirs: tuple[Path, ...]) -> None:
    """Explain what `gate run` would check for MANIFEST, and why."""
    from gate.core.catalogue import cards
    from gate.engine.capabilities import plan_with_capabilities
    from gate.engine.runner import prepare

    with user_errors():
        loaded, plan = prepare(manifest, list(policy_dirs), allow_unavailable=True)  # everything run checks
        plan = plan_with_capabilities(loaded.manifest, plan)  # from the options alone: no model built
        catalogue = cards()
    if fmt == "json":
        echo(plan.model_dump_json(indent=2))
        return
    echo(f"manifest      {manifest} ({plan.manifest_name})")
    echo(f"intervention  {plan.intervention.value}{' (approximate)' if plan.approximate else ''}")
    echo(f"              {plan.intervention_summary.strip()}")
    echo(f"claim         {plan.claim.value}: {plan.claim_in_words}")
    echo(f"rule          {plan.claim_rule.strip()}")
    echo(f"              from {plan.claim_source}")
    echo(
        f"identity      required: {', '.join(plan.identity_required) or 'none'}; "
        f"declared: {', '.join(plan.identity_declared) or 'none'}"
    )
    for role, caps in plan.paths.items():
        reach = f"max_len {caps.max_len}" if caps.max_len is not None else "max_len unknown"
        offers = f"; offers {', '.join(caps.offers)}" if caps.offers else ""
        echo(f"{role:<13} {caps.path}: {reach} ({caps.max_len_from}){offers}")
    echo(f"checks        {len(plan.checks)}")
    for i, planned in enumerate(plan.checks, 1):
        flag = "" if planned.available else "  [NOT AVAILABLE]"
        echo(f"\n{i}. {planned.check}  step {planned.step}, {planned.severity}{flag}")
        echo(f"   why:      {planned.why.strip()}")
        card = catalogue.get(planned.check)
        if card is not None:
            echo(f"   blind to: {' '.join(card.blind_to.split())}")
        echo(f"   rule:     {planned.source}")
        for line in planned.resolution:
            echo(f"   resolved: {line}")
        if planned.params:
            echo(f"   params:   {', '.join(f'{k}={v}' for k, v in planned.params.items())}")
        if planned.not_applicable is not None:
            echo(f"   applies:  {_applies_line(planned.not_applicable, plan)}")
        if planned.coverage is not None:
            echo(f"   lengths:  {_coverage_line(planned.coverage)}")
        if planned.controls:
            faults = ", ".join(c.fault + ("" if c.expect == "detect" else " (must pass)") for c in planned.controls)
            echo(f"   controls: {faults}")
        if planned.capabilities is not None:
            needs, means = planned.capabilities.in_words()
            echo(f"   needs:    {needs}")
            echo(f"   means:    {means}")
    if plan.known_bugs:
        echo("\nknown bugs (declared by the manifest: a failure of that check and class reads as expected)")
        for bug in plan.known_bugs:
            echo(f"  {bug.id}: {bug.disposition}: {bug.note}")
            echo(f"    {bug.link}; expires {bug.expires}; reason: {bug.reason}")
    echo("\npolicies")
    for digest in plan.policies:
        echo(f"  {digest.sha256[:16]}  {digest.path}")


_OFFERED_BY = {"cross-request-cache": ("PrefixCaching", "PrefixServing")}
"""What a path's `offers` names when it has what a `not_applicable.without` names (a lack its options
cannot show, e.g. slot files, which only the running server shows, is not listed)."""
_LACKED = {
    "cross-request-cache": "a cross request cache",
    "slot-files": "slot files gate can reach",
    "cache-salt": "a cache salt or tenant key",
}


def _applies_line(rule: NotApplicable, plan: Plan) -> str:
    """Whether the check has anything to judge on the candidate, as far as its options tell."""
    lacked = rule.without.replace("-", " ")
    caps = plan.paths.get("candidate")
    offered_by = _OFFERED_BY.get(rule.without)
    if caps is not None and caps.offers and offered_by is not None and not set(offered_by) & set(caps.offers):
        return f"not applicable, because {rule.because.strip()} (the candidate offers no {lacked})"
    return f"only with {_LACKED.get(rule.without, lacked)}; otherwise not applicable, because {rule.because.strip()}"


def _coverage_line(coverage: LengthCoverage) -> str:
    """Wanted and reachable lengths of a sweep check, and what an unreachable one does."""
    scope = f" (scoped to {coverage.scoped_to})" if coverage.scoped_to is not None else ""
    wanted = f"wanted {', '.join(map(str, coverage.wanted))}{scope}"
    if coverage.reachable_longest is None:
        return f"{wanted}; reach known only when the paths run" + _geometry_words(coverage)
    line = f"{wanted}; the paths reach {coverage.reachable_longest}"
    if coverage.unreachable:
        line += f"; out of reach: {', '.join(map(str, coverage.unreachable))} -> {coverage.effect}"
    return line + _geometry_words(coverage)


def _geometry_words(coverage: LengthCoverage) -> str:
    """The engine cache geometry the lengths were planned on, and the lengths that miss by design."""
    words = f"; planned on {coverage.planned_on}" if coverage.planned_on else ""
    if coverage.not_reusable:
        words += f"; not reusable by design (below the first block): {', '.join(map(str, coverage.not_reusable))}"
    return words
