"""Where the runs of a batch execute: one interface, a local process pool or a Ray cluster.

    executor = LocalExecutor(jobs=2)                  # or RayExecutor(address="auto")
    records = executor.run(tasks, on_done=print)      # one TaskRecord per Task, in task order

A worker that dies while it runs a task costs that task only: it is run again up to `task.retries`
times, then recorded as verdict `error`. A run that returns (whatever its verdict) is never repeated.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from gate.engine.tasks import Task, TaskRecord, execute_task, failed_record
from gate.errors import Terminated, UnavailableError

OnDone = Callable[[TaskRecord], None]
OnStart = Callable[[Task, int, str], None]
"""on_start(task, attempt, where): a task was handed to a worker (`pid N` locally)."""


class Executor(Protocol):
    """Runs tasks somewhere and returns one record per task, in task order."""

    name: str

    def run(self, tasks: Sequence[Task], on_done: OnDone | None = None) -> list[TaskRecord]: ...


def _died(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exited with status {exitcode}"


def _terminated(_signum: int, _frame: Any) -> None:
    raise Terminated()


def _worker_main(conn: Any, threads: int) -> None:
    """A pool worker: one torch thread count, then tasks from the pipe until None. SIGTERM and SIGINT
    arrive as exceptions, so the run in progress cleans up as a single run does."""
    signal.signal(signal.SIGTERM, _terminated)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)
    try:
        import torch

        torch.set_num_threads(threads)
        while True:
            task = conn.recv()
            if task is None:
                return
            conn.send(execute_task(task))
    except (EOFError, OSError, KeyboardInterrupt, Terminated):
        return


class _Worker:
    def __init__(self, context: Any, threads: int) -> None:
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_worker_main, args=(child, threads), daemon=True)
        self.process.start()
        child.close()
        self.task: Task | None = None
        self.attempt, self.started = 0, 0.0

    def stop(self) -> None:
        """An idle worker is asked to exit; a busy one gets SIGTERM and cleans up its run; then SIGKILL."""
        if self.process.is_alive() and self.task is None:
            with contextlib.suppress(OSError):
                self.conn.send(None)
            self.process.join(timeout=5)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(timeout=10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


PRELOAD = (
    "torch",
    "gate.engine.pipeline",
    "gate.engine.runner",
    "gate.engine.controls",
    "gate.report",
    "gate.trust.attest",
    "gate.adapters.reference",
    "gate.models.reference",
)
"""Imported once by the fork server, so each worker (and each replacement of a lost one) starts warm."""


class LocalExecutor:
    """A pool of `jobs` worker processes on this machine, forked from a fork server that imported
    PRELOAD and nothing of the caller's state (no threads, no models)."""

    name = "local"

    def __init__(self, jobs: int = 1, threads: int = 1, on_start: OnStart | None = None) -> None:
        self.jobs, self.threads, self.on_start = max(1, jobs), threads, on_start

    def run(self, tasks: Sequence[Task], on_done: OnDone | None = None) -> list[TaskRecord]:
        import multiprocessing
        from multiprocessing.connection import wait

        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(list(PRELOAD))
        pending: deque[tuple[int, int]] = deque((i, 1) for i in range(len(tasks)))
        records: dict[int, TaskRecord] = {}
        workers = [_Worker(context, self.threads) for _ in range(min(self.jobs, len(tasks)))]
        index_of: dict[int, int] = {}

        def finish(i: int, record: TaskRecord, attempts: int) -> None:
            record.attempts = attempts
            records[i] = record
            if on_done is not None:
                on_done(record)

        try:
            while len(records) < len(tasks):
                for slot, worker in enumerate(workers):
                    if worker.task is None and pending:
                        if not worker.process.is_alive():  # died while idle: replace it, nothing was lost
                            worker.stop()
                            worker = workers[slot] = _Worker(context, self.threads)
                        i, attempt = pending.popleft()
                        worker.task, worker.attempt, worker.started = tasks[i], attempt, time.perf_counter()
                        index_of[slot] = i
                        with contextlib.suppress(OSError):  # it died just now: its sentinel says so below
                            worker.conn.send(tasks[i])
                        if self.on_start is not None:
                            self.on_start(tasks[i], attempt, f"pid {worker.process.pid}")
                busy = [(slot, w) for slot, w in enumerate(workers) if w.task is not None]
                ready = wait([w.conn for _s, w in busy] + [w.process.sentinel for _s, w in busy])
                for slot, worker in busy:
                    if worker.conn not in ready and worker.process.sentinel not in ready:
                        continue
                    task, i = worker.task, index_of[slot]
                    assert task is not None
                    record: TaskRecord | None = None
                    with contextlib.suppress(EOFError, OSError):
                        record = worker.conn.recv() if worker.conn.poll() else None
                    if record is not None:
                        worker.task = None
                        finish(i, record, worker.attempt)
                        continue
                    worker.process.join(timeout=5)
                    reason = f"worker process {_died(worker.process.exitcode)} while running {task.manifest}"
                    worker.stop()
                    workers[slot] = _Worker(context, self.threads)
                    if worker.attempt <= task.retries:
                        pending.appendleft((i, worker.attempt + 1))
                        continue
                    tries = f" (after {worker.attempt} attempts)" if worker.attempt > 1 else ""
                    seconds = time.perf_counter() - worker.started
                    finish(i, failed_record(task, reason + tries, seconds=seconds), worker.attempt)
        finally:
            for worker in workers:
                worker.stop()
        return [records[i] for i in range(len(tasks))]


def _ray_task(task: Task) -> TaskRecord:
    """The Ray remote function: one manifest on a Ray worker, its record back to the driver."""
    record = execute_task(task)
    with contextlib.suppress(Exception):  # where it ran is a courtesy
        import ray

        record.worker = f"ray node {ray.get_runtime_context().get_node_id()[:12]} pid {os.getpid()}"
    return record


def ray_resources(task: Task) -> dict[str, float]:
    """What a task asks of the cluster: its torch threads as CPUs, one GPU for a cuda (or xpu) subject."""
    resources: dict[str, float] = {"num_cpus": float(task.options.worker_threads)}
    if task.device.startswith("cuda"):
        resources["num_gpus"] = 1.0
    elif task.device.startswith("xpu"):
        resources["resources"] = {"xpu": 1.0}  # type: ignore[assignment]
    return resources


class RayExecutor:
    """Each task a Ray task on a cluster (`address`: auto, ray://HOST:PORT, or None for Ray's default).
    Needs an --out every node can write; a task lost to the cluster is submitted again up to
    `task.retries` times."""

    name = "ray"

    def __init__(self, address: str | None = None) -> None:
        self.address = address

    def _connect(self) -> Any:
        try:
            import ray
        except ImportError:
            raise UnavailableError(
                "--executor ray needs Ray: pip install 'decode-gate[ray]' (or pip install ray)"
            ) from None
        if not ray.is_initialized():
            try:
                if self.address is None and not os.environ.get("RAY_ADDRESS"):  # a new cluster on this machine
                    ray.init(log_to_driver=False, include_dashboard=False)
                else:
                    ray.init(address=self.address, log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as err:
                where = self.address or "a new local cluster"
                raise UnavailableError(f"--executor ray: cannot connect to {where}: {err}") from None
        return ray

    def run(self, tasks: Sequence[Task], on_done: OnDone | None = None) -> list[TaskRecord]:
        ray = self._connect()
        remote = ray.remote(max_retries=0)(_ray_task)
        lost_errors: tuple[type[BaseException], ...] = tuple(
            getattr(ray.exceptions, name)
            for name in ("WorkerCrashedError", "NodeDiedError", "OutOfMemoryError", "ObjectLostError")
            if hasattr(ray.exceptions, name)
        )
        refs: dict[Any, tuple[int, int, float]] = {}

        def submit(i: int, attempt: int) -> None:
            task = tasks[i]
            ref = remote.options(name=f"gate:{task.name}", **ray_resources(task)).remote(task)
            refs[ref] = (i, attempt, time.perf_counter())

        records: dict[int, TaskRecord] = {}
        try:
            for i in range(len(tasks)):
                submit(i, 1)
            while refs:
                done, _rest = ray.wait(list(refs), num_returns=1)
                for ref in done:
                    i, attempt, started = refs.pop(ref)
                    task = tasks[i]
                    try:
                        record: TaskRecord = ray.get(ref)
                    except lost_errors as err:
                        if attempt <= task.retries:
                            submit(i, attempt + 1)
                            continue
                        reason = f"Ray worker lost while running {task.manifest}: {err.__class__.__name__}"
                        reason += f" (after {attempt} attempts)"
                        record = failed_record(task, reason, seconds=time.perf_counter() - started)
                    except ray.exceptions.RayError as err:
                        first = str(err).strip().splitlines()[-1] if str(err).strip() else ""
                        reason = f"Ray task failed: {err.__class__.__name__}: {first}"
                        record = failed_record(task, reason, seconds=time.perf_counter() - started)
                    record.attempts = attempt
                    records[i] = record
                    if on_done is not None:
                        on_done(record)
        finally:
            for ref in refs:  # interrupted: what is still queued or running on the cluster stops too
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
        return [records[i] for i in range(len(tasks))]


def make_executor(kind: str, *, jobs: int = 1, threads: int = 1, address: str | None = None) -> Executor:
    """`local` (a process pool of `jobs`) or `ray` (a cluster at `address`)."""
    if kind == "ray":
        return RayExecutor(address=address)
    return LocalExecutor(jobs=jobs, threads=threads)
