"""`gate revoke (--key-id KEYID [--from TIME] | --waiver ID) --reason TEXT --key KEY`: withdraw trust."""

from __future__ import annotations

from pathlib import Path

import click

from gate.cli.common import echo, user_errors
from gate.cli.ledger_options import ledger_key_option, ledger_option
from gate.cli.roles import trust_option


@click.command("revoke")
@click.option("--key-id", "target_key", help="Revoke this key (its key id, or a PEM public key file).")
@click.option("--from", "start", help="Signatures by the key from this ISO time on are invalid (default: now).")
@click.option("--waiver", "waiver", type=int, help="Revoke the waiver with this ledger id.")
@click.option("--reason", required=True, help="Why (recorded and signed).")
@click.option("--by", "by", default=None, help="Who revokes: the name the trust policy binds to --key.")
@click.option(
    "--key",
    "key_path",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The revoker's Ed25519 private key; the trust policy must list its owner under `revokers`.",
)
@trust_option("")
@ledger_option
@ledger_key_option
def command(
    target_key: str | None,
    start: str | None,
    waiver: int | None,
    reason: str,
    by: str | None,
    key_path: Path,
    trust_path: Path | None,
    ledger_path: Path | None,
    ledger_key: Path | None,
) -> None:
    """Append a signed revocation of a key (from a time on) or of a waiver to the ledger.

    Verification after it treats the key's later signatures, or the waiver, as invalid and says so.
    """
    from gate.errors import InputError
    from gate.trust.keys import keyid, load_private_key, load_public_key
    from gate.trust.ledger import Ledger
    from gate.trust.ledger_paths import resolve_ledger_path
    from gate.trust.policy import require_trust
    from gate.trust.revocation import append_revocation, revocation_body
    from gate.trust.waivers import require_verified

    with user_errors():
        trust = require_trust(trust_path, "gate revoke")
        key = load_private_key(key_path)
        name = by if by is not None else trust.name_of(keyid(key.public_key()))
        if not name:
            raise InputError("--by", "name who revokes (the key is not bound to a name in the trust policy)")
        target = target_key
        if target is not None and Path(target).is_file():
            target = keyid(load_public_key(Path(target)))
        body = revocation_body(keyid=target, waiver=waiver, start=start, reason=reason, by=name, trust=trust)
        with Ledger.open(resolve_ledger_path(ledger_path), key_path=ledger_key) as ledger:
            require_verified(ledger, "nothing can be revoked on it")
            entry = append_revocation(ledger, body, key, trust)
    what = f"waiver #{waiver}" if waiver is not None else f"key {str(target)[:16]} from {body['target']['from']}"
    echo(f"revocation #{entry.seq}: {what} revoked by {name}: {reason}")
