"""Against llama.cpp's own server: engine-concurrent-conversations' aimed workload (gate.checks._mechanisms)
reaches each reuse mechanism of a sliding-window model, counted from the engine's own counters (each
reply's `timings.cache_n`, the server's log at -lv 4), and llama.cpp at its defaults (several slots
over a unified KV) fails on the path the aimed requests name.

The model is examples/engine-llamacpp-sliding-window.yaml's gemma2 (a 64-token window on layer 0).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.adapters.openai.test_llamacpp_tiers import subprocess_run
from tests.support.repo import REPO

pytestmark = pytest.mark.engine
SPLIT = REPO / "examples/engine-llamacpp-sliding-window.yaml"  # one KV buffer per slot
DEFAULTS = REPO / "examples/engine-llamacpp-sliding-window-defaults.yaml"  # -np auto over a unified KV


def _run(tmp_path: Path, env: dict[str, str], example: Path) -> tuple[dict[str, Any], str]:
    done = subprocess_run(example, tmp_path / "out", env)
    record = json.loads((tmp_path / "out/results.json").read_text())
    check = next(c for c in record["checks"] if c["check"] == "engine-concurrent-conversations")
    return check, done.stdout + done.stderr


def test_the_aimed_workload_reaches_every_mechanism_by_the_engines_counters(
    engine_env: dict[str, str], tmp_path: Path
) -> None:
    """One KV buffer per slot (--no-kv-unified): every reply within the claim, and each mechanism the
    geometry names reached: window-edge shares restored from checkpoints, long prompts in flight
    together, pooled conversations loaded back from the host cache, edited turns reusing a cut prefix."""
    check, run = _run(tmp_path, engine_env, SPLIT)
    assert check["status"] in ("pass", "warn"), check["message"] + run
    evidence = check["evidence"]
    mechanisms = {m["mechanism"]: m for m in evidence["mechanisms"]}
    for name in ("window-edge", "swa-cache-wrap", "host-cache-restore", "edited-turn"):
        assert mechanisms[name]["aimed"] and mechanisms[name]["reached"], (name, mechanisms[name])
    # llama.cpp's default checkpoint spacing (8192) is past the context's room: listed, with why
    assert not mechanisms["checkpoint-interval"]["aimed"] and "8192" in mechanisms["checkpoint-interval"]["evidence"]
    counters = evidence["engine_log_counters"]
    assert counters["checkpoint_restores"] > 0 and counters["host_cache_loads"] > 0, counters
    requests = evidence["requests"]
    edges = [r for r in requests if r.get("aim") == "window-edge"]
    assert sorted(r["aimed_at"] for r in edges) == [64, 65, 66, 68]
    assert all(r["cached_tokens"] >= r["aimed_at"] - 1 for r in edges), edges  # served past the window
    wraps = [r for r in requests if r.get("aim") == "swa-cache-wrap"]
    assert wraps and min(r["prompt_tokens"] for r in wraps) > 64 + 512
    assert len([r for r in requests if r.get("aim") is None]) == evidence["conversations"] * evidence["turns"]
    assert "mechanisms reached: window-edge, swa-cache-wrap, host-cache-restore, edited-turn" in check["message"]


def test_llamacpp_at_its_defaults_fails_on_the_path_the_aimed_requests_name(
    engine_env: dict[str, str], tmp_path: Path
) -> None:
    """Four slots over one unified KV (llama.cpp's default with -np auto): prompts past the
    sliding-window cache's room per slot (window + micro-batch) in flight together get replies that
    differ from the same prompt alone (a live bug on every xllamacpp build b8929 to b11549,
    docs/real-bugs.md); the failure names the path."""
    check, run = _run(tmp_path, engine_env, DEFAULTS)
    assert check["status"] == "fail", check["message"] + run
    failed = [r for r in check["evidence"]["requests"] if r["failed"]]
    assert any(r.get("aim") == "swa-cache-wrap" for r in failed), failed
    assert "[swa-cache-wrap]" in check["message"] and "past window + micro-batch (576)" in check["message"]
    assert check["diagnosis"]["bug_class"] == "continuous-batching"
