"""The same batch on a real local Ray cluster (127.0.0.1, 2 CPUs) and on the local pool: identical
verdicts and byte-identical results.json (wall-clock values aside). Marked `ray`: `.ci/ray.sh` runs it."""

from __future__ import annotations

import json
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
