"""`gate keygen --out PREFIX`: an Ed25519 key pair for signing dossiers."""

from __future__ import annotations

from pathlib import Path

import click

from gate.cli.common import echo, user_errors


@click.command("keygen")
@click.option(
    "--out",
    "prefix",
    required=True,
    type=click.Path(path_type=Path),
    help="Writes PREFIX.key (private, mode 0600) and PREFIX.pub.",
)
@click.option("--force", is_flag=True, help="Replace existing key files.")
def command(prefix: Path, force: bool) -> None:
    """Make an Ed25519 key pair: sign runs with PREFIX.key, verify them with PREFIX.pub."""
    from gate.trust.keys import generate_keypair

    with user_errors():
        key_path, pub_path, key_id = generate_keypair(prefix, force=force)
    echo(f"private key: {key_path} (keep it secret; mode 0600)")
    echo(f"public key:  {pub_path}")
    echo(f"keyid:       {key_id}")
    echo(f"sign:        gate run MANIFEST --out DIR --sign-key {key_path}")
    echo(f"verify:      gate verify DIR --run-key {pub_path} (or list it in trust.yaml)")
