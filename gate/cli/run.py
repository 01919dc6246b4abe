"""`gate run MANIFEST --out DIR`: run the plan and write results.json (and the dossier)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gate._util.text import printable
from gate.cli.common import echo, policy_dir_option, progress_logger, user_errors
from gate.cli.ledger_options import ledger_option


@click.command("run")
@click.argument("manifest", type=click.Path(path_type=Path))
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path), help="Output directory.")
@click.option("--sign-key", type=click.Path(path_type=Path), help="Ed25519 private key (from `gate keygen`).")
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    envvar="GATE_THREADS",
    help="torch CPU threads (env GATE_THREADS). Tiny models on a shared machine often run fastest with 1.",
)
@click.option(
    "--reference-cache",
    type=click.Path(path_type=Path),
    envvar="GATE_REFERENCE_CACHE",
    help="Directory of stored reference answers (env GATE_REFERENCE_CACHE): an unchanged reference is read, "
    "not recomputed (the same store `gate record` writes).",
)
@policy_dir_option
@ledger_option
@click.option(
    "--trust",
    "trust_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Trust policy saying whose waivers apply. Default: $GATE_TRUST, else ./trust.yaml.",
)
def command(
    manifest: Path,
    out_dir: Path,
    sign_key: Path | None,
    threads: int | None,
    reference_cache: Path | None,
    policy_dirs: tuple[Path, ...],
    ledger_path: Path | None,
    trust_path: Path | None,
) -> None:
    """Run every check the policy requires for MANIFEST; exit with the verdict's code.

    With --ledger, $GATE_LEDGER or an existing ./.gate/ledger.sqlite, waivers recorded there apply
    and the verdict is appended to it (see docs/audit.md); otherwise nothing is recorded.
    """
    from gate.engine.pipeline import run_pipeline
    from gate.report.build import build_report
    from gate.report.words import VERDICTS
    from gate.trust.ledger import run_ledger_path

    log = progress_logger()
    with user_errors():
        if threads is not None:
            import torch

            torch.set_num_threads(threads)
        outputs = run_pipeline(
            manifest,
            out_dir,
            sign_key=sign_key,
            ledger=run_ledger_path(ledger_path),
            policy_dirs=list(policy_dirs),
            log=log,
            trust=trust_path,
            reference_cache=reference_cache,
        )
        if outputs.ledger_seq is not None:
            log(f"ledger: recorded as entry #{outputs.ledger_seq}")
    result = outputs.result
    for check in result.checks:
        if check.status.value == "unproven":
            click.echo(click.style(printable(f"  UNPROVEN {check.check}: {check.message}"), fg="yellow"))
    label, tone = VERDICTS.get(result.verdict.value, (result.verdict.value.upper(), "muted"))
    colour = {"good": "green", "bad": "red", "unproven": "yellow", "waived": "cyan", "await": "magenta"}.get(tone)
    click.echo(click.style(printable(f"verdict: {label} ({result.summary})"), fg=colour, bold=True))
    for note in build_report(result).banner.notes:
        click.echo(click.style(printable(f"  {note}"), fg=colour))
    for path in outputs.files:
        echo(f"  {path}")
    sys.exit(result.exit_code)
