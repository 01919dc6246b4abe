"""Shared CLI plumbing: turning GateErrors into one line and an exit code, shared options."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from gate.errors import GateError, InputError

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


def report_error(err: GateError) -> None:
    """Print a GateError on stderr: one line, or one per error in a bad input file (a message holding
    another program's text, an engine's error body, stays on its line: gate._util.text.one_line)."""
    from gate._util.text import one_line

    for line in err.lines() if isinstance(err, InputError) else [str(err)]:
        echo(f"gate: {one_line(line)}", err=True)


@contextmanager
def user_errors() -> Iterator[None]:
    """Print a GateError on stderr and exit with its code; no traceback."""
    try:
        yield
    except GateError as err:
        report_error(err)
        sys.exit(err.exit_code)


color_option = click.option(
    "--color",
    type=click.Choice(["auto", "always", "never"]),
    default="auto",
    show_default=True,
    help="Colour on the terminal; auto follows NO_COLOR / FORCE_COLOR and whether stderr is a terminal.",
)
