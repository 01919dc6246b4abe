"""`gate history NAME --ledger L [--html OUT]`: a manifest's or a check's runs across the ledger."""

from __future__ import annotations

from pathlib import Path

import click

from gate.cli.common import echo, user_errors
from gate.cli.ledger_options import ledger_option, open_read_only


@click.command("history")
@click.argument("selector", metavar="MANIFEST_OR_CHECK")
@ledger_option
@click.option(
    "--html",
    "html_out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write an HTML page with one inline SVG plot per measure (approvals marked).",
)
def command(selector: str, ledger_path: Path | None, html_out: Path | None) -> None:
    """Each check's status and key measure across the ledger's runs of MANIFEST_OR_CHECK (a
    manifest's name or file, or a check's name), in ledger order with each run's commit, and the
    first failing commit. Measures come from each run's dossier directory (results.json), when it
    is still there; "dossier not found" otherwise. Exit 0 when shown, 2 on bad input.
    """
    from gate._util.atomic import write_bytes_atomic
    from gate.errors import OutputError
    from gate.trust.history import build_history
    from gate.trust.history_render import render_html, render_text

    with user_errors():
        with open_read_only(ledger_path) as ledger:
            history = build_history(list(ledger.entries()), selector, ledger.location)
        echo(render_text(history), nl=False)
        if html_out is not None:
            try:
                write_bytes_atomic(html_out, render_html(history).encode())
            except OSError as err:
                raise OutputError(f"{html_out}: cannot write: {err.strerror or err}") from None
            echo(f"  {html_out}")
