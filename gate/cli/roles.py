"""Options that give keys by role (run signer, approver, ledger) or a trust policy (not a command)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

_pub = click.Path(exists=True, dir_okay=False, path_type=Path)


def trust_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--trust FILE, --run-key PUB..., --approver-key PUB... on a command."""
    for flag, name, help_text in (
        ("--approver-key", "approver_keys", "an approver (instead of --trust); repeat. Counts only for approvals."),
        ("--run-key", "run_keys", "a run signer (CI; instead of --trust); repeat. Counts only for run signatures."),
    ):
        f = click.option(flag, name, multiple=True, type=_pub, help=f"Public key of {help_text}")(f)
    return trust_option(" (trust.yaml: names, keys, roles)")(f)


def trust_option(what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--trust FILE, its help saying `what` the policy decides for this command (the default is one)."""
    return click.option(
        "--trust",
        "trust_path",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help=f"Trust policy{what}. Default: $GATE_TRUST, else ./trust.yaml.",
    )


def load_roles(trust_path: Path | None, run_keys: tuple[Path, ...], approver_keys: tuple[Path, ...]) -> Any:
    """The Trust to judge with: keys by role when given, else the trust policy; InputError if neither."""
    from gate.errors import InputError
    from gate.trust.policy import Trust, find_trust

    if run_keys or approver_keys:
        if trust_path is not None:
            raise InputError("--trust", "give either --trust or keys by role (--run-key, --approver-key), not both")
        return Trust.from_keys(run=run_keys, approvers=approver_keys)
    trust = find_trust(trust_path)
    if trust is None:
        raise InputError(
            "--trust",
            "no trust policy: give --trust FILE (or $GATE_TRUST, ./trust.yaml), or keys by role with "
            "--run-key and --approver-key",
        )
    return trust


def any_verdict_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """--any-verdict: exit 0 for any authentic dossier (an auditor checking authenticity only)."""
    return click.option(
        "--any-verdict",
        is_flag=True,
        help="Exit 0 for any verified verdict (authenticity only); by default a verified FAIL, ERROR, "
        "UNPROVEN, PARTIAL, AWAITING APPROVAL or an uncounted waiver exits 7: not deployable.",
    )(f)
