"""Against llama.cpp's own server (llama-server, `make engine`): discovery, top-k, cache hits, the two
engine examples end to end, every failure mode's exit code, and no server outliving `gate run`
(Ctrl-C, SIGTERM, even SIGKILL of gate).

Skipped, with the reason, when llama-server is not built (tests/adapters/openai/conftest.py).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gate.adapters.openai import Options
from gate.adapters.openai.path import EnginePath
from gate.errors import (
    EXIT_ENGINE_NEVER_HIT,
    EXIT_ENGINE_NOT_READY,
    EXIT_ENGINE_VOCAB_MISMATCH,
    EngineCrashed,
    EngineNotReady,
    SubjectCrash,
)
from tests.support.repo import REPO

pytestmark = pytest.mark.engine

GATE = str(Path(sys.executable).with_name("gate"))
# flash attention off, as in the examples: on a CPU it rounds K and V through half precision, which moves
# logprobs beyond a float32 tolerance claim (benchmarks/engine_llamacpp.md)
SERVER_ARGS = [
    "--host",
    "127.0.0.1",
    "--port",
    "{port}",
    "-c",
    "2048",
    "-t",
    "1",
    "-tb",
    "1",
    "--no-webui",
    "-fa",
    "off",
]


def llama(*extra: str, **launch: object) -> EnginePath:
    options = Options.model_validate(
        {
            "flavor": "auto",
            "launch": {
                "command": ["llama-server", "-m", "{model}", *SERVER_ARGS, *extra],
                "tiny_model": {"seed": 0, "context_length": 2048},
                "ready_timeout_s": 60,
                **launch,
            },
        }
    )
    return EnginePath.probe(options, dtype="float32", seed=0)


def gate_run(manifest: Path, out: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [GATE, "run", str(manifest), "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )


def children_named(pid: int, name: str) -> list[int]:
    """Processes whose parent is `pid` and whose command is `name`."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)
            comm = fields[0].split("(", 1)[1]
            ppid = int(fields[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid and comm == name:
            found.append(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_discovery_topk_and_hits(engine_env: dict[str, str]) -> None:
    path = llama("-np", "1", "--cache-prompt")
    assert (path.flavor, path.vocab_size, path.max_len) == ("llama.cpp", 512, 2048)
    assert path.identity()["model_sha256"]
    with path.serve() as served:
        prompt = list(range(10, 74))
        first = served.complete(prompt, 8, 5)
        again = served.complete(prompt, 8, 5)
    assert len(first.tokens) == 8 and all(len(t) == 5 for t in first.top)
    # greedy: each token is its position's top-1, and its logprob is the one listed
    for token, logprob, top in zip(first.tokens, first.logprobs, first.top, strict=True):
        assert max(top, key=lambda t: top[t]) == token and top[token] == logprob
    assert first.cached_tokens == 0 and again.cached_tokens == len(prompt) - 1
    assert again.tokens == first.tokens


def test_a_streamed_completion_stamps_every_token(engine_env: dict[str, str]) -> None:
    path = llama("-np", "1", "--cache-prompt")
    with path.serve() as served:
        prompt = list(range(20, 90))
        whole = served.complete(prompt, 8, 5)
        streamed = served.stream(prompt, 8, 5)
    # the streamed request hit the cache the first one filled: same tokens, logprobs within rounding
    assert streamed.completion.tokens == whole.tokens
    assert [set(t) for t in streamed.completion.top] == [set(t) for t in whole.top]
    assert len(streamed.token_s) == 8 and streamed.token_s == sorted(streamed.token_s)
    assert 0 < streamed.token_s[0] <= streamed.completion.seconds
    assert streamed.completion.cached_tokens == len(prompt) - 1  # usage arrives in the last event


def test_examples_give_their_documented_verdicts(engine_env: dict[str, str], tmp_path: Path) -> None:
    passed = gate_run(REPO / "examples/engine-llamacpp-prefix.yaml", tmp_path / "prefix", engine_env)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    record = json.loads((tmp_path / "prefix/results.json").read_text())
    checks = {c["check"]: c for c in record["checks"]}
    parity = checks["engine-prefix-parity"]
    rows = parity["evidence"]["lengths"]
    assert [r["prefix_length"] for r in rows] == [1, 17, 200, 2048, 8179]
    assert all(r["cached_tokens"] == r["prefix_length"] and r["reference_cached_tokens"] == 0 for r in rows)
    for name in ("engine-prefix-parity", "engine-batch-invariance", "engine-invalidation"):
        assert checks[name]["status"] == "pass", checks[name]
        assert checks[name]["controls"] and all(c["outcome"] == "detected" for c in checks[name]["controls"])
    assert {c["fault"] for c in parity["controls"]} == {"kv-quantised", "stale-weights"}
    # servers are shared across checks and controls (their cache reset between them); every start counted
    # with why, in each server's evidence and, once the last control is done, in the run's record. 7 + 4
    # on b11549: 6 launch configurations (reference, candidate, its two controls', the reference and the
    # candidate on changed weights), 2 restarts for the reset llama.cpp cannot do (the host-memory prompt
    # cache: engine-invalidation's candidate and its stale-weights control's server), 2 new processes a
    # check asks for (engine-invalidation's control on changed weights, engine-slot-restore's restarted
    # candidate) and 1 start again after the build aborted on a truncated slot file; none is the cap's
    # (max_servers 3): engine-invalidation runs last and asks the reference on changed weights once
    servers = record["servers"]
    assert servers["checks"] + servers["controls"] <= 11, servers
    assert servers["configurations"] == 6 and servers["why"]["restart: a reset the engine cannot do"] == 2, servers
    assert "started again after the cap (max_servers) stopped it" not in servers["why"], servers
    assert servers["alive_peak"] <= 3
    starts = list(_starts_seen(record))
    assert starts and max(s["checks"] + s["controls"] for s in starts) <= servers["checks"] + servers["controls"]
    assert max(server.get("engine_servers_alive_peak", 0) for server in _servers(record)) <= 3
    assert any(server.get("reused_from_earlier_check") for server in _servers(record))
    # every reply of the concurrent multi-tenant workload against the reference alone; llama.cpp's batched
    # float32 passes may move logprobs past the tolerance (a warning), never the greedy tokens
    conversations = checks["engine-concurrent-conversations"]
    assert conversations["status"] in ("pass", "warn"), conversations["message"]
    assert not conversations["evidence"]["failures"] and conversations["evidence"]["rounds_overlapping"] > 0
    assert [c["outcome"] for c in conversations["controls"]] == ["detected"]
    # the handed-over candidate's reset could not reach llama.cpp's host-memory prompt cache: named, not hidden
    assert any("host-memory prompt cache" in t for t in conversations["evidence"]["cache_tiers_not_reset"])
    # the erase cannot reach the host-memory prompt cache, so the check restarts the candidate (handed over
    # to later checks) and judges: nothing reused after the restart, the output the reference's
    reset, message = checks["engine-invalidation"]["evidence"]["reset"], checks["engine-invalidation"]["message"]
    assert reset["restarted"] is True and reset["complete"] is True and reset["reused_after_restart"] == 0
    assert any("host-memory prompt cache" in t for t in reset["tiers_not_reset"])
    assert "cannot reach llama.cpp's host-memory prompt cache" in message and "gate restarted the server" in message
    assert "after a restart on changed weights nothing stale was reused" in message
    assert any(server.get("restarted_in_check") == 1 for server in _servers(checks["engine-invalidation"]))
    # no cache salt on llama.cpp: no per-tenant cache to judge, not applicable (no warning)
    isolation = checks["engine-isolation"]
    assert isolation["status"] == "not-applicable" and "no cache salt" in isolation["message"], isolation
    assert "1 not applicable (engine-isolation)" in record["summary"] and "unproven" not in record["summary"]
    # serving clocks streamed from both servers: the candidate reused prompt tokens, the reference none
    performance = checks["phase-performance"]
    assert performance["status"] in ("pass", "warn"), performance["message"]
    assert performance["exercise"]["streamed_requests"] > 0 and performance["exercise"]["cached_prompt_tokens"] > 0
    assert performance["exercise"]["reference_cached_prompt_tokens"] == 0
    clocks = {row["clock"]: row for row in performance["evidence"]["clocks"]}
    assert {"ratio", "low", "high"} <= set(clocks["ttft_p95"]) and clocks["live_bytes"]["verdict"] == "not reported"
    assert performance["evidence"]["timer"] == "wall"
    # slot save/restore: the restores match; b11549 aborts on a file 1 byte short (a finding: amber)
    slots = checks["engine-slot-restore"]
    assert all(r["tokens_match"] for r in slots["evidence"]["restores"]), slots["message"]
    if record["subjects"]["candidate"].get("build_info", "").startswith("b11549-"):
        assert slots["status"] == "warn" and slots["diagnosis"]["bug_class"] == "crash", slots["message"]

    failed = gate_run(REPO / "examples/engine-llamacpp-quantised-kv.yaml", tmp_path / "q8", engine_env)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    record = json.loads((tmp_path / "q8/results.json").read_text())
    parity = next(c for c in record["checks"] if c["check"] == "engine-prefix-parity")
    assert parity["status"] == "fail"
    for length in (1, 17, 200, 2048, 8179):
        assert f"length {length}: not bit-identical" in parity["message"]


def test_a_control_below_the_checks_power_is_unobservable(engine_env: dict[str, str], tmp_path: Path) -> None:
    """On a sliding-window model llama.cpp's --cache-reuse moves the hosted check's replies by about 1e-4,
    inside what the check accepts of a correct reply: a correct server is amber (no control could show
    anything), never failed for a lack of power."""
    manifest = (REPO / "examples/engine-llamacpp-hosted.yaml").read_text()
    swa = "tiny_model: {seed: 0, sliding_window: 64, sliding_layers: [0]}"
    path = tmp_path / "hosted-swa.yaml"
    path.write_text(manifest.replace("tiny_model: {seed: 0}", swa))
    run = gate_run(path, tmp_path / "out", engine_env)
    assert run.returncode == 0, run.stdout + run.stderr
    [check] = json.loads((tmp_path / "out/results.json").read_text())["checks"]
    [control] = check["controls"]
    assert check["status"] == "unproven" and control["outcome"] == "unobservable", control["message"]
    assert "within what the check accepts of a correct path" in control["message"]


def test_the_hosted_mode_detects_chunk_reuse_and_is_amber_without_a_control(
    engine_env: dict[str, str], tmp_path: Path
) -> None:
    run = gate_run(REPO / "examples/engine-llamacpp-hosted.yaml", tmp_path / "launched", engine_env)
    assert run.returncode == 0, run.stdout + run.stderr
    [check] = json.loads((tmp_path / "launched/results.json").read_text())["checks"]
    assert check["status"] == "pass" and check["exercise"]["cache_read_repeats"] == 9
    assert all(row["cold_cached_tokens"] == 0 for row in check["evidence"]["prompts"])
    [control] = check["controls"]
    assert control["fault"] == "cache-divergence" and control["outcome"] == "detected"  # llama.cpp --cache-reuse

    # the same deployment reached by base_url, as a hosted API is: no control can run, so amber (unproven,
    # a warning by policy), never green
    served_by = llama()  # llama.cpp's default serving configuration
    with served_by.serve() as served:
        manifest = yaml.safe_load((REPO / "examples/engine-llamacpp-hosted.yaml").read_text())
        side = {"adapter": "openai", "options": {"flavor": "llama.cpp", "base_url": served.client.base_url}}
        manifest["subject"] = {"reference": side, "candidate": side, "seed": 0}
        path = tmp_path / "hosted.yaml"
        path.write_text(yaml.safe_dump(manifest, sort_keys=False))
        hosted = gate_run(path, tmp_path / "hosted", engine_env)
    assert hosted.returncode == 0, hosted.stdout + hosted.stderr
    record = json.loads((tmp_path / "hosted/results.json").read_text())
    [check] = record["checks"]
    assert check["status"] == "unproven" and check["unproven"] == "warn", check["message"]
    assert "unproven" in record["summary"]


def _servers(node: object) -> Iterator[dict[str, Any]]:
    """Every server's evidence in a record."""
    if isinstance(node, dict):
        if "engine_starts_in_run" in node:
            yield node
        for value in node.values():
            yield from _servers(value)
    elif isinstance(node, list):
        for value in node:
            yield from _servers(value)


def _starts_seen(record: dict[str, Any]) -> Iterator[dict[str, int]]:
    for server in _servers(record):
        yield server["engine_starts_in_run"]


def _manifest(tmp_path: Path, candidate_model: dict[str, object], candidate_args: tuple[str, ...] = ()) -> Path:
    """A small engine manifest (one prefix length) whose candidate loads `candidate_model`."""

    def side(extra: list[str], model: dict[str, object]) -> dict[str, object]:
        command = ["llama-server", "-m", "{model}", *SERVER_ARGS, *extra]
        return {"adapter": "openai", "options": {"flavor": "llama.cpp", "launch": {"command": command, **model}}}

    tiny = {"tiny_model": {"seed": 0, "context_length": 2048}}
    manifest = {
        "apiVersion": "gate/v1",
        "name": "engine-failure",
        "intervention": "engine-serving",
        "claim": {"level": "tolerance"},
        "identity": ["token-ids", "model-revision", "kv-dtype"],
        "subject": {
            "reference": side(["--no-cache-prompt"], tiny),
            "candidate": side(list(candidate_args), candidate_model),
        },
        "checks": {"engine-prefix-parity": {"params": {"lengths": [17]}}},
    }
    path = tmp_path / "manifest.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    return path


def test_a_cache_that_never_hits_is_an_error_not_a_pass(engine_env: dict[str, str], tmp_path: Path) -> None:
    tiny = {"tiny_model": {"seed": 0, "context_length": 2048}}
    manifest = _manifest(tmp_path, tiny, ("--no-cache-prompt",))  # the "cached" candidate has its cache off
    run = gate_run(manifest, tmp_path / "out", engine_env)
    assert run.returncode == EXIT_ENGINE_NEVER_HIT, run.stdout + run.stderr
    record = json.loads((tmp_path / "out/results.json").read_text())
    parity = next(c for c in record["checks"] if c["check"] == "engine-prefix-parity")
    assert parity["status"] == "error" and "the cache never hit" in parity["message"]


def test_without_declared_controls_the_checks_are_unproven_never_green(
    engine_env: dict[str, str], tmp_path: Path
) -> None:
    tiny = {"tiny_model": {"seed": 0, "context_length": 2048}}
    path = _manifest(tmp_path, tiny, ("-np", "4", "--slot-save-path", "{workdir}"))
    # this test is about controls: the aimed workload stays out of it. On this full-attention model over 4
    # unified slots its pooled conversation restored from the host cache (55 of 68 tokens) moves logprobs by
    # 2e-3 with equal tokens (llama.cpp's f16 KV written under other batch shapes), past twice the float32
    # tolerance until judge() takes the measured noise floor (issue 45); test_llamacpp_tiers.py aims at it
    manifest = yaml.safe_load(path.read_text())
    manifest["checks"]["engine-concurrent-conversations"] = {"params": {"aim": False}}
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    run = gate_run(path, tmp_path / "o", engine_env)
    record = json.loads((tmp_path / "o/results.json").read_text())
    assert run.returncode == 6 and record["verdict"] == "unproven", run.stdout
    checks = {c["check"]: c for c in record["checks"]}
    for name in (
        "engine-prefix-parity",
        "engine-batch-invariance",
        "engine-concurrent-conversations",
        "engine-invalidation",
    ):
        assert checks[name]["status"] == "unproven", checks[name]["message"]
        assert {c["outcome"] for c in checks[name]["controls"]} == {"unsupported"}


def test_a_vocabulary_mismatch_exits_15(engine_env: dict[str, str], tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, {"tiny_model": {"seed": 0, "context_length": 2048, "vocab_size": 600}})
    run = gate_run(manifest, tmp_path / "out", engine_env)
    assert run.returncode == EXIT_ENGINE_VOCAB_MISMATCH, run.stdout + run.stderr
    assert "vocabulary of 512 tokens and the candidate 600" in run.stdout + run.stderr


def test_a_server_that_cannot_load_its_model_exits_10_quoting_its_log(
    engine_env: dict[str, str], tmp_path: Path
) -> None:
    with pytest.raises(EngineNotReady, match=r"exited with status 1 before it was ready.*nowhere\.gguf"):
        llama(model_file="/nowhere.gguf", tiny_model=None)
    manifest = _manifest(tmp_path, {"model_file": "/nowhere.gguf"})
    run = gate_run(manifest, tmp_path / "out", engine_env)
    assert run.returncode == EXIT_ENGINE_NOT_READY, run.stdout + run.stderr
    assert "nowhere.gguf" in run.stderr and "Traceback" not in run.stderr


def test_a_server_killed_mid_request_is_a_crash_of_the_subject(engine_env: dict[str, str]) -> None:
    path = llama("-np", "1")
    with path.serve() as served:
        assert served.server is not None and served.server.proc is not None
        served.complete([10, 11, 12], 2, 3)
        os.kill(served.server.proc.pid, signal.SIGKILL)
        with pytest.raises(SubjectCrash) as caught:
            served.complete([10, 11, 12], 2, 3)
    assert isinstance(caught.value.error, EngineCrashed)
    assert re.search(r"exited with status -9 during the run", str(caught.value.error))
    assert caught.value.where == {"length": 3, "new_tokens": 2, "exit_status": -9}


def _port(pid: int) -> int:
    args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    return int(args[args.index(b"--port") + 1])


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


def test_a_llama_server_killed_mid_check_fails_the_check_with_class_crash(
    engine_env: dict[str, str], tmp_path: Path
) -> None:
    """gate run of the shipped example; once the check has both servers up and answering, the
    candidate's llama-server is killed: the check fails with class crash (exit 1), not exit 12."""
    gate = subprocess.Popen(
        [
            GATE,
            "run",
            "examples/engine-llamacpp-prefix.yaml",
            "--out",
            str(tmp_path),
            "--check",
            "engine-prefix-parity",
        ],
        cwd=REPO,
        env=engine_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    killed = None
    deadline = time.monotonic() + 120
    while killed is None and time.monotonic() < deadline and gate.poll() is None:
        servers = children_named(gate.pid, "llama-server")
        # the probes start one server at a time; two at once are the check's pair
        if len(servers) == 2:
            cached = [p for p in servers if b"--cache-prompt" in Path(f"/proc/{p}/cmdline").read_bytes()]
            if cached and all(_ready(_port(p)) for p in servers):
                time.sleep(1.0)  # gate's own readiness poll (every 0.1 s) has seen it too: the requests began
                os.kill(cached[0], signal.SIGKILL)
                killed = cached[0]
        time.sleep(0.05)
    _, stderr = gate.communicate(timeout=120)
    assert killed is not None, f"the check never had both servers up: {stderr}"
    assert gate.returncode == 1, stderr
    record = json.loads((tmp_path / "results.json").read_text())
    parity = next(c for c in record["checks"] if c["check"] == "engine-prefix-parity")
    assert parity["status"] == "fail" and parity["diagnosis"]["bug_class"] == "crash", parity["message"]
    assert parity["diagnosis"]["call"] == "POST /v1/completions" and parity["diagnosis"]["exit_status"] == -9
    assert not alive(killed) and not children_named(gate.pid, "llama-server")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["ctrl-c", "sigterm", "sigkill"])
def test_no_server_outlives_gate_run(engine_env: dict[str, str], tmp_path: Path, sig: signal.Signals) -> None:
    gate = subprocess.Popen(
        [GATE, "run", "examples/engine-llamacpp-prefix.yaml", "--out", str(tmp_path)],
        cwd=REPO,
        env=engine_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        # Ctrl-C reaching a run in the foreground: a CI script's background job (`cmd &`) has SIGINT
        # ignored, and Python keeps an ignored SIGINT ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    servers: list[int] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(servers) < 2:  # both servers of a check are up
        servers = children_named(gate.pid, "llama-server")
        time.sleep(0.05)
    assert servers, "gate never started a llama-server"
    time.sleep(0.5)  # inside the check, requests in flight
    gate.send_signal(sig)
    gate.wait(timeout=60)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(alive(p) for p in servers):
        time.sleep(0.1)
    assert not [p for p in servers if alive(p)], f"servers outlived gate ({sig.name})"


def test_streamed_serving_clocks_can_fail_a_budget(engine_env: dict[str, str], tmp_path: Path) -> None:
    manifest = yaml.safe_load((REPO / "examples/engine-llamacpp-prefix.yaml").read_text())
    manifest["performance"] = {"throughput": {"min_ratio": 1000.0}}  # no cache makes serving 1000x faster
    path = tmp_path / "budget.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    run = subprocess.run(
        [GATE, "run", str(path), "--out", str(tmp_path / "out"), "--check", "phase-performance"],
        capture_output=True,
        text=True,
        env=engine_env,
        cwd=REPO,
        timeout=300,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    [check] = [c for c in json.loads((tmp_path / "out/results.json").read_text())["checks"] if c["status"] != "skip"]
    assert check["status"] == "fail" and "over budget: throughput" in check["message"], check["message"]
    assert check["exercise"]["streamed_requests"] > 0
