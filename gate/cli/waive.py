"""`gate waive CHECK --manifest FILE ...`: record an expiring waiver for one check of one manifest."""

from __future__ import annotations

from pathlib import Path

import click

from gate.cli.common import policy_dir_option, user_errors
from gate.cli.ledger_options import ledger_key_option, ledger_option


@click.command("waive")
@click.argument("check")
@click.option(
    "--manifest",
    "manifest_path",
    required=True,
    type=click.Path(path_type=Path),
    help="The manifest the waiver is scoped to (by its name and the file's sha256).",
)
@click.option("--reason", required=True, help="Why the failure is accepted for now.")
@click.option("--approver", required=True, help="Who grants the waiver.")
@click.option("--expires", required=True, help="Last day (UTC, YYYY-MM-DD) the waiver applies.")
@click.option(
    "--key",
    "key_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Optional: the approver's Ed25519 private key (from `gate keygen`) to sign the waiver.",
)
@ledger_option
@ledger_key_option
@policy_dir_option
def command(
    check: str,
    manifest_path: Path,
    reason: str,
    approver: str,
    expires: str,
    key_path: Path | None,
    ledger_path: Path | None,
    ledger_key: Path | None,
    policy_dirs: tuple[Path, ...],
) -> None:
    """Waive CHECK for the manifest FILE until --expires.

    A waived check shows as `waived` in results, dossier and JUnit. Editing the manifest voids
    the waiver; an expired waiver is ignored and reported; an `error` is never waived.
    """
    from gate.trust.ledger import Ledger, resolve_ledger_path
    from gate.trust.waivers import grant_waiver, parse_expiry

    with user_errors():
        day = parse_expiry(expires)
        path = resolve_ledger_path(ledger_path)
        signer = None
        if key_path is not None:
            from gate.trust.waivers import waiver_signer

            signer = waiver_signer(key_path)
        with Ledger.open(path, key_path=ledger_key) as ledger:
            waiver = grant_waiver(
                ledger,
                manifest_path,
                check,
                reason=reason,
                approver=approver,
                expires=day,
                policy_dirs=list(policy_dirs),
                signer=signer,
            )
            checkpoint = ledger.checkpoint()
    g = waiver.grant
    click.echo(
        f"waiver #{waiver.id}: {g.check} of {g.manifest_name} (manifest sha256 {g.manifest_sha256[:16]}) "
        f"waived until {g.expires.isoformat()} by {g.approver}{' (signed)' if g.signature else ''}"
    )
    if checkpoint is not None:
        click.echo(f"ledger {path}: {checkpoint.size} entries, head {checkpoint.head[:16]}")
