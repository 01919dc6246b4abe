"""`gate checks`: registered checks, what each proves and what it is blind to."""

from __future__ import annotations

import click

from gate.cli.common import echo, user_errors


@click.command("checks")
@click.option("--verbose", "-v", is_flag=True, help="Also print what each check proves and is blind to.")
@click.option(
    "--capabilities",
    "table",
    is_flag=True,
    help="Print the capability table instead: each capability -> the built-in checks it lets run and what it "
    "adds to others (markdown, as docs/plugins.md carries it).",
)
@click.option(
    "--diagnoses",
    is_flag=True,
    help="Print the diagnosis table instead: per bug class, what names it with sessions alone and what the "
    "optional LayerTracing and AttentionProbe add (markdown, as docs/plugins.md carries it).",
)
def command(verbose: bool, table: bool, diagnoses: bool) -> None:
    """List registered checks (built-in and plugins) with their catalogue cards."""
    if diagnoses:
        from gate.checks.planning import diagnosis_table

        click.echo(diagnosis_table(), nl=False)
        return
    if table:
        from gate.checks.planning import capability_table

        click.echo(capability_table(), nl=False)
        return
    from gate.core.catalogue import cards
    from gate.core.registry import CHECK_GROUP, check_names, entry_point_of

    with user_errors():
        catalogue = cards()
    for name in sorted(set(check_names()) | set(catalogue)):
        ep = entry_point_of(CHECK_GROUP, name)
        card = catalogue.get(name)
        where = ep.value if ep else "NOT REGISTERED"
        step = f"step {card.step}" if card else "no card"
        echo(f"{name:<22} {step:<8} {where}")
        if verbose and card:
            echo(f"    proves:   {' '.join(card.proves.split())}")
            echo(f"    blind to: {' '.join(card.blind_to.split())}")
            if card.without:
                echo(f"    without {', '.join(card.needs)}: {' '.join(card.without.split())}")
