"""Every way an engine can fail gives one clear error with its own exit code, and no process survives.

These start real server processes on 127.0.0.1 (a Python script that misbehaves on purpose); the
same modes against llama.cpp's own server are in test_llamacpp.py.
"""

from __future__ import annotations

import os
import re
import socket
import sys
import time
from pathlib import Path

import pytest

from gate.adapters.openai import Options
from gate.adapters.openai.client import resolve_headers
from gate.adapters.openai.path import EnginePath
from gate.core.result import Status
from gate.engine.pipeline import run_pipeline
from gate.errors import (
    EXIT_ENGINE_BAD_REPLY,
    EXIT_ENGINE_CRASHED,
    EXIT_ENGINE_NOT_READY,
    EXIT_ENGINE_PORT_IN_USE,
    EXIT_ENGINE_TIMEOUT,
    EngineBadReply,
    EngineCrashed,
    EngineNotReady,
    EnginePortInUse,
    EngineTimeout,
    InputError,
    SubjectCrash,
)
from tests.support.manifests import write_subject_manifest

SERVER = str(Path(__file__).with_name("misbehaving_server.py"))
SLOW_START = "import time; print('still loading', flush=True); time.sleep(60)"


def path_for(command: list[str], **extra: object) -> EnginePath:
    options = Options.model_validate(
        {"flavor": "generic", "launch": {"command": command, "ready_timeout_s": extra.pop("ready", 20)}, **extra}
    )
    return EnginePath(options=options, dtype="float32", seed=0)


def start(path: EnginePath) -> None:
    """Start the server and stop it again (what a check does around its requests)."""
    with path.serve():
        pass


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split()[2] == "Z")


def test_exit_codes_are_distinct() -> None:
    codes = [
        EXIT_ENGINE_NOT_READY,
        EXIT_ENGINE_PORT_IN_USE,
        EXIT_ENGINE_CRASHED,
        EXIT_ENGINE_TIMEOUT,
        EXIT_ENGINE_BAD_REPLY,
    ]
    assert len(set(codes)) == len(codes) and not set(codes) & {0, 1, 2, 3, 4}


def test_a_server_that_exits_at_start_is_not_ready_and_its_log_is_quoted() -> None:
    script = "import sys; print('error: failed to load model /nowhere.gguf'); sys.exit(3)"
    with pytest.raises(EngineNotReady, match=r"exited with status 3 .*failed to load model /nowhere.gguf"):
        start(path_for([sys.executable, "-c", script]))


def test_a_server_that_never_listens_times_out_at_start_up() -> None:
    with (
        pytest.raises(EngineNotReady, match=r"not ready after 1s .*still loading"),
        path_for(
            [sys.executable, "-c", "import time; print('still loading', flush=True); time.sleep(60)"], ready=1
        ).serve(),
    ):
        pass


def test_a_missing_program_is_named() -> None:
    with pytest.raises(EngineNotReady, match="no such program"), path_for(["/nonexistent/llama-server"]).serve():
        pass


def test_a_port_in_use_is_refused_before_launch() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        options = Options.model_validate(
            {"flavor": "generic", "launch": {"command": [sys.executable, SERVER, "{port}", "forks"], "port": port}}
        )
        with pytest.raises(EnginePortInUse, match=f"port {port}"):
            start(EnginePath(options=options, dtype="float32", seed=0))


def test_a_reply_that_is_not_json_is_named() -> None:
    with pytest.raises(EngineBadReply, match="did not answer JSON: '<html>hello</html>'"):
        start(path_for([sys.executable, SERVER, "{port}", "html"]))


def test_a_slow_reply_times_out_after_retries() -> None:
    p = path_for([sys.executable, SERVER, "{port}", "slow"], request_timeout_s=0.3, retries=1, backoff_s=0.05)
    with p.serve() as served:
        started = time.monotonic()
        with pytest.raises(EngineTimeout, match=r"no reply within 0.3s \(2 attempt"):
            served.complete([5, 6, 7], 2, 3)
        assert time.monotonic() - started < 5


def test_a_crash_mid_run_is_a_crash_with_the_log_tail() -> None:
    p = path_for([sys.executable, SERVER, "{port}", "crash"], retries=1, backoff_s=0.2)
    with (
        p.serve() as served,
        pytest.raises(EngineCrashed, match=r"exited with status 1 during the run.*simulated abort"),
    ):
        served.client.complete([5, 6, 7], 2, 3)


def test_a_server_that_dies_serving_a_checks_request_is_a_subject_crash() -> None:
    p = path_for([sys.executable, SERVER, "{port}", "crash"], retries=1, backoff_s=0.2)
    with p.serve() as served, pytest.raises(SubjectCrash) as caught:
        served.complete([5, 6, 7], 2, 3)
    crash = caught.value
    assert crash.call == "POST /v1/completions" and crash.where == {"length": 3, "new_tokens": 2, "exit_status": 1}
    assert isinstance(crash.error, EngineCrashed) and "simulated abort" in str(crash.error)


def test_a_check_whose_engine_dies_mid_check_fails_with_class_crash(tmp_path: Path) -> None:
    """End to end: the check is failed (a finding about the engine, exit 1), not gate's error (exit 12)."""
    launch = {"command": [sys.executable, SERVER, "{port}", "crash"], "ready_timeout_s": 20}
    engine = {"adapter": "openai", "options": {"flavor": "generic", "retries": 1, "backoff_s": 0.2, "launch": launch}}
    manifest = write_subject_manifest(
        tmp_path / "engine-crash.yaml",
        engine,
        engine,
        intervention="engine-serving",
        identity=("token-ids", "model-revision", "kv-dtype"),
        seed=0,
    )
    outputs = run_pipeline(manifest, tmp_path / "out", only=["engine-prefix-parity"])
    (result,) = [c for c in outputs.result.checks if c.check == "engine-prefix-parity"]
    assert result.status == Status.failed, result.message
    assert result.diagnosis is not None and result.diagnosis["bug_class"] == "crash"
    assert result.diagnosis["call"] == "POST /v1/completions" and result.diagnosis["exit_status"] == 1
    assert "simulated abort" in result.diagnosis["exception"]
    assert outputs.exit_code == 1


def test_the_whole_process_group_stops_even_on_an_exception() -> None:
    p = path_for([sys.executable, SERVER, "{port}", "forks"])
    with pytest.raises(KeyboardInterrupt), p.serve() as served:
        assert served.server is not None
        leader = served.server.proc.pid  # type: ignore[union-attr]
        for _ in range(50):
            match = re.search(r"worker pid (\d+)", served.server.log_text())
            if match:
                break
            time.sleep(0.1)
        assert match, served.server.log_text()
        worker = int(match.group(1))
        assert alive(leader) and alive(worker)
        raise KeyboardInterrupt  # what Ctrl-C raises in the middle of a check
    assert not alive(leader) and not alive(worker)


def test_headers_come_from_the_environment_only() -> None:
    with pytest.raises(ValueError, match="environment variable"):
        Options.model_validate({"base_url": "http://127.0.0.1:1", "headers": {"Authorization": "Bearer sk-secret"}})
    site = {"GATE_HEADER_ENV": "TOKEN"}  # the variables a header may name: the site's list, not the manifest's
    assert resolve_headers({"Authorization": "Bearer ${TOKEN}"}, {"TOKEN": "t0", **site}) == {
        "Authorization": "Bearer t0"
    }
    with pytest.raises(EngineBadReply, match="TOKEN"):
        resolve_headers({"Authorization": "Bearer ${TOKEN}"}, site)
    with pytest.raises(InputError, match="GATE_HEADER_ENV"):  # not on the list: never resolved
        resolve_headers({"Authorization": "Bearer ${TOKEN}"}, {"TOKEN": "t0"})


def test_a_start_up_failure_quotes_the_first_error_above_the_logs_tail() -> None:
    # vLLM's shape: the cause (ValueError) far up, the log ending in a wrapper that points above
    script = (
        "import sys; print('WARNING this can cause fd limit errors like `OSError: [Errno 24] Too many open files`'); "
        "print('ValueError: No common block size for 16 (CPU_ATTN: [MultipleOf(32)]).'); "
        "[print(f'  frame {i}') for i in range(30)]; "
        "print('RuntimeError: Engine core initialization failed. See root cause above.'); sys.exit(1)"
    )
    with pytest.raises(EngineNotReady) as err:
        start(path_for([sys.executable, "-c", script]))
    message = str(err.value)
    assert "first error in its log: ValueError: No common block size for 16" in message
    assert message.index("ValueError") < message.index("its log ends:") < message.index("RuntimeError")


def test_a_start_up_failure_whose_tail_holds_the_error_quotes_it_once() -> None:
    script = "import sys; print('ValueError: bad flag'); sys.exit(1)"
    with pytest.raises(EngineNotReady) as err:
        start(path_for([sys.executable, "-c", script]))
    assert str(err.value).count("ValueError: bad flag") == 1 and "first error" not in str(err.value)
