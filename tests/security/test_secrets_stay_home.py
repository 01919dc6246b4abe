"""Row "secrets stay home" (docs/security.md): a manifest's `headers` are templates over environment
variables, sent to the server the manifest names. A pull request's manifest must not send the job's
other secrets anywhere: a header may only name a variable the site lists in $GATE_HEADER_ENV (outside
the manifest; none by default), and a redirect to another origin is not followed, so a header goes only
to the origin the manifest names. The run records that origin and the header names, never a value."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.security.play import FakeEngine, engine_manifest, gate_cli

TOKEN = "sk-live-0123456789"


@pytest.fixture
def engines() -> Iterator[list[FakeEngine]]:
    started: list[FakeEngine] = []
    yield started
    for engine in started:
        engine.close()


def _start(engines: list[FakeEngine], **kw: str) -> FakeEngine:
    engines.append(FakeEngine(**kw))
    return engines[-1]


def test_a_header_may_not_name_a_variable_the_site_did_not_allow(tmp_path: Path, engines: list[FakeEngine]) -> None:
    server = _start(engines)
    manifest = engine_manifest(tmp_path / "leak.yaml", server.url, headers={"X-Build": "${JOB_SECRET}"})
    for args in (("validate", manifest), ("run", manifest, "--out", tmp_path / "out")):
        done = gate_cli(*args, JOB_SECRET=TOKEN)
        assert done.returncode == 2, done.stdout + done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith(f"gate: {manifest}:") and "JOB_SECRET" in line and "GATE_HEADER_ENV" in line, line
    assert server.requests == []  # nothing was sent
    # the site's list, not the manifest, opens it; another variable stays closed
    assert gate_cli("validate", manifest, JOB_SECRET=TOKEN, GATE_HEADER_ENV="ENGINE_TOKEN").returncode == 2
    assert gate_cli("validate", manifest, JOB_SECRET=TOKEN, GATE_HEADER_ENV="ENGINE_TOKEN,JOB_SECRET").returncode == 0


def test_a_redirect_to_another_origin_is_not_followed(tmp_path: Path, engines: list[FakeEngine]) -> None:
    elsewhere = _start(engines)
    named = _start(engines, redirect_to=elsewhere.url)
    manifest = engine_manifest(tmp_path / "hop.yaml", named.url, headers={"Authorization": "Bearer ${ENGINE_TOKEN}"})
    done = gate_cli("run", manifest, "--out", tmp_path / "out", ENGINE_TOKEN=TOKEN, GATE_HEADER_ENV="ENGINE_TOKEN")
    assert done.returncode == 14, done.stdout + done.stderr
    assert "redirect to another origin" in done.stderr and elsewhere.url.split("//")[1] in done.stderr
    assert [headers.get("Authorization") for _path, headers in named.requests][:1] == [f"Bearer {TOKEN}"]
    assert elsewhere.requests == []  # the token never reached the other server
    assert TOKEN not in done.stdout + done.stderr


def test_the_run_records_the_origin_and_header_names_never_values(tmp_path: Path, engines: list[FakeEngine]) -> None:
    server = _start(engines)
    manifest = engine_manifest(tmp_path / "ok.yaml", server.url, headers={"Authorization": "Bearer ${ENGINE_TOKEN}"})
    out = tmp_path / "out"
    done = gate_cli(
        "run", manifest, "--out", out, "--check", "engine-prefix-parity",
        ENGINE_TOKEN=TOKEN, GATE_HEADER_ENV="ENGINE_TOKEN",
    )  # fmt: skip
    assert (out / "results.json").is_file(), done.stdout + done.stderr
    subjects = json.loads((out / "results.json").read_text())["subjects"]
    host, port = server.url.split("//")[1].split(":")
    for role in ("reference", "candidate"):
        assert subjects[role]["request_origin"] == f"http://{host}:{port}"
        assert subjects[role]["header_names"] == ["Authorization"]
    for path in out.rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path
