"""`gate plan MANIFEST`: each required check, why, its parameters and severity."""

from __future__ import annotations

from pathlib import Path

import click

from gate.cli.common import policy_dir_option, user_errors


@click.command("plan")
@click.argument("manifest", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@policy_dir_option
def command(manifest: Path, fmt: str, policy_dirs: tuple[Path, ...]) -> None:
    """Explain what `gate run` would check for MANIFEST, and why."""
    from gate.core.catalogue import cards
    from gate.core.load import load_manifest
    from gate.core.plan import build_plan
    from gate.core.policy import load_policies

    with user_errors():
        loaded = load_manifest(manifest)
        plan = build_plan(loaded.manifest, loaded.doc, load_policies(list(policy_dirs)))
        catalogue = cards()
    if fmt == "json":
        click.echo(plan.model_dump_json(indent=2))
        return
    click.echo(f"manifest      {manifest} ({plan.manifest_name})")
    click.echo(f"intervention  {plan.intervention.value}{' (approximate)' if plan.approximate else ''}")
    click.echo(f"              {plan.intervention_summary.strip()}")
    click.echo(f"claim         {plan.claim.value}: {plan.claim_in_words}")
    click.echo(f"rule          {plan.claim_rule.strip()}")
    click.echo(f"              ({plan.claim_source})")
    click.echo(
        f"identity      required: {', '.join(plan.identity_required) or 'none'}; "
        f"declared: {', '.join(plan.identity_declared) or 'none'}"
    )
    click.echo(f"checks        {len(plan.checks)}")
    for i, planned in enumerate(plan.checks, 1):
        flag = "" if planned.available else "  [NOT AVAILABLE]"
        click.echo(f"\n{i}. {planned.check}  step {planned.step}, {planned.severity}{flag}")
        click.echo(f"   why:      {planned.why.strip()}")
        card = catalogue.get(planned.check)
        if card is not None:
            click.echo(f"   blind to: {' '.join(card.blind_to.split())}")
        click.echo(f"   rule:     {planned.source}")
        for line in planned.resolution:
            click.echo(f"   resolved: {line}")
        if planned.params:
            rendered = ", ".join(f"{k}={v}" for k, v in planned.params.items())
            click.echo(f"   params:   {rendered}")
        if planned.controls:
            faults = ", ".join(c.fault + ("" if c.expect == "detect" else " (must pass)") for c in planned.controls)
            click.echo(f"   controls: {faults}")
    click.echo("\npolicies")
    for digest in plan.policies:
        click.echo(f"  {digest.sha256[:16]}  {digest.path}")
