"""`gate run MANIFEST --out DIR`: run the plan and write results.json (and the dossier); several
manifests or `--matrix FILE`: a batch, each run into `DIR/<name>/` (gate.engine.batch).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import click

from gate._util.text import one_line
from gate.cli.common import color_option, echo, policy_dir_option, user_errors
from gate.cli.ledger_options import ledger_option
from gate.cli.progress import ColorMode, Reporter
from gate.cli.roles import trust_option


def parse_params(values: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """`CHECK.KEY=VALUE` (VALUE read as YAML: 512, true, [1, 2]) -> {CHECK: {KEY: VALUE}}."""
    from gate._util.yamlio import safe_scalar

    out: dict[str, dict[str, Any]] = {}
    for raw in values:
        target, sep, value = raw.partition("=")
        check, dot, key = target.rpartition(".")
        if not sep or not dot or not check or not key:
            raise click.BadParameter(f"{raw!r}: expected CHECK.KEY=VALUE, e.g. prefix-sweep.log_spaced=512")
        out.setdefault(check, {})[key] = safe_scalar(value)
    return out


def summary_json(outputs: Any) -> dict[str, Any]:
    """The one object `gate run --json` prints: verdict, exit code and each check in a line."""
    result = outputs.result
    return {
        "verdict": result.verdict.value,
        "exit_code": outputs.exit_code,
        "approved_by": outputs.carried.approved_by if outputs.carried is not None else [],
        "summary": result.summary,
        "manifest": result.manifest_digest.path,
        "out_dir": str(outputs.out_dir),
        "partial": result.verdict.value == "partial",
        "checks": [
            {
                "check": c.check,
                "status": c.status.value,
                "severity": c.severity,
                "message": c.message,
                "duration_s": round(c.duration_s, 3),
                "controls": {control.fault: control.outcome.value for control in c.controls},
            }
            for c in result.checks
        ],
        "files": [str(p) for p in outputs.files],
        "ledger_entry": outputs.ledger_seq,
    }


@click.command("run")
@click.argument("manifests", nargs=-1, type=click.Path(path_type=Path))
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path), help="Output directory.")
@click.option("--sign-key", type=click.Path(path_type=Path), help="Ed25519 private key (from `gate keygen`).")
@click.option(
    "--check",
    "only",
    multiple=True,
    metavar="NAME",
    help="Run only this check of the plan (repeatable). The rest are recorded as not run; the verdict is "
    "at best PARTIAL (exit 5), never PASS.",
)
@click.option(
    "--param",
    "params",
    multiple=True,
    metavar="CHECK.KEY=VALUE",
    help="Override one check parameter for this run (VALUE is YAML), e.g. prefix-sweep.log_spaced=512.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON summary object on stdout (logs stay on stderr).")
@click.option("-q", "--quiet", "quiet", is_flag=True, help="No progress output; only errors and the verdict.")
@click.option("-v", "--verbose", "verbose", is_flag=True, help="Also each check's own detail lines.")
@color_option
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
@click.option(
    "--profile",
    is_flag=True,
    help="Print time per check and per control in three buckets: model forwards, the subject's other work, "
    "gate's own (timing forwards installs torch module hooks, which slow small forwards a little).",
)
@policy_dir_option
@ledger_option
@trust_option(" saying whose waivers apply")
@click.option(
    "--baseline-commit",
    metavar="SHA",
    help="Main's commit: a recorded reference's baseline must be signed for it (default: $GATE_BASELINE_COMMIT, "
    "else the base commit of a GitHub pull_request event; docs/baselines.md).",
)
@click.option(
    "--matrix",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Matrix file: manifests x seeds x dtypes x devices, each run into DIR/<name>/ (docs/scale.md).",
)
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Batch: runs at once in the local process pool (each with --threads torch threads, default 1).",
)
@click.option(
    "--executor",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="Batch: where runs execute: a local process pool, or a Ray cluster (the `ray` extra).",
)
@click.option(
    "--address",
    metavar="auto|ray://HOST:PORT",
    help="--executor ray: the cluster (auto: the one `ray start` began here; default: $RAY_ADDRESS, else a "
    "new local one).",
)
@click.option(
    "--retries",
    type=click.IntRange(min=0, max=5),
    default=None,
    help="Batch: how often a run whose worker was lost (killed, out of memory) starts again (default 1, or "
    "the matrix's).",
)
def command(
    manifests: tuple[Path, ...],
    out_dir: Path,
    sign_key: Path | None,
    only: tuple[str, ...],
    params: tuple[str, ...],
    as_json: bool,
    quiet: bool,
    verbose: bool,
    color: ColorMode,
    threads: int | None,
    reference_cache: Path | None,
    profile: bool,
    policy_dirs: tuple[Path, ...],
    ledger_path: Path | None,
    trust_path: Path | None,
    baseline_commit: str | None,
    matrix: Path | None,
    jobs: int,
    executor: str,
    address: str | None,
    retries: int | None,
) -> None:
    """Run every check the policy requires for MANIFEST; exit with the verdict's code.

    With --ledger, $GATE_LEDGER or an existing ./.gate/ledger.sqlite, waivers recorded there apply
    and the verdict is appended to it (see docs/audit.md); otherwise nothing is recorded.

    With several manifests or --matrix, each runs into DIR/<name>/ (-j runs at once, or on Ray with
    --executor ray) and DIR/summary.json, summary.md and junit.xml sum them up; the exit code is the
    worst verdict's, by the same order as within one run.
    """
    if quiet and verbose:
        raise click.UsageError("-q and -v contradict each other")
    if not manifests and matrix is None:
        raise click.UsageError("give a MANIFEST (or several), or --matrix FILE")
    from gate.engine.options import RunOptions
    from gate.trust.ledger import run_ledger_choice

    batch = len(manifests) != 1 or matrix is not None
    if not batch and (executor != "local" or address is not None or retries is not None):
        raise click.UsageError("--executor, --address and --retries apply to a batch (several manifests or --matrix)")
    ledger, why = run_ledger_choice(ledger_path)
    if sign_key is not None:  # a key the trust policy or the ledger refuses: exit 2 before running
        from gate.trust.key_refusal import check_sign_key

        with user_errors():
            check_sign_key(sign_key, trust_path, ledger)
    if batch and ledger is not None:
        echo(f"ledger: every run of the batch records into {ledger} ({why})", err=True)
    options = RunOptions(
        sign_key=sign_key,
        ledger=ledger,
        policy_dirs=policy_dirs,
        trust=trust_path,
        reference_cache=reference_cache,
        baseline_commit=baseline_commit,
        only=only,
        params=parse_params(params),
        profile=profile,
        threads=threads,
    )
    verbosity = 0 if quiet else 2 if verbose else 1
    if batch:
        from gate.cli.batch import run_batch_command

        run_batch_command(
            list(manifests), matrix, out_dir, options, as_json, verbosity, color, jobs, executor, address, retries
        )
        return
    manifest = manifests[0]
    from gate.core.hazards import hazard_summary
    from gate.engine.pipeline import run_pipeline
    from gate.report.build import build_report
    from gate.report.words import verdict_label

    reporter = Reporter(verbosity=verbosity, color=color)
    try:
        with user_errors():
            started = time.perf_counter()
            outputs = run_pipeline(
                manifest, out_dir, options, log=reporter.log, progress=reporter.progress, events=reporter.event
            )
            run_s = time.perf_counter() - started
            if outputs.ledger_seq is not None:
                echo(f"ledger: recorded as entry #{outputs.ledger_seq} in {ledger} ({why})", err=True)
    finally:
        reporter.close()
    result = outputs.result
    if as_json:
        click.echo(json.dumps(summary_json(outputs), sort_keys=True))
        sys.exit(outputs.exit_code)
    styled = {"always": True, "never": False}.get(color, False if os.environ.get("NO_COLOR") else None)
    if profile:
        from gate.engine.profile import profile_lines

        click.echo("profile:")
        for line in profile_lines(result, run_s):
            click.echo(line)
    if not quiet:
        for check in result.checks:
            if check.status.value == "unproven":
                click.echo(
                    click.style(one_line(f"  UNPROVEN {check.check}: {check.message}"), fg="yellow"), color=styled
                )
    label, tone = verdict_label(result.verdict.value, sum(1 for c in result.checks if c.status.value == "unproven"))
    summary, carried = result.summary + hazard_summary(result.checks), outputs.carried
    if carried is not None and carried.approved_by:
        entries = ", ".join(f"#{n}" for n in carried.entries)
        if outputs.approved:
            label, tone = f"APPROVED by {', '.join(carried.approved_by)}", "good"
        else:
            label = f"{label} ({len(carried.approved_by)} of {carried.required} required approvals)"
        approvals = f"the ledger's approvals of the same evidence ({entries}) count for this run"
        waits = "an approximate change waits for a signed approval"
        summary = summary.replace(waits, approvals) if waits in summary else f"{summary}; {approvals}"
    colour = {"good": "green", "bad": "red", "unproven": "yellow", "waived": "cyan", "await": "magenta"}.get(tone)
    click.echo(click.style(one_line(f"verdict: {label}: {summary}"), fg=colour, bold=True), color=styled)
    if not quiet:
        for note in [*build_report(result).banner.notes, *(carried.notes if carried else [])]:
            click.echo(click.style(one_line(f"  {note}"), fg=colour), color=styled)
        for path in outputs.files:
            echo(one_line(f"  {path}"))
    sys.exit(outputs.exit_code)
