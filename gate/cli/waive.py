"""`gate waive CHECK --manifest FILE ...`: record an expiring waiver for one check of one manifest."""

from __future__ import annotations

from pathlib import Path

import click

from gate.cli.common import echo, policy_dir_option, user_errors
from gate.cli.ledger_options import ledger_key_option, ledger_option
from gate.cli.roles import trust_option


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
@click.option(
    "--approver",
    default=None,
    help="Who grants the waiver: the name the trust policy binds to --key (default: that name).",
)
@click.option("--expires", required=True, help="Last day (UTC, YYYY-MM-DD) the waiver applies.")
@click.option(
    "--key",
    "key_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Required: the approver's Ed25519 private key (from `gate keygen`); it signs the waiver.",
)
@trust_option(" saying who may waive which check, for how long")
@ledger_option
@ledger_key_option
@policy_dir_option
def command(
    check: str,
    manifest_path: Path,
    reason: str,
    approver: str | None,
    expires: str,
    key_path: Path | None,
    trust_path: Path | None,
    ledger_path: Path | None,
    ledger_key: Path | None,
    policy_dirs: tuple[Path, ...],
) -> None:
    """Waive CHECK for the manifest FILE until --expires.

    The waiver is signed with --key, which the trust policy must let waive CHECK, for at most its
    max-days. A waived check shows as `waived` in results, dossier and JUnit. Editing the manifest
    voids the waiver; an expired or revoked waiver is ignored and reported; an `error` is never waived.
    """
    from gate.errors import InputError
    from gate.trust.ledger import Ledger
    from gate.trust.ledger_paths import resolve_ledger_path
    from gate.trust.policy import require_trust
    from gate.trust.waivers import grant_waiver

    with user_errors():
        if key_path is None:
            raise InputError("--key", "a waiver must be signed: give the approver's key (unsigned waivers never apply)")
        trust = require_trust(trust_path, "gate waive")
        path = resolve_ledger_path(ledger_path)
        with Ledger.open(path, key_path=ledger_key) as ledger:
            waiver = grant_waiver(
                ledger,
                manifest_path,
                check,
                reason=reason,
                approver=approver,
                expires=expires,
                key_path=key_path,
                trust=trust,
                policy_dirs=list(policy_dirs),
            )
            checkpoint = ledger.checkpoint()
    g = waiver.grant
    echo(
        f"waiver #{waiver.id}: {g.check} of {g.manifest_name} (manifest sha256 {g.manifest_sha256[:16]}) "
        f"waived until {g.expires.isoformat()} by {g.approver} "
        f"(signed, key {str((g.signature or {}).get('keyid'))[:16]})"
    )
    if checkpoint is not None:
        echo(f"ledger {path}: {checkpoint.size} entries, head {checkpoint.head[:16]}")
