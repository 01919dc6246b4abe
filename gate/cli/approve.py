"""`gate approve DIR --approver NAME --key KEY --reason TEXT`: sign off an awaiting-approval dossier."""

from __future__ import annotations

from pathlib import Path

import click

from gate.cli.common import echo, user_errors
from gate.cli.ledger_options import ledger_key_option, ledger_option
from gate.cli.roles import trust_option


@click.command("approve")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--approver",
    default=None,
    help="Who approves (recorded and signed); must be the name the trust policy binds to --key. Default: that name.",
)
@click.option(
    "--key",
    "key_path",
    required=True,
    type=click.Path(path_type=Path),
    help="The approver's Ed25519 private key (from `gate keygen`); not the key that signed the run.",
)
@click.option("--reason", required=True, help="Why this approximation may ship.")
@trust_option(" naming approvers and run signers")
@ledger_option
@ledger_key_option
def command(
    directory: Path,
    approver: str | None,
    key_path: Path,
    reason: str,
    trust_path: Path | None,
    ledger_path: Path | None,
    ledger_key: Path | None,
) -> None:
    """Approve the dossier in DIR: verify it, then sign, record and show the approval.

    Refused (exit 1) unless the trust policy lets --key approve this intervention and claim under
    that name, DIR's attestation verifies against a run signer's key and its signed verdict is
    awaiting-approval. The approval becomes a second signature on
    attestation.dsse.json, a signed approval statement in DIR/approval.json, a ledger entry, and
    a re-rendered DIR/dossier.approved.html.

    The ledger: --ledger, else $GATE_LEDGER, else the ledger the run was recorded in (DIR/ledger.json),
    else ./.gate/ledger.sqlite; the output says which and why. A refused approval writes no ledger.
    """
    from gate.trust.approve import approval_ledger, approve
    from gate.trust.policy import require_trust

    with user_errors():
        trust = require_trust(trust_path, "gate approve")
        path, why = approval_ledger(ledger_path, directory)
        done = approve(
            directory,
            approver=approver,
            reason=reason,
            key_path=key_path,
            ledger_path=path,
            ledger_key=ledger_key,
            trust=trust,
        )
    record = done.record
    verb = "already approved" if done.reused else "approved"
    echo(f"{verb}: {directory} by {record.approver} (key {record.keyid[:16]})")
    echo(f"  dossier digest sha256:{record.statement_sha256}")
    echo(
        f"  evidence digest sha256:{record.evidence_sha256}"
        if record.evidence_sha256
        else "  evidence digest: not bound (an older run)"
    )
    echo(f"  ledger {path} ({why}): entry #{done.entry.seq}")
    echo(f"  what was approved: {done.summary}")
    for line in done.site_policy or ["site policy: none (the built-in policy rules, unchanged)"]:
        echo(f"  {line}")
    for written in done.written:
        echo(f"  {written}")
