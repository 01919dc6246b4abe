"""Many manifests at once: `gate run M1 M2 ... --out DIR` and `gate run --matrix FILE --out DIR`.

    from gate.engine.batch import plan_batch, run_batch
    from gate.engine.executors import LocalExecutor
    from gate.engine.options import RunOptions

    batch = plan_batch([Path("a.yaml"), Path("b.yaml")], None, Path("out/all"), RunOptions())
    outputs = run_batch(batch, LocalExecutor(jobs=2))
    print(outputs.verdict, outputs.exit_code)   # the batch's verdict: the worst of its runs

Everything is checked before anything runs. Each run writes into `DIR/<name>/` exactly what
`gate run MANIFEST --out DIR/<name>` writes; last come `DIR/summary.json`, `summary.md` and
`junit.xml`. A matrix's derived manifests are kept in `DIR/_inputs/`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gate.core.matrix import RESERVED_NAMES, MatrixRun, expand_matrix, safe_name
from gate.core.result import VERDICT_PRECEDENCE, Verdict, worst_verdict
from gate.engine.executors import Executor
from gate.engine.options import RunOptions
from gate.engine.tasks import Task, TaskRecord
from gate.errors import InputError

INPUTS = "_inputs"
SUMMARY_VERSION = 1


@dataclass
class Batch:
    """The runs of one batch, validated, with their derived manifests not yet in place."""

    out: Path
    tasks: list[Task]
    runs: list[MatrixRun]
    staged_inputs: Path | None = None
    """A temporary directory holding derived manifests until the batch starts."""
    matrix: str | None = None


@dataclass
class BatchOutputs:
    out_dir: Path
    records: list[TaskRecord]
    verdict: Verdict
    exit_code: int
    summary: str
    files: list[Path] = field(default_factory=list)
    document: dict[str, Any] = field(default_factory=dict)
    """summary.json as written."""


def _name_of(path: Path) -> str:
    from gate.core.load import load_manifest

    return safe_name(load_manifest(path).manifest.name)


def _derived_text(original: Path, overrides: dict[str, Any], matrix: Path | None) -> str:
    import yaml

    from gate._util.yamlio import read_yaml

    data = read_yaml(original).data
    subject = data.setdefault("subject", {})
    subject.update(overrides)
    values = ", ".join(f"{key}={value}" for key, value in overrides.items())
    header = f"# derived by gate run --matrix {matrix} from {original}: {values}\n"
    return header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def _relocated(err: InputError, run: MatrixRun) -> InputError:
    """An error in a derived manifest, at the line of the field in the manifest the author wrote."""
    from gate._util.yamlio import read_yaml

    parts = tuple(int(p) if p.isdigit() else p for p in (err.field or "").replace("[", ".").replace("]", "").split("."))
    values = ", ".join(f"{key}={value}" for key, value in run.overrides.items())
    where = [p for p in parts if p != ""]
    return read_yaml(run.manifest).error_at(where, f"{err.message} (run {run.name}: {values})", err.field)


def plan_batch(
    manifests: list[Path],
    matrix: Path | None,
    out: Path,
    options: RunOptions,
    *,
    retries: int | None = None,
    device_here: bool = True,
) -> Batch:
    """Expand and validate every run before anything runs; nothing is written on bad input.
    `device_here=False` (a Ray cluster) leaves each subject's device to be checked on the node."""
    from gate.engine.outputs import StagedOutput
    from gate.engine.runner import prepare

    runs: list[MatrixRun] = []
    matrix_retries = 1
    seen: dict[str, Path] = {}
    for path in manifests:
        name = _name_of(path)
        if name in seen or name in RESERVED_NAMES:
            from gate._util.yamlio import read_yaml

            why = "is reserved" if name in RESERVED_NAMES else f"is also the name of {seen[name]}"
            raise read_yaml(path).error_at(
                ("name",), f"manifest name {name!r} {why}; each run of a batch needs its own DIR/<name>", "name"
            )
        seen[name] = path
        runs.append(MatrixRun(name=name, manifest=path))
    if matrix is not None:
        more, matrix_retries = expand_matrix(matrix, _name_of)
        for run in more:
            if run.name in seen:
                raise InputError(str(matrix), f"run {run.name!r} is also the run of {seen[run.name]}")
            seen[run.name] = run.manifest
        runs.extend(more)
    if not runs:
        raise InputError("gate run", "no manifest given (MANIFEST... or --matrix FILE)")
    StagedOutput(out, keep=[*manifests, matrix, *options.inputs()]).check(replaces=False)
    staged: Path | None = None
    tasks: list[Task] = []
    try:
        for run in runs:
            source = run.manifest
            if run.overrides:
                if staged is None:
                    out.parent.mkdir(parents=True, exist_ok=True)
                    staged = Path(tempfile.mkdtemp(prefix=f".{out.name}.inputs-", dir=out.parent))
                source = staged / f"{run.name}.yaml"
                source.write_text(_derived_text(run.manifest, run.overrides, matrix), encoding="utf-8")
            try:
                loaded, _plan = prepare(source, list(options.policy_dirs), options.params, device_here=device_here)
            except InputError as err:
                if not run.overrides:
                    raise
                raise _relocated(err, run) from None
            tasks.append(
                Task(
                    name=run.name,
                    manifest=str(out / INPUTS / f"{run.name}.yaml" if run.overrides else run.manifest),
                    out_dir=str(out / run.name),
                    options=options,
                    device=loaded.manifest.subject.device,
                    retries=matrix_retries if retries is None else retries,
                )
            )
    except BaseException:
        if staged is not None:
            shutil.rmtree(staged, ignore_errors=True)
        raise
    return Batch(out=out, tasks=tasks, runs=runs, staged_inputs=staged, matrix=str(matrix) if matrix else None)


def run_batch(
    batch: Batch,
    executor: Executor,
    *,
    on_done: Callable[[TaskRecord], None] | None = None,
    executor_info: dict[str, Any] | None = None,
) -> BatchOutputs:
    """Run every task of `batch` on `executor`, then write the batch summary into batch.out."""
    from gate._util.clock import now_utc
    from gate.engine.outputs import PREVIOUS_SUFFIX, StagedOutput, write_failure

    started_at, started = now_utc(), time.perf_counter()
    out, previous = batch.out, Path(f"{batch.out}{PREVIOUS_SUFFIX}")
    try:  # the previous batch aside (`<DIR>.previous`), DIR created, the derived manifests put in place
        if out.is_dir() and any(out.iterdir()):
            if previous.exists():
                shutil.rmtree(previous)
            os.replace(out, previous)
        out.mkdir(parents=True, exist_ok=True)
        if batch.staged_inputs is not None:
            os.replace(batch.staged_inputs, out / INPUTS)
            batch.staged_inputs = None
    except OSError as err:
        raise write_failure(out, err) from None
    finally:
        if batch.staged_inputs is not None:
            shutil.rmtree(batch.staged_inputs, ignore_errors=True)
    records = executor.run(batch.tasks, on_done=on_done)
    for task in batch.tasks:  # what a lost worker was writing when it died
        StagedOutput(Path(task.out_dir)).remove_orphans()
    finished_at, seconds = now_utc(), time.perf_counter() - started
    # summary.json, summary.md and junit.xml (a suite per run) into batch.out, each written atomically
    import gate
    from gate._util.atomic import write_bytes_atomic
    from gate.report.batch import batch_junit, batch_markdown

    verdict, code, line = batch_verdict(records)
    overrides = {run.name: run.overrides for run in batch.runs}
    document: dict[str, Any] = {
        "summary_version": SUMMARY_VERSION,
        "gate_version": gate.__version__,
        "verdict": verdict.value,
        "exit_code": code,
        "summary": line,
        "matrix": batch.matrix,
        "executor": executor_info or {"kind": executor.name},
        "started_at": started_at,
        "finished_at": finished_at,
        "duration_s": round(seconds, 3),
        "runs": [
            {
                **asdict(record),
                "overrides": overrides.get(record.name, {}),
                "out_dir": os.path.relpath(record.out_dir, batch.out),
                "files": [os.path.relpath(f, batch.out) for f in record.files],
            }
            for record in records
        ],
    }
    files = [
        write_bytes_atomic(out / "summary.json", (json.dumps(document, indent=2, sort_keys=True) + "\n").encode()),
        write_bytes_atomic(out / "summary.md", batch_markdown(document).encode()),
        write_bytes_atomic(out / "junit.xml", batch_junit(document, out)),
    ]
    return BatchOutputs(
        out_dir=out, records=records, verdict=verdict, exit_code=code, summary=line, files=files, document=document
    )


def batch_verdict(records: list[TaskRecord]) -> tuple[Verdict, int, str]:
    """The batch's verdict (the first in gate.core.result.VERDICT_PRECEDENCE among its runs), the exit
    code of its first run with that verdict, and a one-line count."""
    standing = [Verdict.passed if r.approved else Verdict(r.verdict) for r in records]  # approved: exit 0
    verdict = worst_verdict(standing)
    code = next((r.exit_code for r, v in zip(records, standing, strict=True) if v == verdict), 0)
    counts = Counter(r.verdict for r in records)
    parts = [f"{counts[v.value]} {v.value}" for v in VERDICT_PRECEDENCE if v.value in counts]
    approved = sum(1 for r in records if r.approved)
    parts += [f"{approved} of them approved (the ledger's approvals of the same evidence)"] if approved else []
    noun = "run" if len(records) == 1 else "runs"
    return verdict, code, f"{len(records)} {noun}: " + ", ".join(parts)
