"""Options shared by the commands that read or write the audit ledger (not a command itself)."""

from __future__ import annotations

from pathlib import Path

import click

ledger_option = click.option(
    "--ledger",
    "ledger_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Audit ledger (SQLite). Default: $GATE_LEDGER, else ./.gate/ledger.sqlite.",
)
ledger_key_option = click.option(
    "--ledger-key",
    type=click.Path(path_type=Path),
    default=None,
    help="Ed25519 key that signs the ledger's checkpoints. Default: $GATE_LEDGER_KEY, else LEDGER's "
    "directory/ledger.key, generated (mode 0600) on first use.",
)
