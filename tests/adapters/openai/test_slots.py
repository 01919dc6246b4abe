"""Slot files as a server capability (gate.adapters.openai.slots) and engine-slot-restore's judgement of
what a restore did, without a server: which servers offer slot files and why the others do not, and
how an accepted truncated file, a refused restore of a good file and no reuse after a restart are
reported. The real server's behaviour is measured in test_llamacpp_slots.py (engine-marked)."""

from __future__ import annotations

from pathlib import Path

from gate.adapters.openai.client import Completion, EngineClient
from gate.adapters.openai.process import ServerProcess
from gate.adapters.openai.slots import LlamaSlotFiles, slot_files
from gate.checks.engine_slot_restore.body import Malformed, Measured, Restore, explain, slot_store
from gate.protocols import EngineSlots, SlotFilesPath, SlotStore
from tests.support.reference import ctx, path


def _client(flavor: str, slots: int | None = None) -> EngineClient:
    client = EngineClient("http://127.0.0.1:9", flavor=flavor)  # nothing is sent: only what it states
    client.info = {"total_slots": slots}
    return client


def _server(*flags: str) -> ServerProcess:
    server = ServerProcess([], port=9, probe="/health", ready_timeout_s=1)
    server.command = ["llama-server", "-m", "m.gguf", *flags]
    return server


def test_only_a_launched_llamacpp_server_with_a_slot_directory_offers_slot_files(tmp_path: Path) -> None:
    assert "vllm server" in str(slot_files(_client("vllm"), _server()))
    assert "base_url" in str(slot_files(_client("llama.cpp"), None))
    assert "without --slot-save-path" in str(slot_files(_client("llama.cpp"), _server("-np", "2")))
    store = slot_files(_client("llama.cpp", 5), _server("--slot-save-path", f"{tmp_path}/"))
    assert isinstance(store, LlamaSlotFiles) and isinstance(store, SlotStore)
    assert store.directory == tmp_path and store.slots == 5 and store.pinned(3) == {"id_slot": 3}


def test_a_path_says_before_any_start_why_its_servers_have_no_slot_files() -> None:
    from gate.adapters.openai import Options
    from gate.adapters.openai.path import EnginePath

    def engine(flavor: str, *flags: str, base_url: str | None = None) -> EnginePath:
        where = {"base_url": base_url} if base_url else {"launch": {"command": ["llama-server", *flags]}}
        options = Options.model_validate({"flavor": flavor, "vocab_size": 512, **where})
        return EnginePath(options, "float32", 0, flavor=flavor)

    assert isinstance(engine("llama.cpp"), SlotFilesPath)
    assert engine("llama.cpp", "--slot-save-path", "{workdir}").slot_files_absent() is None
    assert "without --slot-save-path" in str(engine("llama.cpp", "-np", "4").slot_files_absent())
    assert "base_url" in str(engine("llama.cpp", base_url="http://127.0.0.1:9").slot_files_absent())
    assert "vllm server" in str(engine("vllm", base_url="http://127.0.0.1:9").slot_files_absent())


def test_a_served_engine_offers_the_slot_capability_and_another_server_declines() -> None:
    from gate.adapters.openai.path import Served

    assert issubclass(Served, EngineSlots)

    class Other:  # an engine server of some other adapter, without slot files
        flavor = "tgi"

    assert slot_store(Other()) == "the tgi server offers no slot files gate can reach"  # type: ignore[arg-type]


def _reply(tokens: list[int], cached: int | None) -> Completion:
    top = [{t: -0.1, t + 1: -2.5} for t in tokens]
    return Completion(tokens, [-0.1] * len(tokens), top, cached, 208, 0.01)


def _measured(restores: list[Restore], malformed: list[Malformed]) -> Measured:
    saved = {"n_saved": 207}
    return Measured(_reply([5, 6, 7], 0), 200, saved, 1000, restores, malformed, {}, [])


def _restores(cached_after_restart: int | None) -> list[Restore]:
    same = Restore("slot 0, same server", 0, _reply([5, 6, 7], 200), {"n_restored": 207})
    restarted = Restore("slot 0, a restarted server", 0, _reply([5, 6, 7], cached_after_restart), {}, None, True)
    return [same, restarted]


def _ctx() -> object:
    return ctx(path(), path(), claim={"level": "tolerance"})


def test_an_accepted_truncated_file_warns_as_malformed_state_and_fails_once_it_serves_wrong_output() -> None:
    accepted = Malformed("less its last 1 byte", 999, 4, "accepted", "{'n_restored': 207}", _reply([5, 6, 7], 0))
    refused = Malformed("cut to half (500 of 1000 bytes)", 500, 4, "refused", "HTTP 400", _reply([5, 6, 7], 0))
    outcome = explain(_ctx(), _measured(_restores(200), [refused, accepted]))  # type: ignore[arg-type]
    # not refused, but no wrong output: a finding about the build, amber (a deny rule cannot make it green)
    assert outcome.status == "warn" and outcome.diagnosis is not None
    assert outcome.diagnosis["bug_class"] == "malformed-state"
    assert outcome.message == "a slot file less its last 1 byte was accepted instead of refused"
    assert [m["outcome"] for m in outcome.evidence["malformed"]] == ["refused", "accepted"]
    # the same file answered from its corrupt state: wrong output, a failure
    accepted.after = _reply([5, 9, 7], 0)
    outcome = explain(_ctx(), _measured(_restores(200), [refused, accepted]))  # type: ignore[arg-type]
    assert outcome.status == "fail" and outcome.diagnosis is not None
    assert outcome.diagnosis["bug_class"] == "malformed-state"
    assert outcome.message.startswith("after a file less its last 1 byte the reply differs")


def test_a_wrong_continuation_after_a_restore_fails_as_restored_state() -> None:
    restores = _restores(200)
    restores[0].reply = _reply([5, 9, 7], 200)  # token 1 flips outside the reference's top-k
    outcome = explain(_ctx(), _measured(restores, []))  # type: ignore[arg-type]
    assert outcome.status == "fail" and outcome.diagnosis is not None
    assert outcome.diagnosis["bug_class"] == "restored-state"
    assert outcome.message.startswith("slot 0, same server: the continuation after the restore differs")


def test_a_wrong_continuation_stays_restored_state_when_a_truncated_copy_then_crashes_the_engine() -> None:
    # llama.cpp b9873 on the sliding-window example: the restored slot continues on another prompt's context
    # checkpoint (step 1), and the 1-byte-short copy aborts the restarted server (step 3); the class names
    # the wrong reply, and the crash stays beside it
    from gate.errors import EngineCrashed, SubjectCrash

    restores = _restores(200)
    restores[0].reply = _reply([5, 9, 7], 45)
    crash = SubjectCrash("restore", EngineCrashed("GGML_ASSERT(nread <= state_size) failed"), {"exit_status": -6})
    crashed = Malformed("less its last 1 byte", 999, 4, "crashed", "", None, crash)
    outcome = explain(_ctx(), _measured(restores, [crashed]))  # type: ignore[arg-type]
    assert outcome.status == "fail" and outcome.diagnosis is not None
    assert outcome.diagnosis["bug_class"] == "restored-state"
    assert outcome.diagnosis["crash"]["bug_class"] == "crash"
    assert outcome.diagnosis["crash"]["exit_status"] == -6
    assert outcome.message.startswith("slot 0, same server: the continuation after the restore differs")
    assert "killed the engine (exit status -6, GGML_ASSERT(nread <= state_size) failed)" in outcome.message
    alone = explain(_ctx(), _measured(_restores(200), [crashed]))  # type: ignore[arg-type]
    assert alone.diagnosis is not None and alone.diagnosis["bug_class"] == "crash"  # the crash alone: crash


def test_a_good_file_the_engine_refuses_to_restore_fails() -> None:
    restores = _restores(200)
    restores[0] = Restore("slot 0, same server", 0, None, {}, "HTTP 400: Unable to restore slot")
    outcome = explain(_ctx(), _measured(restores, []))  # type: ignore[arg-type]
    assert outcome.status == "fail" and "refused to restore the file it saved: HTTP 400" in outcome.message


def test_no_reuse_after_the_restart_is_unproven_never_a_pass() -> None:
    for cached in (0, None):
        outcome = explain(_ctx(), _measured(_restores(cached), []))  # type: ignore[arg-type]
        assert outcome.status == "unproven" and "the restore path was not reached" in outcome.message
    passed = explain(_ctx(), _measured(_restores(200), []))  # type: ignore[arg-type]
    assert passed.status == "pass" and "the restarted server reused 200 restored tokens" in passed.message


def test_a_server_that_aborts_after_dropping_the_connection_is_a_crash_with_its_own_last_words() -> None:
    # measured on llama.cpp b11549: the request's connection breaks before the aborting process is seen
    # to exit, so the first error gate sees names no cause; the crash must still carry the assertion
    import subprocess
    import sys

    import pytest

    from gate.adapters.openai.process import died_serving
    from gate.errors import EngineCrashed, SubjectCrash

    server = ServerProcess([], port=9, probe="/health", ready_timeout_s=1, label="candidate")
    said = "print('x.cpp:1: GGML_ASSERT(n <= m) failed', file=sys.stderr, flush=True)"
    script = f"import os, sys, time; time.sleep(0.3); {said}; os.abort()"
    with server.log_path.open("wb") as log:
        server.proc = subprocess.Popen([sys.executable, "-c", script], stdout=log, stderr=subprocess.STDOUT)
    with pytest.raises(SubjectCrash) as raised, died_serving(server, "restore", slot=3):
        raise EngineCrashed("candidate: the connection was reset by the server")
    crash = raised.value
    assert crash.where == {"slot": 3, "exit_status": -6}
    assert "connection was reset" in str(crash.error) and "GGML_ASSERT(n <= m) failed" in str(crash.error)
