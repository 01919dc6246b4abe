"""Shared CLI plumbing: turning GateErrors into one line and an exit code, shared options."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from gate.cli.progress import ColorMode, Reporter
from gate.errors import GateError, InputError

policy_dir_option = click.option(
    "--policy-dir",
    "policy_dirs",
    multiple=True,
    type=click.Path(path_type=Path),
    help="Extra policy directory; later directories override earlier rules (see `gate plan`).",
)


@contextmanager
def user_errors() -> Iterator[None]:
    """Print a GateError as one line on stderr and exit with its code; no traceback."""
    try:
        yield
    except GateError as err:
        for line in err.lines() if isinstance(err, InputError) else [str(err)]:
            click.echo(f"gate: {line}", err=True)
        sys.exit(err.exit_code)


def progress_logger(verbosity: int = 1, color: ColorMode = "auto") -> Callable[[str], None]:
    """The log sink of a Reporter (gate.cli.progress): styled lines on a terminal, plain ones in CI."""
    return Reporter(verbosity, color).log


color_option = click.option(
    "--color",
    type=click.Choice(["auto", "always", "never"]),
    default="auto",
    show_default=True,
    help="Colour on the terminal; auto follows NO_COLOR / FORCE_COLOR and whether stderr is a terminal.",
)
