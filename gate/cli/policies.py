"""`gate policies`: the policy files in force and what each intervention may claim."""

from __future__ import annotations

from pathlib import Path

import click

from gate.cli.common import echo, policy_dir_option, user_errors


@click.command("policies")
@policy_dir_option
def command(policy_dirs: tuple[Path, ...]) -> None:
    """List policy files and, per intervention, the admissible claims and their checks."""
    from gate.core.policy import load_policies

    with user_errors():
        policies = load_policies(list(policy_dirs))
    for loaded in policies.files:
        echo(f"{loaded.sha256[:16]}  {loaded.label}")
    for intervention, resolved in sorted(policies.interventions.items(), key=lambda kv: kv[0].value):
        kind = "approximate" if resolved.approximate else "exact-intent"
        echo(f"\n{intervention.value} ({kind})")
        for level, claim in sorted(resolved.claims.items(), key=lambda kv: kv[0].value):
            if claim.rule.admissible:
                names = ", ".join(c.check for c, _ in claim.checks) or "no checks"
                echo(f"  {level.value:<20} admissible: {names}")
            else:
                echo(f"  {level.value:<20} rejected: {claim.rule.rule.strip()}")
