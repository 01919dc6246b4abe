"""A batch's unit of work as plain data: a `Task` travels to a worker process or a Ray node as it is;
`execute_task` runs it there through `run_pipeline` and returns a `TaskRecord` (never a model)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from gate.engine.options import RunOptions
from gate.errors import EXIT_CHECK_ERROR, GateError


@dataclass(frozen=True)
class Task:
    """One manifest to run into one output directory."""

    name: str
    manifest: str
    out_dir: str
    options: RunOptions = field(default_factory=RunOptions)
    """How every run of the batch runs (`gate run`'s flags): plain data, it travels as it is."""
    device: str = "cpu"
    """The subject's device: what the task asks a Ray cluster for (a GPU for cuda)."""
    retries: int = 1
    """How many times the task runs again when its worker is lost."""


@dataclass
class TaskRecord:
    """What a task produced, as plain data (never a model)."""

    name: str
    manifest: str
    out_dir: str
    verdict: str
    exit_code: int
    summary: str
    checks: list[dict[str, Any]] = field(default_factory=list)
    """Each check: name, status, severity, message."""
    files: list[str] = field(default_factory=list)
    ledger_seq: int | None = None
    error: str | None = None
    """Why the task has no result of its own (bad input, a lost worker), else None."""
    attempts: int = 1
    duration_s: float = 0.0
    worker: str = ""
    """Where it ran: `pid 1234` or a Ray node id."""
    approved_by: list[str] = field(default_factory=list)
    """Who approved, where the ledger's approvals of the same evidence cover an awaiting-approval run."""

    @property
    def approved(self) -> bool:
        return self.verdict == "awaiting-approval" and bool(self.approved_by) and self.exit_code == 0


def execute_task(task: Task) -> TaskRecord:
    """Run one task in this process: the single-run pipeline, its outputs into task.out_dir."""
    from gate.engine.pipeline import run_pipeline

    started = time.perf_counter()
    opts = task.options
    try:
        import torch

        torch.set_num_threads(opts.worker_threads)
        outputs = run_pipeline(task.manifest, task.out_dir, opts)
    except GateError as err:  # bad input found in the worker (a device it lacks), an unwritable --out
        return failed_record(task, str(err), err.exit_code, time.perf_counter() - started)
    except Exception as err:  # gate's own failure outside any check: the task's error
        return failed_record(task, f"{err.__class__.__name__}: {err}", EXIT_CHECK_ERROR, time.perf_counter() - started)
    result = outputs.result
    return TaskRecord(
        name=task.name,
        manifest=task.manifest,
        out_dir=task.out_dir,
        verdict=result.verdict.value,
        exit_code=outputs.exit_code,
        summary=result.summary,
        approved_by=list(outputs.carried.approved_by) if outputs.approved and outputs.carried else [],
        checks=[
            {"check": c.check, "status": c.status.value, "severity": c.severity, "message": c.message}
            for c in result.checks
        ],
        files=[str(p) for p in outputs.files],
        ledger_seq=outputs.ledger_seq,
        duration_s=round(time.perf_counter() - started, 3),
        worker=f"pid {os.getpid()}",
    )


def failed_record(task: Task, reason: str, exit_code: int = EXIT_CHECK_ERROR, seconds: float = 0.0) -> TaskRecord:
    """A task that produced no result of its own: verdict error, with the reason."""
    return TaskRecord(
        name=task.name,
        manifest=task.manifest,
        out_dir=task.out_dir,
        verdict="error",
        exit_code=exit_code,
        summary=f"error: {reason}",
        error=reason,
        duration_s=round(seconds, 3),
    )
