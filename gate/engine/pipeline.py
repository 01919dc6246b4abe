"""The whole road as a Python API: run a manifest, render its dossier, sign it, record it.

    from gate.engine.pipeline import run_pipeline
    outputs = run_pipeline("examples/reference-static-layout.yaml", "out/run", sign_key="ci.key")
    print(outputs.result.verdict, outputs.files)

`gate run` is this function plus argument parsing and printing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gate.core.result import GateResult

if TYPE_CHECKING:
    from gate.engine.events import Events
    from gate.engine.options import RunOptions
    from gate.report.model import ReportData
    from gate.report.next_steps import CommandContext
    from gate.trust.carry import Carried

CiPublish = Callable[["ReportData | None", "Path | None", "str | None"], None]
"""Publishes a run's CI annotations and job summary: with the approved rendering's report, dossier
and Markdown when given (an approved re-run), else the run's own."""


@dataclass
class RunOutputs:
    """What one pipeline run produced."""

    result: GateResult
    out_dir: Path
    files: list[Path] = field(default_factory=list)
    """Every file written into out_dir (results.json first), including the receipt when recorded."""
    ledger_seq: int | None = None
    """The ledger entry the verdict was appended as, when a ledger was given."""
    carried: Carried | None = None
    """Approvals of an identical earlier run found in the ledger (gate.trust.carry); None: none looked for."""

    @property
    def approved(self) -> bool:
        """An awaiting-approval run whose evidence the ledger's approvals already cover."""
        return self.carried is not None and self.carried.approved

    @property
    def exit_code(self) -> int:
        """The verdict's exit code; 0 for an awaiting-approval run that is already approved."""
        return 0 if self.approved else self.result.exit_code


def run_pipeline(
    manifest: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    options: RunOptions | None = None,
    *,
    log: Callable[[str], None] | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    events: Events | None = None,
    environ: Mapping[str, str] | None = None,
    **flags: Any,
) -> RunOutputs:
    """Run MANIFEST into OUT_DIR: results.json, dossier (HTML, Markdown, JUnit), attestation, ledger.

    `options` (gate.engine.options.RunOptions) says how; its fields may instead be given as keyword
    arguments (`sign_key="ci.key", ledger="gate.sqlite", only=["greedy-parity"]`), which build it.
    The run writes into a fresh sibling directory that replaces OUT_DIR only when everything, the
    ledger receipt included, is written (the previous run is kept in `<OUT_DIR>.previous`).
    `environ` is where CI variables are read from.
    """
    from gate._util.stopping import stop_all
    from gate.engine.options import RunOptions
    from gate.engine.outputs import WRITE_ERRNOS, StagedOutput, write_failure

    if options is not None and flags:
        raise TypeError(f"run_pipeline: give options or keyword flags, not both ({', '.join(flags)})")
    options = options if options is not None else RunOptions(**flags)
    manifest_path, out = Path(manifest), Path(out_dir)
    ledger_path, key_path, trust_path = options.ledger_path, options.sign_key, options.trust
    staged = StagedOutput(out, keep=[manifest_path, *options.inputs()])
    staged.check()  # a bad --out fails before anything runs, moves or is written
    staging = staged.begin()  # at once: the previous run is now <out>.previous, never mistaken for this one
    try:
        from gate.engine.runner import prepare, run_manifest
        from gate.trust.keys import load_private_key

        if options.threads is not None:
            import torch

            torch.set_num_threads(options.threads)
        if key_path is not None:
            load_private_key(key_path)  # a missing or bad key fails before any check runs
        prepared = prepare(manifest_path, list(options.policy_dirs), options.params)  # bad input: exit 2 first
        result = run_manifest(
            manifest_path, staging, options, log=log, progress=progress, events=events, prepared=prepared
        )
        from gate.report import CommandContext
        from gate.trust.ledger_store import without_password

        commands = CommandContext(
            ledger=without_password(options.ledger) if options.ledger else None,  # as given, a URL's // kept
            trust=os.fspath(trust_path) if trust_path else (result.trust_policy.path if result.trust_policy else None),
        )
        may_carry = ledger_path is not None and key_path is not None and result.verdict.value == "awaiting-approval"
        deferred: list[CiPublish] = []
        written = [
            staging / "results.json",
            *write_outputs(
                result,
                staging,
                manifest_path,
                key_path,
                environ,
                final_dir=out,
                commands=commands,
                defer_ci=deferred.append if may_carry else None,
            ),
        ]
        seq, carried = None, None
        if may_carry:
            from gate.trust.approval_predicate import APPROVED_HTML, APPROVED_MD
            from gate.trust.carry import carry_over

            assert ledger_path is not None and key_path is not None
            carried = carry_over(staging, ledger_path, trust_path, key_path, final_dir=out)
            written += carried.written if carried is not None else []
            approved = carried is not None and carried.approved and carried.report is not None
            for ci in deferred:  # the approved re-run's notice and summary are the approved rendering's
                if approved and carried is not None:
                    ci(carried.report, out / APPROVED_HTML, (staging / APPROVED_MD).read_text(encoding="utf-8"))
                else:
                    ci(None, None, None)
        if ledger_path is not None:
            from gate.trust.run_record import record_run

            extra = {"approvals_carried": carried.entries} if carried is not None and carried.entries else None
            entry, receipt = record_run(result, staging, ledger_path, sign_key=key_path, dossier_dir=out, extra=extra)
            written.append(receipt)
            seq = entry.seq
        staged.commit()
    except OSError as err:
        if err.errno not in WRITE_ERRNOS:
            raise
        raise write_failure(out, err) from None
    finally:
        staged.abort()  # a no-op after commit; otherwise nothing half-done stays behind
        stop_all()  # servers and workers adapters started
    files = [out / path.relative_to(staging) for path in written]
    return RunOutputs(result=result, out_dir=out, files=files, ledger_seq=seq, carried=carried)


def write_outputs(
    result: GateResult,
    out_dir: Path,
    manifest_path: Path,
    sign_key: str | os.PathLike[str] | None,
    environ: Mapping[str, str] | None = None,
    *,
    final_dir: Path | None = None,
    commands: CommandContext | None = None,
    defer_ci: Callable[[CiPublish], None] | None = None,
) -> list[Path]:
    """Everything after results.json: the dossier, the signed attestation (when `sign_key` is given),
    the CI annotations. Returns the files written. `final_dir`: where out_dir will be renamed to;
    `commands`: the ledger and trust policy the printed commands must name.
    """
    from gate.report import write_report
    from gate.report.github import publish
    from gate.trust.attest import ENVELOPE_NAME, sign_directory
    from gate.trust.keys import keyid, load_private_key

    key = load_private_key(Path(sign_key)) if sign_key is not None else None  # a bad key fails before any write
    report = write_report(
        result,
        out_dir,
        manifest_path,
        signer_keyid=keyid(key.public_key()) if key else None,
        final_dir=final_dir,
        commands=commands,
    )
    written = list(report.files)
    if key is not None:
        written.append(sign_directory(out_dir, report.signed_names, report.manifest_file, key))
    else:
        (out_dir / ENVELOPE_NAME).unlink(missing_ok=True)  # a stale envelope must not look like ours

    def ci(data: ReportData | None = None, dossier: Path | None = None, markdown: str | None = None) -> None:
        publish(
            data or report.data,
            markdown or report.markdown,
            dossier or (final_dir or out_dir) / "dossier.html",
            os.environ if environ is None else environ,
            manifest_file=result.manifest_digest.path,
            paths=[str(p) for p in (result.manifest.get("change") or {}).get("paths") or []],
        )

    if defer_ci is None:
        ci()
    else:  # the caller publishes once it knows more (an approved re-run: its approved rendering)
        defer_ci(ci)
    return written
