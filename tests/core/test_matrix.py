"""Matrix files: expansion into named runs, and one located line per bad field (no torch, nothing runs)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gate.core.matrix import expand_matrix, run_name, safe_name
from gate.core.result import Verdict, without_wall_clock, worst_verdict
from gate.errors import InputError
from tests.support.repo import EXAMPLES


def _names(path: Path) -> str:
    return path.stem


def _write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "matrix.yaml"
    path.write_text(textwrap.dedent(body))
    return path


def test_expands_manifests_by_axes_in_file_order(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        f"""\
        apiVersion: gate/v1
        kind: matrix
        manifests:
          - {EXAMPLES}/reference-static-layout.yaml
          - {EXAMPLES}/reference-prefix-b*.yaml
        seeds: [0, 7]
        dtypes: [bfloat16]
        retries: 0
        """,
    )
    runs, retries = expand_matrix(path, _names)
    assert retries == 0
    assert [r.name for r in runs] == [
        "reference-static-layout-seed0-bfloat16",
        "reference-static-layout-seed7-bfloat16",
        "reference-prefix-basic-seed0-bfloat16",
        "reference-prefix-basic-seed7-bfloat16",
    ]
    assert runs[1].overrides == {"seed": 7, "dtype": "bfloat16"}
    assert runs[2].manifest == EXAMPLES / "reference-prefix-basic.yaml"


def test_paths_are_relative_to_the_matrix_file(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "a.yaml").write_text("x: 1\n")
    path = _write(tmp_path, "apiVersion: gate/v1\nkind: matrix\nmanifests: [m/a.yaml]\n")
    runs, retries = expand_matrix(path, _names)
    assert [(r.name, r.manifest, r.overrides) for r in runs] == [("a", tmp_path / "m" / "a.yaml", {})]
    assert retries == 1


@pytest.mark.parametrize(
    ("body", "where", "message"),
    [
        ("manifests: [a.yaml]\nseeds: [-1]\n", ":4:", "seeds[0]: Input should be greater than or equal to 0"),
        ("manifests: [a.yaml]\ndtypes: [float64]\n", ":4:", "dtypes[0]:"),
        ("manifests: [a.yaml]\ndevices: [cpu, tpu]\n", ":4:", "devices[1]: 'tpu' is not a torch device"),
        ("manifests: [a.yaml]\nseed: [1]\n", ":4:", "unknown key 'seed' (did you mean 'seeds'?)"),
        ("manifests:\n  - a.yaml\n  - missing.yaml\n", ":5:", "manifests[1]: 'missing.yaml': no such manifest file"),
        ("manifests: [nothing-*.yaml]\n", ":3:", "manifests[0]: 'nothing-*.yaml': matches no file"),
        ("manifests:\n  - a.yaml\n  - ./a.yaml\n", ":5:", "manifests[1]: run name 'a' is also the run of"),
        ("manifests: []\n", ":3:", "manifests: List should have at least 1 item"),
        ("manifests: [a.yaml]\nretries: 9\n", ":4:", "retries:"),
    ],
)
def test_bad_matrix_is_one_located_line(tmp_path: Path, body: str, where: str, message: str) -> None:
    (tmp_path / "a.yaml").write_text("x: 1\n")
    path = _write(tmp_path, "apiVersion: gate/v1\nkind: matrix\n" + body)
    with pytest.raises(InputError) as caught:
        expand_matrix(path, _names)
    line = str(caught.value)
    assert line.startswith(f"{path}{where}"), line
    assert message in line
    assert "\n" not in line


def test_reserved_and_unsafe_names() -> None:
    assert safe_name("a b/../c") == "a-b-..-c"
    assert safe_name("///") == "manifest"
    assert run_name("m", {"seed": 1, "dtype": "float16", "device": "cuda:1"}) == "m-seed1-float16-cuda-1"


def test_batch_verdict_follows_the_precedence_of_one_run() -> None:
    v = Verdict
    assert worst_verdict([v.passed, v.awaiting_approval, v.passed_with_waivers]) == v.awaiting_approval
    assert worst_verdict([v.partial, v.unproven, v.passed]) == v.unproven
    assert worst_verdict([v.failed, v.error]) == v.error
    assert worst_verdict([v.failed, v.partial]) == v.failed
    assert worst_verdict([]) == v.passed


def test_wall_clock_values_are_all_two_runs_may_differ_in() -> None:
    result = {
        "started_at": "2026-01-01T00:00:00+00:00",
        "verdict": "pass",
        "checks": [
            {"check": "prefix-sweep", "status": "pass", "duration_s": 1.5, "metrics": {"max_abs_delta": 0.0}},
            {"check": "spec-distribution", "status": "pass", "metrics": {"samples_per_second": 900, "p_value": 0.7}},
            {"check": "phase-performance", "status": "pass", "message": "tpot 1.02x", "metrics": {"tpot": 1.02}},
        ],
    }
    assert without_wall_clock(result) == {
        "started_at": None,
        "verdict": "pass",
        "checks": [
            {"check": "prefix-sweep", "status": "pass", "duration_s": None, "metrics": {"max_abs_delta": 0.0}},
            {"check": "spec-distribution", "status": "pass", "metrics": {"samples_per_second": None, "p_value": 0.7}},
            {"check": "phase-performance", "status": "pass", "message": None, "metrics": None},
        ],
    }
