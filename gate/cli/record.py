"""`gate record MANIFEST --out BASELINE --sign-key KEY`: store, bind and sign the reference side's answers."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gate.cli.common import echo, policy_dir_option, user_errors
from gate.cli.progress import Reporter


@click.command("record")
@click.argument("manifest", type=click.Path(path_type=Path))
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path), help="Baseline directory.")
@click.option(
    "--sign-key",
    required=True,
    type=click.Path(path_type=Path),
    help="The run key (a run signer's, from `gate keygen`): a replay refuses an unsigned baseline.",
)
@click.option("--threads", type=click.IntRange(min=1), envvar="GATE_THREADS", help="torch CPU threads.")
@policy_dir_option
def command(manifest: Path, out_dir: Path, sign_key: Path, threads: int | None, policy_dirs: tuple[Path, ...]) -> None:
    """Run the plan's checks once, with their controls, storing every answer the reference gives.

    The candidate is built only so the checks ask the questions a real run asks (its shape decides
    the swept lengths); its answers are not stored. baseline.json is then bound to the commit
    recorded (the manifest's change.commit, else the CI's, else git HEAD here) and signed with
    --sign-key. Replay with `adapter: recorded, options: {baseline: BASELINE}` as the reference, in
    another environment and another build (docs/baselines.md).
    """
    from gate.engine.options import RunOptions
    from gate.engine.runner import run_manifest
    from gate.trust.baseline import recording_commit, seal_baseline
    from gate.trust.keys import load_private_key

    reporter = Reporter()
    with user_errors():
        load_private_key(sign_key)  # a bad key fails before anything runs
        commit = recording_commit(manifest)
        if threads is not None:
            import torch

            torch.set_num_threads(threads)
        result = run_manifest(
            manifest,
            out_dir / "record-run",
            RunOptions(policy_dirs=policy_dirs, record=out_dir),
            log=reporter.log,
            events=reporter.event,
        )
        digest = seal_baseline(out_dir, sign_key, commit)
    baseline = result.baseline or {}
    echo(
        f"recorded {baseline.get('answers_computed')} reference answers into {out_dir} for commit {commit}, "
        f"signed (baseline.json sha256 {digest}, gate commit {baseline.get('gate_commit')})"
    )
    sys.exit(0)
