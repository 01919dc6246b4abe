"""The same batch on a real local Ray cluster (127.0.0.1, 2 CPUs) and on the local pool: identical
verdicts and identical results.json (wall-clock values aside); a killed Ray worker costs its own
manifest only. Marked `ray`: `.ci/ray.sh` runs it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gate.engine.batch import plan_batch, run_batch
from gate.engine.executors import LocalExecutor, RayExecutor
from tests.engine.test_batch import FAST, without_timings, write_matrix
from tests.support.repo import EXAMPLES

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray", reason="Ray is not installed here (pip install 'decode-gate[ray]')")


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


def test_ray_and_the_local_pool_agree_byte_for_byte(tmp_path: Path, cluster: None) -> None:
    manifests = [EXAMPLES / "reference-static-layout.yaml", EXAMPLES / "reference-fault-off-by-one-pos.yaml"]
    matrix = write_matrix(tmp_path / "matrix.yaml", manifests, seeds=[0, 1])
    out = tmp_path / "out"
    local = run_batch(plan_batch([], matrix, out, FAST), LocalExecutor(jobs=2))
    on_ray = run_batch(plan_batch([], matrix, out, FAST, device_here=False), RayExecutor())  # local: out.previous
    assert [(r.name, r.verdict, r.exit_code) for r in on_ray.records] == [
        (r.name, r.verdict, r.exit_code) for r in local.records
    ]
    assert [r.verdict for r in on_ray.records] == ["partial", "partial", "fail", "fail"]
    assert all(r.worker.startswith("ray node ") for r in on_ray.records)  # each ran as a Ray task
    assert (on_ray.verdict.value, on_ray.exit_code) == (local.verdict.value, local.exit_code) == ("fail", 1)
    previous = Path(f"{out}.previous")
    for record in on_ray.records:
        ours, theirs = out / record.name / "results.json", previous / record.name / "results.json"
        assert without_timings(ours) == without_timings(theirs), record.name
    summary = json.loads((out / "summary.json").read_text())
    assert summary["executor"] == {"kind": "ray"}


def _kill_while_running(title: bytes, kills: list[int], stop: threading.Event) -> None:
    """SIGKILL every process whose title is TITLE (Ray names a task's worker `ray::<task name>`)."""
    while not stop.is_set():
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if cmdline.startswith(title) and int(entry.name) not in kills:
                kills.append(int(entry.name))
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(entry.name), signal.SIGKILL)
        time.sleep(0.05)


def test_a_killed_ray_worker_errors_its_manifest_only(tmp_path: Path, cluster: None) -> None:
    """The Ray worker running one manifest is killed (SIGKILL, as the out-of-memory killer does) at
    each attempt: that manifest is `error` after its retry, the other completes."""
    manifests = [EXAMPLES / "reference-static-layout.yaml", EXAMPLES / "reference-fault-off-by-one-pos.yaml"]
    batch = plan_batch(manifests, None, tmp_path / "out", FAST, device_here=False)
    kills: list[int] = []
    stop = threading.Event()
    watcher = threading.Thread(
        target=_kill_while_running, args=(b"ray::gate:reference-static-layout", kills, stop), daemon=True
    )
    watcher.start()
    try:
        outputs = run_batch(batch, RayExecutor())
    finally:
        stop.set()
        watcher.join()
    lost, other = outputs.records
    assert len(kills) == 2, kills  # the first attempt and its retry
    assert (lost.verdict, lost.exit_code, lost.attempts) == ("error", 3, 2)
    assert lost.error is not None and "Ray worker lost" in lost.error and "after 2 attempts" in lost.error
    assert (other.verdict, other.attempts) == ("fail", 1)
    assert (tmp_path / "out" / "reference-fault-off-by-one-pos" / "results.json").is_file()
    assert not (tmp_path / "out" / "reference-static-layout").exists()
    assert not [p for p in (tmp_path / "out").iterdir() if ".partial-" in p.name]
    assert (outputs.verdict.value, outputs.exit_code) == ("error", 3)
