"""Row "the engine serves the model the manifest names" (docs/security.md): a server that lists or
answers with another model than the manifest's `model` would have gate judge, and sign, a verdict on a
model nobody named. The openai adapter compares the names the server reports (/v1/models, each reply's
`model` field) with the manifest's: a mismatch is an identity failure, exit 17, on one line, not a
crash and not a pass. The server is a tiny local one answering OpenAI-shaped JSON: the point under
test is what gate does with its reply."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gate.errors import EXIT_ENGINE_WRONG_MODEL
from tests.security.play import FakeEngine, engine_manifest, gate_cli

CHECK = ("--check", "engine-prefix-parity")


@pytest.fixture
def engine(request: pytest.FixtureRequest) -> Iterator[FakeEngine]:
    server = FakeEngine(**request.param)
    yield server
    server.close()


def _one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    stderr = done.stderr
    lines = [line for line in stderr.splitlines() if not line.startswith("[gate]")]
    assert "Traceback" not in stderr, stderr
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.mark.parametrize("engine", [{"listed": "other-model"}], indirect=True)
def test_a_server_that_does_not_list_the_manifests_model_is_refused(tmp_path: Path, engine: FakeEngine) -> None:
    manifest = engine_manifest(tmp_path / "m.yaml", engine.url, model="llama-3-8b")
    done = gate_cli("run", manifest, "--out", tmp_path / "out", *CHECK)
    assert done.returncode == EXIT_ENGINE_WRONG_MODEL, done.stdout + done.stderr
    line = _one_line_error(done)
    assert "other-model" in line and "llama-3-8b" in line, line
    assert not (tmp_path / "out").exists()  # stopped at the probe: no verdict written
    assert [path for path, _ in engine.requests] == ["/v1/models"]  # nothing judged


@pytest.mark.parametrize("engine", [{"listed": "llama-3-8b", "replies_as": "tiny-imposter"}], indirect=True)
def test_a_reply_naming_another_model_fails_the_run(tmp_path: Path, engine: FakeEngine) -> None:
    manifest = engine_manifest(tmp_path / "m.yaml", engine.url, model="llama-3-8b")
    out = tmp_path / "out"
    done = gate_cli("run", manifest, "--out", out, *CHECK)
    assert done.returncode == EXIT_ENGINE_WRONG_MODEL, done.stdout + done.stderr
    assert "tiny-imposter" in done.stdout + done.stderr and "Traceback" not in done.stderr
    result = json.loads((out / "results.json").read_text())
    assert result["verdict"] == "error"  # never pass on another model's replies
    (check,) = [c for c in result["checks"] if c["check"] == "engine-prefix-parity"]
    assert check["status"] == "error" and "tiny-imposter" in check["message"]


@pytest.mark.parametrize("engine", [{"listed": "llama-3-8b", "replies_as": "llama-3-8b-2024-08-06"}], indirect=True)
def test_the_named_model_and_its_dated_snapshot_are_the_same(tmp_path: Path, engine: FakeEngine) -> None:
    manifest = engine_manifest(tmp_path / "m.yaml", engine.url, model="llama-3-8b")
    done = gate_cli("run", manifest, "--out", tmp_path / "out", *CHECK)
    assert done.returncode != EXIT_ENGINE_WRONG_MODEL, done.stdout + done.stderr
    assert "another model" not in done.stdout + done.stderr
