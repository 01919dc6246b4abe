"""Shared CLI plumbing: turning GateErrors into one line and an exit code, progress output."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from gate.errors import GateError

policy_dir_option = click.option(
    "--policy-dir",
    "policy_dirs",
    multiple=True,
    type=click.Path(path_type=Path),
    help="Extra policy directory; later directories override earlier rules (see `gate plan`).",
)


def echo(message: Any = None, **kwargs: Any) -> None:
    """click.echo with control characters and bidi overrides written as `\\uXXXX` (gate._util.text):
    text from a manifest, a ledger or a key cannot rewrite the terminal or reorder what it shows."""
    from gate._util.text import printable

    click.echo(printable(message) if isinstance(message, str) else message, **kwargs)


@contextmanager
def user_errors() -> Iterator[None]:
    """Print a GateError as one line on stderr and exit with its code; no traceback."""
    try:
        yield
    except GateError as err:
        echo(f"gate: {err}", err=True)
        sys.exit(err.exit_code)


def is_ci() -> bool:
    return bool(os.environ.get("CI")) or not sys.stderr.isatty()


STATUS_LINE = re.compile(r"^\s*([a-z-]+): ")
"""A check's result line as the runner logs it: `  STATUS: message`."""
STATUS_STYLES = {
    "pass": "green",
    "fail": "bold red",
    "error": "bold red",
    "warn": "yellow",
    "unproven": "yellow",
    "waived": "cyan",
    "skip": "dim",
}
"""Terminal colour per status; rich leaves colour out under NO_COLOR or without a terminal."""


def progress_logger() -> Callable[[str], None]:
    """Rich styled lines on a terminal; plain lines in CI or when stderr is not a terminal."""
    from gate._util.text import printable

    if is_ci():
        return lambda msg: print(f"[gate] {printable(msg)}", file=sys.stderr, flush=True)
    from rich.console import Console

    console = Console(stderr=True)

    def log(msg: str) -> None:
        status = STATUS_LINE.match(msg)
        console.print(
            printable(msg), style=STATUS_STYLES.get(status.group(1)) if status else None, highlight=False, markup=False
        )

    return log
