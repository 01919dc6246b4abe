"""Options that give keys by role (run signer, approver, ledger) or a trust policy (not a command)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from pathlib import Path
from typing import Any

import click

_pub = click.Path(exists=True, dir_okay=False, path_type=Path)


@dataclass(frozen=True)
class Roles:
    """What --trust, --run-key and --approver-key gave (`trust_options` passes them as one `roles`)."""

    trust_path: Path | None
    run_keys: tuple[Path, ...]
    approver_keys: tuple[Path, ...]

    @property
    def given(self) -> bool:
        return bool(self.trust_path or self.run_keys or self.approver_keys)

    def load(self) -> Any:
        return load_roles(self.trust_path, self.run_keys, self.approver_keys)


def trust_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--trust FILE, --run-key PUB..., --approver-key PUB... on a command, which takes them as `roles: Roles`."""

    @wraps(f)
    def with_roles(
        *args: Any, trust_path: Path | None, run_keys: tuple[Path, ...], approver_keys: tuple[Path, ...], **kwargs: Any
    ) -> Any:
        return f(*args, roles=Roles(trust_path, run_keys, approver_keys), **kwargs)

    command: Callable[..., Any] = with_roles
    for flag, name, help_text in (
        ("--approver-key", "approver_keys", "an approver (instead of --trust); repeat. Counts only for approvals."),
        ("--run-key", "run_keys", "a run signer (CI; instead of --trust); repeat. Counts only for run signatures."),
    ):
        command = click.option(flag, name, multiple=True, type=_pub, help=f"Public key of {help_text}")(command)
    return trust_option(" (trust.yaml: names, keys, roles)")(command)


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
