"""`gate diff A [B | --ledger L]`: two dossiers side by side (verdict, checks, identity, plan)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from gate.cli.common import echo, user_errors
from gate.cli.ledger_options import ledger_option_of, open_read_only

if TYPE_CHECKING:
    from gate.core.result import GateResult


@click.command("diff")
@click.argument("a", type=click.Path(path_type=Path))
@click.argument("b", type=click.Path(path_type=Path), required=False)
@ledger_option_of(
    "Compare A with the newest run of A's manifest this ledger recorded on another commit (an SQLite "
    "file or postgresql://...); that run's dossier directory must still hold its results.json."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "md", "json"]),
    default="text",
    show_default=True,
    help="text: aligned lines for the terminal; md: Markdown for a PR comment; json: the diff as data.",
)
def command(a: Path, b: Path | None, ledger_path: Path | None, fmt: str) -> None:
    """Show what changed between two dossiers (directories holding results.json): verdict, each
    check's status, first failing length, bounds, intervals and measures, identity and versions,
    and the plan (checks added or removed, parameters, policy digests). One line per change;
    unchanged items are folded.

    With only A and --ledger L, B is A and A is the newest run of the same manifest that L recorded
    on another commit (e.g. main's latest). Exit 0 when the diff is computed, 2 on bad input.
    """
    from gate.errors import InputError
    from gate.report.diff import diff_results, load_result, render_json, render_markdown, render_text

    with user_errors():
        if (b is None) == (ledger_path is None):
            raise InputError("gate diff", "give two dossiers A B, or one dossier A and --ledger L (not both)")
        if b is not None:
            diff = diff_results(load_result(a), load_result(b), a_name=str(a), b_name=str(b))
        else:
            assert ledger_path is not None
            new = load_result(a)
            old, base, label = _ledger_base(
                ledger_path, new.manifest.get("name"), (new.manifest.get("change") or {}).get("commit")
            )
            diff = diff_results(old, new, a_name=str(base), b_name=str(a), a_label=label)
        render = {"text": render_text, "md": render_markdown, "json": render_json}[fmt]
        echo(render(diff), nl=False)


def _ledger_base(ledger_path: Path, name: object, commit: object) -> tuple[GateResult, Path, str]:
    """The record, directory and label of the newest run of manifest `name` on a commit other than
    `commit`, read from the dossier directory its ledger entry names (refused when gone or replaced)."""
    from gate.errors import InputError
    from gate.trust.history import latest_other_commit, recorded_dossier

    with open_read_only(ledger_path) as ledger:
        entry = latest_other_commit(list(ledger.entries()), str(name), commit if isinstance(commit, str) else None)
        location = ledger.location
    if entry is None:
        raise InputError(
            str(location), f"no run of manifest {name!r} on a commit other than {commit or '(none)'} is recorded"
        )
    result, note = recorded_dossier(entry.body)
    if result is None:
        raise InputError(str(location), f"entry #{entry.seq}: {note}")
    sha = (entry.body.get("change") or {}).get("commit") or "(no commit)"
    directory = Path(str(entry.body["dossier"]["dir"]))
    return result, directory, f"{directory} (ledger run #{entry.seq}, commit {sha})"
