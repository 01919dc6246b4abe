"""Against llama.cpp's own server (`make engine`): which cache tiers gate's reset reaches, and the
concurrent-conversation check on llama.cpp in its default serving configuration.

llama.cpp's `POST /slots/N?action=erase` clears a slot's KV; its host-memory prompt cache
(`--cache-ram`, on by default) keeps what idle slots saved there, and no endpoint clears it, so
gate names that tier as not reset instead of claiming a complete reset.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from gate.adapters.openai.path import EnginePath
from tests.adapters.openai.test_llamacpp import GATE, llama
from tests.support.repo import REPO

pytestmark = pytest.mark.engine


def _erase_then_repeat(path: EnginePath) -> tuple[int | None, int | None, list[str]]:
    """A prompt, then another (the first one's idle slot goes to the RAM cache), every slot erased,
    then the first prompt again: (its hit before the erase, its reuse after it, the tiers not reset)."""
    first = [5 + (i * 7) % 500 for i in range(200)]
    other = [5 + (i * 11 + 3) % 500 for i in range(200)]
    with path.serve(label="tiers") as served:
        served.complete(first, 4, 1)
        before = served.complete(first, 4, 1).cached_tokens
        served.complete(other, 4, 1)
        assert served.reset_cache() is not None
        after = served.complete(first, 4, 1).cached_tokens
        return before, after, served.unreset_tiers()


def test_slot_erase_leaves_the_ram_prompt_cache_and_gate_names_that_tier(engine_env: dict[str, str]) -> None:
    default = llama("-np", "2", "--kv-unified", "--slot-save-path", "{workdir}")
    before, after, tiers = _erase_then_repeat(default)
    assert before and before >= 190
    # restored from the host-memory prompt cache the erase did not reach
    assert after and after >= 190, after
    assert len(tiers) == 1 and "host-memory prompt cache" in tiers[0] and "no endpoint clears" in tiers[0]


def test_with_the_ram_cache_off_the_erase_reaches_every_tier(engine_env: dict[str, str]) -> None:
    off = llama("-np", "2", "--kv-unified", "--cache-ram", "0", "--slot-save-path", "{workdir}")
    before, after, tiers = _erase_then_repeat(off)
    assert before and before >= 190
    assert after == 0 and tiers == []


def _default_config_manifest(tmp_path: Path, candidate_extra: list[str], controls: dict[str, object]) -> Path:
    base = yaml.safe_load((REPO / "examples/engine-llamacpp-prefix.yaml").read_text())
    base["name"] = "concurrent-conversations"
    cand = base["subject"]["candidate"]["options"]
    # llama.cpp as `llama-server -m model` serves: its default slots, unified KV, RAM and idle-slot caching
    cand["launch"]["command"] = [
        "llama-server",
        "-m",
        "{model}",
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
        "-c",
        "8192",
        "-t",
        "1",
        "-tb",
        "1",
        "--no-webui",
        "--slot-save-path",
        "{workdir}",
        "-fa",
        "off",
        *candidate_extra,
    ]
    cand["controls"] = controls
    # llama.cpp's reuse numerics: a pooled conversation restored from a cache tier (55 of 68 tokens reused)
    # differs from the reference's single pass by about 2e-3 with equal greedy tokens under load (1.8e-4
    # with nothing else in flight), past twice the float32 default; bounded as the sliding-window example
    # bounds it until judge() takes the measured noise floor (issue 45)
    base["claim"] = {"level": "tolerance", "atol": 0.005}
    path = tmp_path / "manifest.yaml"
    path.write_text(yaml.safe_dump(base, sort_keys=False))
    return path


def test_every_concurrent_reply_matches_the_reference_and_perturbed_weights_are_named(
    engine_env: dict[str, str], tmp_path: Path
) -> None:
    controls = {"stale-weights": {"tiny_model": {"seed": 0, "perturb_seed": 1}}}
    manifest = _default_config_manifest(tmp_path, [], controls)
    done = subprocess_run(manifest, tmp_path / "out", engine_env)
    run = done.stdout + done.stderr
    record = json.loads((tmp_path / "out/results.json").read_text())
    check = next(c for c in record["checks"] if c["check"] == "engine-concurrent-conversations")
    assert check["status"] in ("pass", "warn"), check["message"] + run
    evidence = check["evidence"]
    assert evidence["candidate_slots"] and evidence["candidate_slots"] > 1
    assert not evidence["failures"] and all(not r["failed"] for r in evidence["requests"])
    seeded = [r for r in evidence["requests"] if r.get("aim") is None]
    assert len(seeded) == evidence["conversations"] * evidence["turns"]
    # before them, requests aimed at llama.cpp's reuse mechanisms: on this full-attention model the pooled
    # conversations come back from a cache tier and edited turns reuse the prefix they keep
    reached = {m["mechanism"] for m in evidence["mechanisms"] if m["reached"]}
    assert {"host-cache-restore", "edited-turn"} <= reached, evidence["mechanisms"]
    assert evidence["rounds_overlapping"] > 0
    kinds = {r["kind"] for r in evidence["requests"]}
    assert {"fresh", "resumed after others"} <= kinds
    # the shared system prefixes hit, and private conversations resumed after others are served from a cache tier
    prefix = evidence["system_prefix"]
    assert any(r["kind"] == "fresh" and (r["cached_tokens"] or 0) >= prefix for r in evidence["requests"])
    assert any(r["tenant"] == -1 and r["turn"] > 0 and r["cached_tokens"] for r in evidence["requests"])
    [control] = check["controls"]
    assert control["fault"] == "stale-weights" and control["outcome"] == "detected"
    # blame from evidence: each failing reply asked again alone off the cache still differs, so the cause
    # is the configuration (here other weights), never another conversation's state
    assert "request 0 (conversation" in control["message"]
    assert "asked again alone off the cache it still differs from the reference" in control["message"]


def subprocess_run(
    manifest: Path, out: Path, env: dict[str, str], check: str = "engine-concurrent-conversations"
) -> subprocess.CompletedProcess[str]:
    """`gate run --check CHECK` (a partial run: exit 5, or 1 when it fails)."""
    return subprocess.run(
        [GATE, "run", str(manifest), "--out", str(out), "--check", check],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=600,
        check=False,
    )


def test_phase_performance_judges_the_replies_it_timed(engine_env: dict[str, str], tmp_path: Path) -> None:
    """Timing and correctness from one run: the last repeat's replies against the reference alone; a
    candidate on other weights fails on its replies, whatever its clocks say."""
    manifest = yaml.safe_load((REPO / "examples/engine-llamacpp-prefix.yaml").read_text())
    manifest["subject"]["candidate"]["options"]["launch"]["tiny_model"] = {"seed": 0, "perturb_seed": 1}
    path = tmp_path / "stale.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    done = subprocess_run(path, tmp_path / "out", engine_env, "phase-performance")
    assert done.returncode == 1, done.stdout + done.stderr
    [check] = [c for c in json.loads((tmp_path / "out/results.json").read_text())["checks"] if c["status"] != "skip"]
    correctness = check["evidence"]["correctness"]
    assert check["status"] == "fail" and correctness["compared"] > 0 and correctness["failed"] > 0
    assert "wrong answers (the last repeat's" in check["message"]
    assert check["exercise"]["replies_judged"] == correctness["compared"]


def test_invalidation_restarts_the_server_only_where_the_erase_leaves_a_tier(
    engine_env: dict[str, str], tmp_path: Path
) -> None:
    """engine-invalidation on llama.cpp's default serving (host-memory prompt cache on): the erase cannot
    reach that tier, so the check restarts the candidate and judges; with `--cache-ram 0` the erase
    reaches every tier and no restart runs."""
    controls = {"stale-weights": {"tiny_model": {"seed": 0, "perturb_seed": 1}}}
    for name, extra, restarted in (("default", [], True), ("ram-off", ["--cache-ram", "0"], False)):
        (tmp_path / name).mkdir()
        manifest = _default_config_manifest(tmp_path / name, extra, controls)
        done = subprocess_run(manifest, tmp_path / name / "out", engine_env, check="engine-invalidation")
        record = json.loads((tmp_path / name / "out/results.json").read_text())
        [check] = [c for c in record["checks"] if c["check"] == "engine-invalidation"]
        assert check["status"] == "pass", check["message"] + done.stdout + done.stderr
        reset = check["evidence"]["reset"]
        assert reset["restarted"] is restarted and reset["complete"] is True, reset
        assert reset["hit_before_reset"], reset
        assert reset["reused_after_restart" if restarted else "reused_after_reset"] == 0, reset
        assert ("gate restarted the server" in check["message"]) is restarted, check["message"]
        assert [c["outcome"] for c in check["controls"]] == ["detected"]
