"""`gate verify DIR --trust trust.yaml [--commit SHA] [--manifest FILE]`: offline check of a run by roles."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from gate.cli.common import echo, user_errors
from gate.cli.roles import load_roles, trust_options


@click.command("verify")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@trust_options
@click.option("--commit", help="The commit this dossier must be for (7+ hex characters): the one you deploy.")
@click.option(
    "--manifest",
    "manifest_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The manifest file the dossier must be for (its sha256 is compared with the signed one).",
)
@click.option(
    "--ledger",
    "ledger_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Audit ledger whose revocations apply (keys revoked, from a time on).",
)
def command(
    directory: Path,
    trust_path: Path | None,
    run_keys: tuple[Path, ...],
    approver_keys: tuple[Path, ...],
    commit: str | None,
    manifest_path: Path | None,
    ledger_path: Path | None,
) -> None:
    """Verify DIR: the run signer's signature, every signed file, the commit and manifest, approvals.

    Prints the commit, manifest and verdict it verified. Exit 0 when valid, 1 when not (each
    problem named), 2 for usage errors.
    """
    from gate.trust.attest import sha256_file
    from gate.trust.verify_run import check_run

    with user_errors():
        trust = load_roles(trust_path, run_keys, approver_keys)
        revocations, run_time = None, None
        if ledger_path is not None:
            revocations, run_time = _ledger_facts(ledger_path, directory, trust)
        checked = check_run(
            directory,
            trust,
            commit=commit,
            manifest_sha256=sha256_file(manifest_path) if manifest_path else None,
            revocations=revocations,
            run_time=run_time,
        )
    for finding in checked.findings:
        mark = {True: "ok  ", False: "FAIL", None: "note"}[finding.ok]
        echo(f"{mark} {finding.text}", err=finding.ok is False)
    if checked.ok:
        echo(f"verified: {directory}: {checked.summary()}")
        sys.exit(0)
    bad = sum(1 for f in checked.findings if f.ok is False)
    echo(f"INVALID: {directory}: {bad} problem(s)", err=True)
    sys.exit(1)


def _ledger_facts(ledger_path: Path, directory: Path, trust: Any) -> tuple[Any, str | None]:
    """The ledger's trusted revocations, and when it recorded this dossier's run (None: never)."""
    from gate.trust.approve import find_run_entry
    from gate.trust.ledger import Ledger
    from gate.trust.revocation import read_revocations
    from gate.trust.run_record import statement_digest

    with Ledger.open(ledger_path, writable=False, create=False) as ledger:
        revocations = read_revocations(ledger, trust)
        digest = statement_digest(directory / "attestation.dsse.json")
        entry = find_run_entry(ledger, digest) if digest else None
        return revocations, entry.time if entry else None
