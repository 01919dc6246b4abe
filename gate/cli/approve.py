"""`gate approve DIR --approver NAME --key KEY --reason TEXT`: sign off an awaiting-approval dossier."""

from __future__ import annotations

from pathlib import Path

import click

from gate.cli.common import user_errors
from gate.cli.ledger_options import ledger_key_option, ledger_option


@click.command("approve")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--approver", required=True, help="Who approves (recorded and signed).")
@click.option(
    "--key",
    "key_path",
    required=True,
    type=click.Path(path_type=Path),
    help="The approver's Ed25519 private key (from `gate keygen`); not the key that signed the run.",
)
@click.option("--reason", required=True, help="Why this approximation may ship.")
@click.option(
    "--run-key",
    "run_keys",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Trusted public key the run must be signed by. Default: the signer the ledger recorded "
    "for this dossier when `gate run --ledger` recorded it.",
)
@ledger_option
@ledger_key_option
def command(
    directory: Path,
    approver: str,
    key_path: Path,
    reason: str,
    run_keys: tuple[Path, ...],
    ledger_path: Path | None,
    ledger_key: Path | None,
) -> None:
    """Approve the dossier in DIR: verify it, then sign, record and show the approval.

    Refused (exit 1) unless DIR's attestation verifies against a trusted run key and its signed
    verdict is awaiting-approval. The approval becomes a second signature on
    attestation.dsse.json, a signed approval statement in DIR/approval.json, a ledger entry, and
    a re-rendered DIR/dossier.approved.html.
    """
    from gate.trust.approve import approve
    from gate.trust.ledger import resolve_ledger_path

    with user_errors():
        path = resolve_ledger_path(ledger_path)
        done = approve(
            directory,
            approver=approver,
            reason=reason,
            key_path=key_path,
            ledger_path=path,
            ledger_key=ledger_key,
            run_keys=list(run_keys),
        )
    record = done.record
    verb = "already approved" if done.reused else "approved"
    click.echo(f"{verb}: {directory} by {record['approver']} (key {record['keyid'][:16]})")
    click.echo(f"  dossier digest sha256:{record['statement_sha256']}")
    click.echo(f"  ledger {path}: entry #{done.entry.seq}")
    for written in done.written:
        click.echo(f"  {written}")
