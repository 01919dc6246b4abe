"""`gate verify DIR --key PREFIX.pub`: offline check of a run's signed attestation."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gate.cli.common import user_errors


@click.command("verify")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--key",
    "keys",
    multiple=True,
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Trusted public key (PEM); repeat to require several signers, e.g. gate and reviewer.",
)
@click.option("--any-key", is_flag=True, help="Valid when any one of the --key keys signed (default: all must).")
def command(directory: Path, keys: tuple[Path, ...], any_key: bool) -> None:
    """Verify DIR/attestation.dsse.json: signatures, payload and statement types, every file digest.

    Exit 0 when valid, 1 when not (each problem named), 2 for usage errors.
    """
    from gate.trust.attest import verify_envelope

    with user_errors():
        report = verify_envelope(directory, list(keys), require_all=not any_key)
    for signer in report.signed_by:
        click.echo(f"ok   signature by {signer.label} (keyid {signer.keyid})")
    for line in report.subjects:
        click.echo(f"ok   {line}")
    for keyid in report.other_signatures:
        click.echo(f"note signature by keyid {keyid} matches none of the given keys")
    for failure in report.failures:
        click.echo(f"FAIL {failure}", err=True)
    if report.valid:
        verdict = report.predicate.get("verdict", "?")
        click.echo(f"valid: {directory} is signed; verdict {str(verdict).upper()}")
        sys.exit(0)
    click.echo(f"INVALID: {directory}: {len(report.failures)} problem(s)", err=True)
    sys.exit(1)
