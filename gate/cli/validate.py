"""`gate validate MANIFEST...`: check manifests against the schema, the policies and adapter options."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gate.cli.common import echo, policy_dir_option, report_error
from gate.errors import GateError


@click.command("validate")
@click.argument("manifests", nargs=-1, required=True, type=click.Path(path_type=Path))
@policy_dir_option
def command(manifests: tuple[Path, ...], policy_dirs: tuple[Path, ...]) -> None:
    """Validate manifests: schema, policy admissibility, identity fields, adapter options."""
    from gate.engine.runner import prepare

    worst = 0
    for path in manifests:
        try:
            prepare(path, list(policy_dirs))
        except GateError as err:
            report_error(err)
            worst = max(worst, err.exit_code)
            continue
        echo(f"{path}: ok")
    sys.exit(worst)
