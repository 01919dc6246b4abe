"""A batch on the local process pool: each run writes exactly what a single run writes, one summary,
one exit code; a worker killed mid-run costs its own manifest only (retried once, then `error`)."""

from __future__ import annotations

import json
import os
import signal
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gate.core.result import without_wall_clock
from gate.engine.batch import plan_batch, run_batch
from gate.engine.executors import LocalExecutor, ray_resources
from gate.engine.options import RunOptions
from gate.engine.pipeline import run_pipeline
from gate.engine.tasks import Task
from gate.errors import InputError
from tests.support.repo import EXAMPLES

FAST = RunOptions(only=("greedy-parity",))  # the cheapest check these layout examples share


def without_timings(path: Path) -> bytes:
    """results.json with every wall-clock value blanked (gate.core.result.without_wall_clock), as bytes."""
    return json.dumps(without_wall_clock(json.loads(path.read_bytes())), indent=2).encode()


def write_matrix(path: Path, manifests: list[Path], seeds: list[int]) -> Path:
    """A matrix file over these manifests and seeds."""
    lines = ["apiVersion: gate/v1", "kind: matrix", "manifests:", *(f"  - {m}" for m in manifests), f"seeds: {seeds}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_pool_runs_each_manifest_as_a_single_run_would(tmp_path: Path) -> None:
    manifests = [EXAMPLES / "reference-static-layout.yaml", EXAMPLES / "reference-fault-off-by-one-pos.yaml"]
    batch = plan_batch(manifests, None, tmp_path / "batch", FAST)
    outputs = run_batch(batch, LocalExecutor(jobs=2))

    assert [r.verdict for r in outputs.records] == ["partial", "fail"]
    assert (outputs.verdict.value, outputs.exit_code) == ("fail", 1)  # fail outranks partial, as in one run
    assert outputs.summary == "2 runs: 1 fail, 1 partial"
    pids = {r.worker for r in outputs.records}
    assert all(w.startswith("pid ") and w != f"pid {os.getpid()}" for w in pids)  # ran in workers

    single = run_pipeline(manifests[1], tmp_path / "single", only=["greedy-parity"])
    ran = tmp_path / "batch" / "reference-fault-off-by-one-pos"
    assert sorted(p.name for p in ran.iterdir()) == sorted(p.name for p in single.files)
    assert without_timings(ran / "results.json") == without_timings(tmp_path / "single" / "results.json")
    assert (ran / "manifest.yaml").read_bytes() == manifests[1].read_bytes()

    summary = json.loads((tmp_path / "batch" / "summary.json").read_text())
    assert summary["verdict"] == "fail" and summary["exit_code"] == 1
    assert [(r["name"], r["out_dir"], r["verdict"]) for r in summary["runs"]] == [
        ("reference-static-layout", "reference-static-layout", "partial"),
        ("reference-fault-off-by-one-pos", "reference-fault-off-by-one-pos", "fail"),
    ]
    assert {c["check"]: c["status"] for c in summary["runs"][1]["checks"]}["greedy-parity"] == "fail"
    suites = ET.parse(tmp_path / "batch" / "junit.xml").getroot().findall("testsuite")
    assert [s.get("name") for s in suites] == ["gate: reference-static-layout", "gate: reference-fault-off-by-one-pos"]
    assert [s.get("failures") for s in suites] == ["0", "1"]
    table = (tmp_path / "batch" / "summary.md").read_text()
    assert "| [reference-fault-off-by-one-pos](reference-fault-off-by-one-pos/dossier.md) | fail | 1 |" in table


def test_matrix_seeds_are_derived_manifests_and_results_do_not_depend_on_jobs(tmp_path: Path) -> None:
    matrix = write_matrix(tmp_path / "matrix.yaml", [EXAMPLES / "reference-chunked-prefill.yaml"], seeds=[0, 1])
    out = tmp_path / "out"
    first = run_batch(plan_batch([], matrix, out, FAST), LocalExecutor(jobs=1))
    second = run_batch(plan_batch([], matrix, out, FAST), LocalExecutor(jobs=2))  # the first is now out.previous
    names = ["reference-chunked-prefill-seed0", "reference-chunked-prefill-seed1"]
    assert [r.name for r in first.records] == [r.name for r in second.records] == names
    previous = Path(f"{out}.previous")
    for name in names:
        assert without_timings(previous / name / "results.json") == without_timings(out / name / "results.json")
        derived = json.loads((out / name / "results.json").read_text())
        assert derived["manifest_digest"]["path"] == str(out / "_inputs" / f"{name}.yaml")
        assert derived["manifest"]["subject"]["seed"] == int(name[-1])
    weights = [json.loads((out / n / "results.json").read_text())["subjects"]["candidate"] for n in names]
    weights = [subject["weights_sha256"] for subject in weights]
    assert weights[0] != weights[1]  # the seed reached the model


def test_a_killed_worker_errors_its_manifest_only(tmp_path: Path) -> None:
    """SIGKILL (as the out-of-memory killer sends it) on the worker running one manifest, at every
    attempt: that manifest is `error` after its retry; another killed only once passes on the retry."""
    manifests = [
        EXAMPLES / "reference-static-layout.yaml",
        EXAMPLES / "reference-chunked-prefill.yaml",
        EXAMPLES / "reference-fault-off-by-one-pos.yaml",
    ]
    kills: list[tuple[str, int]] = []

    def kill(task: Task, attempt: int, where: str) -> None:
        if task.name == "reference-chunked-prefill" or (task.name == "reference-static-layout" and attempt == 1):
            kills.append((task.name, attempt))
            os.kill(int(where.removeprefix("pid ")), signal.SIGKILL)

    batch = plan_batch(manifests, None, tmp_path / "out", FAST)
    outputs = run_batch(batch, LocalExecutor(jobs=2, on_start=kill))
    by_name = {r.name: r for r in outputs.records}
    assert sorted(kills) == [
        ("reference-chunked-prefill", 1),
        ("reference-chunked-prefill", 2),
        ("reference-static-layout", 1),
    ]
    lost = by_name["reference-chunked-prefill"]
    assert (lost.verdict, lost.exit_code, lost.attempts) == ("error", 3, 2)
    assert lost.error is not None and "killed by SIGKILL" in lost.error and "after 2 attempts" in lost.error
    assert not (tmp_path / "out" / "reference-chunked-prefill").exists()  # nothing half-written
    assert not [p for p in (tmp_path / "out").iterdir() if ".partial-" in p.name]  # nor its staging directory
    assert (by_name["reference-static-layout"].verdict, by_name["reference-static-layout"].attempts) == ("partial", 2)
    assert by_name["reference-fault-off-by-one-pos"].verdict == "fail"
    assert (tmp_path / "out" / "reference-static-layout" / "results.json").is_file()
    assert (outputs.verdict.value, outputs.exit_code) == ("error", 3)
    suites = ET.parse(tmp_path / "out" / "junit.xml").getroot().findall("testsuite")
    error = next(s for s in suites if s.get("name") == "gate: reference-chunked-prefill")
    assert error.get("errors") == "1" and "SIGKILL" in (error.find("testcase/error").get("message") or "")  # type: ignore[union-attr]


def test_bad_input_anywhere_fails_the_batch_before_anything_is_written(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text((EXAMPLES / "reference-static-layout.yaml").read_text().replace("seed: 0", "seed: -1"))
    out = tmp_path / "out"
    with pytest.raises(InputError) as caught:
        plan_batch([EXAMPLES / "reference-static-layout.yaml", bad], None, out, FAST)
    assert str(caught.value).startswith(f"{bad}:") and "subject.seed" in str(caught.value)
    with pytest.raises(InputError) as caught:
        plan_batch([EXAMPLES / "reference-static-layout.yaml"] * 2, None, out, FAST)
    assert str(caught.value).startswith(f"{EXAMPLES}/reference-static-layout.yaml:3:1: name: manifest name")
    assert not out.exists() and list(tmp_path.iterdir()) == [bad]


def test_a_derived_manifest_error_points_at_the_authors_file(tmp_path: Path) -> None:
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(
        f"apiVersion: gate/v1\nkind: matrix\nmanifests: [{EXAMPLES}/reference-static-layout.yaml]\ndevices: [cuda:99]\n"
    )
    with pytest.raises(InputError) as caught:
        plan_batch([], matrix, tmp_path / "out", FAST)
    line = str(caught.value)
    assert line.startswith(f"{EXAMPLES}/reference-static-layout.yaml:") and "device=cuda:99" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["matrix.yaml"]  # no staged inputs left behind


def test_a_cuda_subject_asks_the_cluster_for_a_gpu() -> None:
    assert ray_resources(Task("a", "a.yaml", "out/a", RunOptions(threads=2), device="cuda:0")) == {
        "num_cpus": 2.0,
        "num_gpus": 1.0,
    }
    assert ray_resources(Task("a", "a.yaml", "out/a")) == {"num_cpus": 1.0}
