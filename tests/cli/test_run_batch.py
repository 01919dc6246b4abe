"""`gate run M1 M2 ... --out DIR` and `--matrix`: one line per run, the batch verdict, its exit code;
bad input is one located line, exit 2, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from gate.cli.main import cli
from tests.support.repo import EXAMPLES

LAYOUT = EXAMPLES / "reference-static-layout.yaml"
FAULT = EXAMPLES / "reference-fault-off-by-one-pos.yaml"


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), env={"GATE_THREADS": "1", "CI": "1", "NO_COLOR": "1"})


def test_two_manifests_one_summary_and_the_worst_exit_code(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = invoke("run", str(LAYOUT), str(FAULT), "--out", str(out), "-j", "2", "--check", "greedy-parity", "--json")
    assert result.exit_code == 1, result.output
    document = json.loads(result.stdout)
    assert document == json.loads((out / "summary.json").read_text())
    assert (document["verdict"], document["summary"]) == ("fail", "2 runs: 1 fail, 1 partial")
    assert document["executor"] == {"kind": "local", "jobs": 2, "threads": 1}
    assert [run["verdict"] for run in document["runs"]] == ["partial", "fail"]
    assert "[2/2]" in result.stderr
    for run in ("reference-static-layout", "reference-fault-off-by-one-pos"):
        assert (out / run / "results.json").is_file() and (out / run / "dossier.html").is_file()


def test_bad_matrix_is_one_line_and_exit_2(tmp_path: Path) -> None:
    matrix = tmp_path / "m.yaml"
    matrix.write_text(f"apiVersion: gate/v1\nkind: matrix\nmanifests: [{LAYOUT}]\ndtypes: [float8]\n")
    result = invoke("run", "--matrix", str(matrix), "--out", str(tmp_path / "out"))
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"gate: {matrix}:4:") and "dtypes[0]" in lines[0]
    assert not (tmp_path / "out").exists()


def test_batch_options_need_a_batch_and_a_manifest(tmp_path: Path) -> None:
    result = invoke("run", str(LAYOUT), "--out", str(tmp_path / "out"), "--executor", "ray")
    assert result.exit_code == 2 and "apply to a batch" in result.output
    result = invoke("run", "--out", str(tmp_path / "out"))
    assert result.exit_code == 2 and "give a MANIFEST" in result.output
    assert not (tmp_path / "out").exists()
