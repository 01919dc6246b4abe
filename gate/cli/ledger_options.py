"""Options shared by the commands that read or write the audit ledger (not a command itself)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

FC = TypeVar("FC", bound=Callable[..., object])


def _location(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Path | None:
    from gate.trust.ledger_store import ledger_location

    return None if value is None else ledger_location(value)


def open_read_only(ledger_path: Path | None) -> Any:
    """The ledger --ledger names (else the default one), read-only; InputError when there is none."""
    from gate.trust.ledger import Ledger
    from gate.trust.ledger_paths import resolve_ledger_path

    return Ledger.open(resolve_ledger_path(ledger_path, must_exist=True), writable=False, create=False)


def ledger_option_of(help_text: str) -> Callable[[FC], FC]:
    """--ledger PATH|URL with its own help (a file, or postgresql://... for a fleet's ledger)."""
    return click.option("--ledger", "ledger_path", type=str, default=None, callback=_location, help=help_text)


ledger_option = ledger_option_of(
    "Audit ledger: an SQLite file, or postgresql://USER@HOST/DB for a ledger shared by a CI fleet "
    "(see docs/reliability.md). Default: $GATE_LEDGER, else ./.gate/ledger.sqlite."
)
ledger_key_option = click.option(
    "--ledger-key",
    type=click.Path(path_type=Path),
    default=None,
    help="Ed25519 key that signs the ledger's checkpoints. Default: $GATE_LEDGER_KEY, else LEDGER with "
    "the suffix .key (gate.sqlite: gate.key, its public half gate.pub), generated (mode 0600) on first use.",
)
