"""`gate run` habits: --json, --check/--param (a partial run is never a PASS), -q, --version."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gate.cli.main import cli
from gate.core.result import GateResult
from tests.support.repo import EXAMPLES

LAYOUT = EXAMPLES / "reference-static-layout.yaml"


def invoke(*args: str) -> object:
    return CliRunner().invoke(cli, list(args), env={"GATE_THREADS": "1", "CI": "1"})


@pytest.fixture(scope="module")
def partial(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, Path]:
    out = tmp_path_factory.mktemp("partial")
    return invoke("run", str(LAYOUT), "--out", str(out), "--check", "mask-oracle", "--json"), out


def test_check_runs_one_check_and_is_never_a_pass(partial: tuple[object, Path]) -> None:
    result, out = partial
    assert result.exit_code == 5, result.output  # type: ignore[attr-defined]
    record = GateResult.model_validate_json((out / "results.json").read_text())
    assert record.verdict.value == "partial" and record.exit_code == 5
    ran = [c for c in record.checks if c.status.value != "skip"]
    assert [c.check for c in ran] == ["mask-oracle"] and ran[0].status.value == "pass"
    skipped = [c for c in record.checks if c.status.value == "skip"]
    assert skipped and all(
        c.message.startswith("not run: this run was limited to --check mask-oracle") for c in skipped
    )
    assert "no verdict on the manifest" in record.summary
    html = (out / "dossier.html").read_text()
    assert 'data-verdict="partial"' in html and ">PARTIAL RUN<" in html and ">PASS<" not in html.split("</header>")[0]


def test_json_prints_one_summary_object_on_stdout(partial: tuple[object, Path]) -> None:
    result, out = partial
    summary = json.loads(result.stdout)  # type: ignore[attr-defined]  # exactly one JSON document
    assert summary["verdict"] == "partial" and summary["exit_code"] == 5 and summary["partial"] is True
    assert summary["out_dir"] == str(out)
    first = summary["checks"][0]
    assert first["check"] == "mask-oracle" and first["status"] == "pass"
    assert first["controls"] and set(first["controls"].values()) == {"detected"}
    assert "[gate] check mask-oracle" in result.stderr  # type: ignore[attr-defined]  # logs stay on stderr
    assert "control mask-origin-reset: detected" in result.stderr  # type: ignore[attr-defined]


def test_param_overrides_one_check_and_quiet_prints_only_the_verdict(tmp_path: Path) -> None:
    result = invoke(
        "run", str(LAYOUT), "--out", str(tmp_path), "-q",
        "--check", "prefix-sweep",
        "--param", "prefix-sweep.log_spaced=3",
        "--param", "prefix-sweep.lengths=[0, 1, 5]",
        "--param", "prefix-sweep.boundaries=false",
        "--param", "prefix-sweep.longest=8",
    )  # fmt: skip
    assert result.exit_code == 5, result.output  # type: ignore[attr-defined]
    assert result.stderr == ""  # type: ignore[attr-defined]
    assert result.stdout.splitlines() == [result.stdout.strip()] and result.stdout.startswith("verdict: PARTIAL")  # type: ignore[attr-defined]
    record = GateResult.model_validate_json((tmp_path / "results.json").read_text())
    sweep = next(c for c in record.checks if c.check == "prefix-sweep")
    assert sweep.params["log_spaced"] == 3 and sweep.params["lengths"] == [0, 1, 5]
    assert sweep.params["boundaries"] is False and sweep.metrics["longest"] == 8 and sweep.metrics["lengths"] <= 6


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--check", "no-such-check"], "check 'no-such-check' is not in this manifest's plan"),
        (["--param", "prefix-sweep"], "expected CHECK.KEY=VALUE"),
        (["--param", "nope.x=1"], "check 'nope' is not in the plan"),
        (["-q", "-v"], "-q and -v contradict each other"),
    ],
)
def test_bad_check_and_param_are_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    result = invoke("run", str(LAYOUT), "--out", str(tmp_path / "out"), *args)
    assert result.exit_code == 2 and message in result.output, result.output  # type: ignore[attr-defined]
    assert not (tmp_path / "out" / "results.json").exists()


def test_version_names_python_torch_and_transformers() -> None:
    result = invoke("--version")
    assert result.exit_code == 0  # type: ignore[attr-defined]
    line = result.output.strip()  # type: ignore[attr-defined]
    assert line.startswith("gate ") and "python 3." in line and "torch " in line and "transformers " in line
