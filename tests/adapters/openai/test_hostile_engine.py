"""An engine that lies, hangs or snoops meets a clear error with its own exit code, never a pass.

Each test launches a real HTTP server on 127.0.0.1 (hostile_server.py, a Python process that ends
by itself after 90 s) through the openai adapter, the way a manifest's `launch.command` runs, and
sends it real requests. Request timeouts are a second or two, so no test can hang.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gate.adapters.openai import Options
from gate.adapters.openai.environment import SAFE_PREFIXES, SAFE_VARIABLES
from gate.adapters.openai.path import EnginePath
from gate.checks._compare import Tolerance
from gate.checks._topk import TopKObservation, compare_topk, exact_equal, worst
from gate.core.result import Status
from gate.engine.pipeline import run_pipeline
from gate.errors import EXIT_ENGINE_BAD_REPLY, EXIT_ENGINE_TIMEOUT, EngineBadReply, EngineTimeout
from tests.support.manifests import write_subject_manifest
from tests.support.repo import REPO

SERVER = str(Path(__file__).with_name("hostile_server.py"))
GATE = str(Path(sys.executable).with_name("gate"))
PROMPT = [5, 6, 7, 8, 9, 10, 11, 12]


def options(mode: str, *args: str, launch_env: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    launch = {
        "command": [sys.executable, SERVER, "{port}", mode, *args],
        "ready_timeout_s": 20,
        "env": launch_env or {},
    }
    return {"flavor": "generic", "retries": 0, "request_timeout_s": 2, "launch": launch, **extra}


def engine(mode: str, *args: str, launch_env: dict[str, str] | None = None, **extra: Any) -> EnginePath:
    spec = options(mode, *args, launch_env=launch_env, **extra)
    return EnginePath(options=Options.model_validate(spec), dtype="float32", seed=0)


def engine_manifest(tmp_path: Path, mode: str) -> Path:
    """A manifest with the hostile server as the candidate and an honest one without a cache as the reference."""
    return write_subject_manifest(
        tmp_path / f"engine-{mode}.yaml",
        {"adapter": "openai", "options": options("honest", "--no-cache")},
        {"adapter": "openai", "options": options(mode)},
        intervention="engine-serving",
        identity=("token-ids", "model-revision", "kv-dtype"),
        seed=0,
    )


def run_engine_check(tmp_path: Path, mode: str, check: str = "engine-prefix-parity") -> Any:
    """`gate run --check CHECK` in process against `engine_manifest`."""
    manifest = engine_manifest(tmp_path, mode)
    outputs = run_pipeline(manifest, tmp_path / "out", only=[check], params={check: {"lengths": [17, 40]}})
    (result,) = [c for c in outputs.result.checks if c.check == check]
    return outputs, result


# -- a clean environment ----------------------------------------------------------------------------
def test_a_launched_engine_sees_none_of_gates_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    secrets = {
        "GATE_LEDGER": "postgresql://gate:hunter2@db.internal/ledger",
        "GATE_LEDGER_KEY": "/secrets/ledger.key",
        "GATE_TRUST": "/secrets/trust.yaml",
        "GATE_SIGN_KEY": "/secrets/run.key",
        "GITHUB_TOKEN": "ghs_notarealtoken",
        "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "oidc-request-token",
        "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI",
        "HF_TOKEN": "hf_notarealtoken",
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    path = engine("env", launch_env={"ENGINE_MODE": "hostile"})
    with path.serve() as served:
        seen = served.client.get("/env")
    assert isinstance(seen, dict)
    leaked = [name for name, value in seen.items() if name in secrets or value in secrets.values()]
    assert not leaked, leaked
    allowed = set(SAFE_VARIABLES) | {"ENGINE_MODE"}
    assert all(name in allowed or name.startswith(SAFE_PREFIXES) for name in seen), sorted(seen)
    assert seen["ENGINE_MODE"] == "hostile" and seen["PATH"] == os.environ["PATH"] and seen["LC_ALL"] == "C.UTF-8"


# -- replies validated as data ----------------------------------------------------------------------
def test_nan_logprobs_are_a_bad_reply_naming_the_field() -> None:
    with engine("nan").serve() as served, pytest.raises(EngineBadReply, match=r"the logprob of token 0 is nan"):
        served.complete(PROMPT, 4, 3)


def test_nan_logprobs_never_compare_as_no_difference() -> None:
    """The comparison itself, should a NaN get past the adapter: `max()` skipped it and read 0."""
    nan = math.nan
    ref = TopKObservation([7, 8], [-0.5, -0.25], [{7: -0.5, 9: -2.0}, {8: -0.25}])
    cand = TopKObservation([7, 8], [nan, nan], [{7: nan, 9: -2.0}, {8: nan}])
    comparison = compare_topk(ref, cand, Tolerance(atol=1e-3, rtol=0.0, source="claim"))
    assert math.isnan(comparison.max_abs_delta) and comparison.over_tolerance
    assert not exact_equal(cand, cand)  # the very same NaN objects on both sides are still not equal
    assert math.isnan(worst([0.0, nan, 1.0])) and worst([0.5, 2.0]) == 2.0 and worst([]) == 0.0


def test_a_nan_engine_does_not_pass_engine_prefix_parity(tmp_path: Path) -> None:
    outputs, result = run_engine_check(tmp_path, "nan")
    assert result.status == Status.error and "is nan" in result.message, result.message
    assert outputs.exit_code == EXIT_ENGINE_BAD_REPLY


CACHED = r"usage\.prompt_tokens_details\.cached_tokens is "


@pytest.mark.parametrize(
    ("mode", "words"),
    [
        ("cached-negative", CACHED + r"-5, which is impossible"),
        ("cached-huge", CACHED + r"1000000000, which is impossible: it must be between 0 and 8"),
        ("cached-over-prompt", CACHED + r"11, which is impossible: it must be between 0 and 8"),
        ("cached-first", CACHED + r"4 on the first request this server was sent"),
        ("malformed-cached", CACHED + r"'many', not a whole number"),
        ("malformed-logprob", r"is malformed: ValueError"),
        ("malformed-usage", r"usage is \[.*, not an object"),
        ("malformed-choices", r"has no choices\[0\]\.logprobs"),
        ("short", r"1 tokens generated where 2 were asked for"),
        ("not-http", r"did not answer HTTP: BadStatusLine"),
    ],
)
def test_impossible_or_malformed_replies_are_bad_replies(mode: str, words: str) -> None:
    """Impossible cached-token counts and replies of the wrong shape: each a bad reply naming the field."""
    with engine(mode, flavor="llama.cpp").serve() as served, pytest.raises(EngineBadReply, match=words):
        served.complete(PROMPT, 2, 3)


def test_a_short_reply_is_a_bad_reply_only_where_ignore_eos_asked_for_every_token() -> None:
    """With the engine's stop left on (gate.checks._eos sends ignore_eos false) a reply may end before
    max_tokens, and says why in finish_reason; with gate's default ignore_eos it must hold every token."""
    with engine("short", flavor="llama.cpp").serve() as served:
        reply = served.complete(PROMPT, 2, 3, {"ignore_eos": False})
        assert len(reply.tokens) == 1 and reply.finish_reason == "length"
        with pytest.raises(EngineBadReply, match=r"1 tokens generated where 2 were asked for \(end-of-sequence"):
            served.complete(PROMPT, 2, 3)


def test_more_cached_tokens_than_the_shared_prefix_are_refused() -> None:
    with engine("cached-beyond").serve() as served:
        served.complete(PROMPT, 2, 3)  # the first request: an honest 0
        with pytest.raises(EngineBadReply, match=r"cached_tokens is 10, more than the 8 tokens this prompt shares"):
            served.complete([*PROMPT, 40, 41], 2, 3)  # it shares 8 tokens with the first, and claims all 10


def test_an_honest_cache_passes_the_same_bounds() -> None:
    with engine("honest").serve() as served:
        assert served.complete(PROMPT, 2, 3).cached_tokens == 0
        again = served.complete([*PROMPT, 40, 41], 2, 3)
        assert again.cached_tokens == 8 and again.cached_field == "usage.prompt_tokens_details.cached_tokens"
        assert served.complete(PROMPT, 2, 3).cached_tokens == 7  # the whole prompt cached: one token recomputed


def test_a_lying_cache_cannot_prove_engine_prefix_parity_exercised(tmp_path: Path) -> None:
    outputs, result = run_engine_check(tmp_path, "cached-beyond")
    assert result.status == Status.error and "more than the" in result.message, result.message
    assert outputs.exit_code == EXIT_ENGINE_BAD_REPLY


def test_a_malformed_vocabulary_is_a_bad_reply_at_discovery() -> None:
    with pytest.raises(EngineBadReply, match=r"data\[0\]\.meta\.n_vocab is 'lots', not a whole number"):
        EnginePath.probe(Options.model_validate(options("vocab-huge")), dtype="float32", seed=0)


def test_bad_engine_json_exits_14_not_3(tmp_path: Path) -> None:
    outputs, result = run_engine_check(tmp_path, "malformed-logprob")
    assert result.status == Status.error and "malformed" in result.message, result.message
    assert "Traceback" not in (result.message or "")
    assert outputs.exit_code == EXIT_ENGINE_BAD_REPLY


# -- total deadlines --------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["drip-body", "drip-headers"])
def test_a_reply_dripped_a_byte_at_a_time_ends_at_the_request_timeout(mode: str) -> None:
    """Each byte comes well within the timeout; the whole reply would take about a minute."""
    with engine(mode, request_timeout_s=1).serve() as served:
        started = time.monotonic()
        with pytest.raises(EngineTimeout, match=r"no reply within 1s \(1 attempt"):
            served.complete(PROMPT, 2, 3)
        assert time.monotonic() - started < 20  # the deadline, not the drip (generous: a loaded machine)


def test_an_endless_stream_ends_at_the_request_timeout() -> None:
    with engine("endless-sse", request_timeout_s=1).serve() as served:
        started = time.monotonic()
        with pytest.raises(EngineTimeout, match=r"no reply within 1s"):
            served.stream(PROMPT, 2, 3)
        assert time.monotonic() - started < 20


def test_a_dripping_engine_run_exits_13(tmp_path: Path) -> None:
    outputs, result = run_engine_check(tmp_path, "drip-body")
    assert result.status == Status.error and "no reply within" in result.message, result.message
    assert outputs.exit_code == EXIT_ENGINE_TIMEOUT


# -- engine text escaped ----------------------------------------------------------------------------
def test_an_error_body_is_quoted_on_one_line() -> None:
    with engine("inject").serve() as served, pytest.raises(EngineBadReply) as caught:
        served.complete(PROMPT, 2, 3)
    message = str(caught.value)
    assert "HTTP 400" in message and "::notice title=gate verdict::PASS injected" in message  # quoted, visibly
    assert not re.search(r"[\x00-\x1f\x7f]", message), repr(message)  # no newline, CR or escape survives


@pytest.mark.slow
def test_an_error_body_cannot_forge_a_workflow_command(tmp_path: Path) -> None:
    """`gate run` under GitHub Actions: the engine's forged `::notice` never starts a line of the log."""
    manifest = engine_manifest(tmp_path, "inject")
    env = {**os.environ, "GITHUB_ACTIONS": "true", "GATE_THREADS": "1"}
    env.pop("GITHUB_STEP_SUMMARY", None)
    run = subprocess.run(
        [GATE, "run", str(manifest), "--out", str(tmp_path / "out"), "--check", "engine-prefix-parity"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert run.returncode == EXIT_ENGINE_BAD_REPLY, run.stdout + run.stderr
    output = run.stdout + run.stderr
    assert "Traceback" not in output and "\x1b" not in output
    lines = re.split(r"\r\n|\r|\n", output)
    commands = [line.lstrip() for line in lines if line.lstrip().startswith("::")]
    assert commands, output  # gate's own annotations are there
    assert not [c for c in commands if "injected" in c and not c.startswith("::error ")], commands
    notices = [c for c in commands if c.startswith("::notice")]
    assert len(notices) == 1 and "PASS" not in notices[0].split("::")[2][:10], notices
    assert json.loads((tmp_path / "out" / "results.json").read_text())["verdict"] == "error"


def test_an_honest_engine_passes_engine_prefix_parity_with_hits(tmp_path: Path) -> None:
    """The bounds refuse lies, not a correct prefix cache: the same check against an honest server."""
    _, result = run_engine_check(tmp_path, "honest")
    assert result.status in (Status.passed, Status.unproven), result.message
    assert result.exercise["cached_tokens_by_length"] == {"17": 17, "40": 40}, result.exercise


def test_an_error_the_cli_prints_stays_on_its_line(capsys: pytest.CaptureFixture[str]) -> None:
    """Whatever an error quotes, `gate: ...` is one line on stderr (a failure at start-up is printed so)."""
    from gate.cli.common import report_error

    report_error(EngineBadReply("server: answered HTTP 400: no\n::notice title=gate verdict::PASS\r\x1b[2K"))
    printed = capsys.readouterr().err
    assert printed.count("\n") == 1 and printed.startswith("gate: server: ") and not re.search(r"[\r\x1b]", printed)
