"""`gate schema`: print or write the JSON Schemas of manifest, policy, plan and result."""

from __future__ import annotations

from pathlib import Path

import click

from gate.cli.common import echo


@click.command("schema")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), help="Write one file per record here.")
@click.argument("record", required=False, type=click.Choice(["manifest", "policy", "plan", "result"]))
def command(out_dir: Path | None, record: str | None) -> None:
    """JSON Schema generated from the records (for editors validating manifests)."""
    from gate._util.atomic import write_bytes_atomic
    from gate.checks.faces import EVIDENCE
    from gate.core.schemas import render_schemas

    schemas = render_schemas(EVIDENCE)
    if out_dir is not None:
        for name, text in schemas.items():
            write_bytes_atomic(out_dir / name, text.encode())
            echo(out_dir / name)
        return
    echo(schemas[f"{record or 'manifest'}.schema.json"], nl=False)
