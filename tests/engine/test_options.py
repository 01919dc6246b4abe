"""One run-options model (gate.engine.options.RunOptions) from the CLI to the runner."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from gate.cli.main import cli
from gate.core.result import GateResult
from gate.engine.options import RunOptions
from gate.trust.ledger_store import is_url, ledger_location
from tests.support.repo import EXAMPLES


def test_options_travel_as_plain_data_and_a_database_ledger_keeps_its_url() -> None:
    options = RunOptions(
        ledger=ledger_location("postgresql://ci@db.example/gate"),
        sign_key="ci.key",  # type: ignore[arg-type]
        policy_dirs=["site"],  # type: ignore[arg-type]
        only=["greedy-parity"],  # type: ignore[arg-type]
        params={"greedy-parity": {"tokens": [4]}},
    )
    travelled = pickle.loads(pickle.dumps(options))  # what a worker process or a Ray node receives
    assert travelled == options
    assert travelled.ledger == "postgresql://ci@db.example/gate"  # a Path would fold its `//`
    ledger = travelled.ledger_path
    assert ledger is not None and is_url(ledger) and ledger.url == "postgresql://ci@db.example/gate"  # type: ignore[attr-defined]
    assert travelled.sign_key == Path("ci.key") and travelled.only == ("greedy-parity",)
    assert travelled.inputs() == [Path("ci.key"), Path("site")]  # a database is no file --out could swallow
    assert RunOptions(ledger=Path("l.sqlite")).inputs() == [Path("l.sqlite")]
    assert RunOptions().worker_threads == 1 and RunOptions(threads=3).worker_threads == 3
    with pytest.raises(ValidationError):
        RunOptions(only_checks=["x"])  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        options.profile = True  # type: ignore[misc]


def _capture(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[tuple[Path, RunOptions, dict[str, Any]]]:
    """run_manifest replaced by one that records what it was given and writes a real results.json."""
    from gate.engine import runner
    from gate.trust.keys import generate_keypair
    from tests.trust.runs import signed_run

    key = generate_keypair(tmp_path / "run")[0]
    seen: list[tuple[Path, RunOptions, dict[str, Any]]] = []

    def fake(path: Path, out_dir: Path, options: RunOptions, **sinks: Any) -> GateResult:
        seen.append((out_dir, options, sinks))
        return signed_run(out_dir, path, key)[1]

    monkeypatch.setattr(runner, "run_manifest", fake)
    return seen


def test_gate_run_builds_the_options_once_and_the_runner_reads_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen = _capture(monkeypatch, tmp_path)
    manifest = EXAMPLES / "reference-static-layout.yaml"
    args = ["run", str(manifest), "--out", str(tmp_path / "out"), "--check", "greedy-parity"]
    args += ["--param", "greedy-parity.tokens=[4]", "--threads", "1", "--baseline-commit", "abc123"]
    result = CliRunner().invoke(cli, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    ((out_dir, options, sinks),) = seen
    assert out_dir.parent == tmp_path and out_dir != tmp_path / "out"  # the staging directory beside --out
    assert options == RunOptions(
        only=("greedy-parity",), params={"greedy-parity": {"tokens": [4]}}, threads=1, baseline_commit="abc123"
    )
    assert set(sinks) == {"log", "progress", "events", "prepared"} and sinks["prepared"] is not None


def test_run_pipeline_keywords_build_the_same_options(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from gate.engine.pipeline import run_pipeline

    seen = _capture(monkeypatch, tmp_path)
    manifest = EXAMPLES / "reference-static-layout.yaml"
    run_pipeline(manifest, tmp_path / "a", only=["greedy-parity"], params={"greedy-parity": {"tokens": [4]}})
    options = RunOptions(only=("greedy-parity",), params={"greedy-parity": {"tokens": [4]}})
    run_pipeline(manifest, tmp_path / "b", options)
    assert seen[0][1] == seen[1][1] == options
    with pytest.raises(TypeError, match="not both"):
        run_pipeline(manifest, tmp_path / "c", options, only=["greedy-parity"])
    with pytest.raises(ValidationError):
        run_pipeline(manifest, tmp_path / "d", sign_kye="ci.key")
    assert not (tmp_path / "c").exists() and not (tmp_path / "d").exists()
