"""`gate run M1 M2 ... --out DIR` / `gate run --matrix FILE --out DIR`: argument handling and printing
around gate.engine.batch (the runs, the summary) and gate.engine.executors (where they run)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from gate._util.text import one_line
from gate.cli.common import echo, user_errors
from gate.cli.progress import ColorMode, Reporter
from gate.engine.options import RunOptions
from gate.engine.tasks import TaskRecord

_COLOURS = {
    "pass": "green",
    "pass-with-waivers": "cyan",
    "awaiting-approval": "magenta",
    "partial": "yellow",
    "unproven": "yellow",
    "fail": "red",
    "error": "red",
}


def run_batch_command(
    manifests: list[Path],
    matrix: Path | None,
    out_dir: Path,
    options: RunOptions,
    as_json: bool,
    verbosity: int,
    color: ColorMode,
    jobs: int,
    executor: str,
    address: str | None,
    retries: int | None,
) -> None:
    """Plan the batch (bad input: exit 2, nothing written), run it, print one line per run and the verdict."""
    from gate.engine.batch import plan_batch, run_batch
    from gate.engine.executors import make_executor

    reporter = Reporter(verbosity=verbosity, color=color)
    done = 0

    def on_done(record: TaskRecord) -> None:
        nonlocal done
        done += 1
        reporter.log(f"[{done}/{total}] {record.name}: {_label(record)} ({record.summary}) {record.duration_s:.1f}s")

    try:
        with user_errors():
            batch = plan_batch(manifests, matrix, out_dir, options, retries=retries, device_here=executor == "local")
            total = len(batch.tasks)
            reporter.log(f"batch: {total} runs on {executor}" + (f" (-j {jobs})" if executor == "local" else ""))
            info: dict[str, Any] = {"kind": executor, "threads": options.worker_threads}
            info.update({"jobs": jobs} if executor == "local" else {"address": address})
            outputs = run_batch(
                batch,
                make_executor(executor, jobs=jobs, threads=options.worker_threads, address=address),
                on_done=on_done,
                executor_info=info,
            )
    finally:
        reporter.close()
    if as_json:
        click.echo(json.dumps(outputs.document, sort_keys=True))
        sys.exit(outputs.exit_code)
    styled = {"always": True, "never": False}.get(color, False if os.environ.get("NO_COLOR") else None)
    if verbosity:
        for record in outputs.records:
            line = f"  {_label(record):<18} {record.name}" + (f": {record.error}" if record.error else "")
            click.echo(click.style(one_line(line), fg=_COLOURS.get(record.verdict)), color=styled)
    verdict = outputs.verdict.value
    text = one_line(f"verdict: {verdict.upper()}: {outputs.summary}")
    click.echo(click.style(text, fg=_COLOURS.get(verdict), bold=True), color=styled)
    if verbosity:
        for path in outputs.files:
            echo(f"  {path}")
    sys.exit(outputs.exit_code)


def _label(record: TaskRecord) -> str:
    """A run's verdict in capitals, or APPROVED BY … for an awaiting-approval run the ledger's approvals cover."""
    return f"APPROVED by {', '.join(record.approved_by)}" if record.approved else record.verdict.upper()
