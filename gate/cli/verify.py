"""`gate verify DIR --trust trust.yaml [--commit SHA] [--manifest FILE]`: offline check of a run by roles."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import click

from gate.cli.common import echo, user_errors
from gate.cli.ledger_options import ledger_option_of
from gate.cli.roles import Roles, any_verdict_option, trust_options
from gate.errors import EXIT_OTHER_COMMIT

mains_policy_option = click.option(
    "--policy-dir",
    "policy_dirs",
    multiple=True,
    type=click.Path(path_type=Path),
    help="Main's site policy directory (repeat, in order): the run's plan must have been built from exactly "
    "the built-in policies and these files (by sha256), else NOT DEPLOYABLE. None: the built-in ones alone.",
)


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
@ledger_option_of(
    "Audit ledger whose revocations apply and whose waivers are re-judged (keys revoked, from a time on): "
    "an SQLite file or postgresql://USER@HOST/DB. No default: without it, waivers are not judged."
)
@mains_policy_option
@any_verdict_option
def command(
    directory: Path,
    roles: Roles,
    commit: str | None,
    manifest_path: Path | None,
    ledger_path: Path | None,
    policy_dirs: tuple[Path, ...],
    any_verdict: bool,
) -> None:
    """Verify DIR: the run signer's signature, every signed file, the commit and manifest, approvals.

    Prints the commit, manifest and verdict it verified. Exit 0 when valid and deployable (PASS,
    APPROVED, or PASS WITH WAIVERS whose waivers count under this trust policy: needs --ledger),
    7 when valid but not deployable (0 with --any-verdict), or when a file that shaped the verdict is
    not main's (a policy file not among main's --policy-dir, a baseline not signed by a run signer
    of --trust): one line naming it and its digest; 8 when valid but the dossier of another commit
    than --commit; 1 when not valid (each problem named), 2 for usage errors.

    --commit may name the commit that landed the dossier's commit (merge commit, squash or rebase
    of the same change, read from the git repository gate runs in): it is verified as landed.
    """
    from gate._util.digest import sha256_file
    from gate.trust.landing import asked_commit
    from gate.trust.verify_run import Finding, check_run

    with user_errors():
        trust = roles.load()
        asked = asked_commit(directory, commit)
        run = partial(
            check_run,
            directory,
            trust,
            commit=asked.bind,
            manifest_sha256=sha256_file(manifest_path) if manifest_path else None,
            policy_dirs=list(policy_dirs),
        )
        checked = run() if ledger_path is None else _with_ledger(ledger_path, directory, trust, run)
    if asked.landed is not None:
        checked.findings.insert(0, Finding(True, asked.landed.text))
    for finding in checked.findings:
        say(finding.ok, finding.text)
    if checked.ok and asked.other is not None:
        echo(f"OTHER COMMIT: {directory}: {asked.other}", err=True)
        sys.exit(EXIT_OTHER_COMMIT)
    for line in checked.not_mains[1:]:
        echo(f"not main's: {line}")
    if checked.ok:
        echo(f"verified: {directory}: {checked.summary()}")
        sys.exit(deploy_exit(checked.deployable, any_verdict, checked.not_mains))
    if asked.other is not None:
        echo(f"FAIL {asked.other}", err=True)
    bad = sum(1 for f in checked.findings if f.ok is False) + (asked.other is not None)
    echo(f"INVALID: {directory}: {bad} problem(s)", err=True)
    sys.exit(1)


MARKS = {True: "ok  ", False: "FAIL", None: "note"}


def say(ok: bool | None, text: str) -> None:
    """One finding: ok, FAIL (on stderr) or note."""
    echo(f"{MARKS[ok]} {text}", err=ok is False)


def deploy_exit(deployable: bool, any_verdict: bool, not_mains: list[str] | None = None) -> int:
    """0 for a deployable verdict (or any verdict when asked); else EXIT_NOT_DEPLOYABLE, said in one
    line: the first input that is not main's (a file and its digest), else the verdict."""
    from gate.errors import EXIT_NOT_DEPLOYABLE

    if deployable or any_verdict:
        return 0
    if not_mains:
        more = f" (and {len(not_mains) - 1} more above)" if len(not_mains) > 1 else ""
        echo(f"NOT DEPLOYABLE: {not_mains[0]}{more}", err=True)
        return EXIT_NOT_DEPLOYABLE
    echo(
        "NOT DEPLOYABLE: authentic, but its verdict is not one a deploy may ship "
        "(--any-verdict: check authenticity only)",
        err=True,
    )
    return EXIT_NOT_DEPLOYABLE


def _with_ledger(ledger_path: Path, directory: Path, trust: Any, run: Callable[..., Any]) -> Any:
    """`run` (check_run of the command's run) with the ledger's trusted revocations, the run's ledger
    time (None: never recorded), and the waivers re-judged under `trust`."""
    from gate.trust.approve import find_run_entry
    from gate.trust.deployable import judge_waivers
    from gate.trust.ledger import Ledger
    from gate.trust.ledger_verify import verify_chain
    from gate.trust.revocation import read_revocations
    from gate.trust.run_record import statement_digest
    from gate.trust.verify_run import Finding

    with Ledger.open(ledger_path, writable=False, create=False) as ledger:
        # the revocations and waivers it holds count only from a ledger that verifies, pin included
        # (a ledger cut back below its pin would hide a revocation)
        chain = verify_chain(ledger, pinned_keyids=trust.ledger_keyids() or None, every_checkpoint=False)
        revocations = read_revocations(ledger, trust)
        digest = statement_digest(directory / "attestation.dsse.json")
        entry = find_run_entry(ledger, digest) if digest else None
        run_time = entry.time if entry else None
        checked = run(revocations=revocations, run_time=run_time)
        judge_waivers(checked, ledger, trust, run_time)
        checked.findings += [Finding(False, f"ledger {ledger.location}: {p.message}") for p in chain.problems]
        return checked
