"""`gate record MANIFEST --out BASELINE`: store the reference side's answers for a later `recorded` run."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gate.cli.common import echo, policy_dir_option, progress_logger, user_errors


@click.command("record")
@click.argument("manifest", type=click.Path(path_type=Path))
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path), help="Baseline directory.")
@click.option("--threads", type=click.IntRange(min=1), envvar="GATE_THREADS", help="torch CPU threads.")
@policy_dir_option
def command(manifest: Path, out_dir: Path, threads: int | None, policy_dirs: tuple[Path, ...]) -> None:
    """Run the plan's checks once, with their controls, storing every answer the reference gives.

    The candidate is built only so the checks ask the questions a real run asks (its shape decides
    the swept lengths); its answers are not stored. Replay with `adapter: recorded, options:
    {baseline: BASELINE}` as the reference, in another environment and another build.
    """
    from gate.engine.runner import RunOptions, run_manifest

    log = progress_logger()
    with user_errors():
        if threads is not None:
            import torch

            torch.set_num_threads(threads)
        result = run_manifest(
            manifest, RunOptions(out_dir=out_dir / "record-run", policy_dirs=list(policy_dirs), log=log, record=out_dir)
        )
    baseline = result.baseline or {}
    echo(
        f"recorded {baseline.get('answers_computed')} reference answers into {out_dir} "
        f"(baseline.json sha256 {baseline.get('sha256')}, gate commit {baseline.get('gate_commit')})"
    )
    sys.exit(0)
