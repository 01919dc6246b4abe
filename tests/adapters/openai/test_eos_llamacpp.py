"""Against llama.cpp's own server: engine-concurrent-conversations' end-of-sequence requests (gate.checks._eos).

The reference picks, from 64 seeded conversation openings, those it ends at end-of-sequence within 64
tokens (on examples/engine-llamacpp-prefix.yaml's seed-0 Llama, 3 of 64 on b8672, b8929 and b11549 alike);
the candidate gets them with its stop on and must stop at the same token, then each is continued after
its end. A candidate that stops elsewhere fails naming the request and the token (tests/checks/test_eos_stop.py,
against an in-process engine pair: no llama.cpp build found here stops elsewhere than its reference).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.adapters.openai.test_llamacpp_tiers import GATE, subprocess_run
from tests.support.repo import REPO

pytestmark = pytest.mark.engine
PREFIX = REPO / "examples/engine-llamacpp-prefix.yaml"


def _run(tmp_path: Path, env: dict[str, str], manifest: Path) -> tuple[dict[str, Any], str]:
    done = subprocess_run(manifest, tmp_path / "out", env)
    record = json.loads((tmp_path / "out/results.json").read_text())
    check = next(c for c in record["checks"] if c["check"] == "engine-concurrent-conversations")
    return check, done.stdout + done.stderr


def _eos(check: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    reach = next(m for m in check["evidence"]["mechanisms"] if m["mechanism"] == "eos-stop")
    return reach, [r for r in check["evidence"]["requests"] if r.get("aim") == "eos-stop"]


def test_replies_that_end_at_eos_end_there_on_the_candidate_and_are_continued(
    engine_env: dict[str, str], tmp_path: Path
) -> None:
    check, run = _run(tmp_path, engine_env, PREFIX)
    assert check["status"] in ("pass", "warn"), check["message"] + run
    reach, rows = _eos(check)
    assert reach["aimed"] and reach["reached"], reach
    assert "of 64 seeded prompts stopped at end-of-sequence within 64 tokens on the reference" in reach["evidence"]
    opened = [r for r in rows if r.get("eos")]
    assert opened and all(r["aimed_at"] < 64 and r["tokens_match"] and not r["failed"] for r in opened), opened
    # a tenant's system prefix served from the cache (llama.cpp picks the slot: one sent beside others may miss it)
    assert any(r["cached_tokens"] >= 256 for r in opened), opened
    by_conversation = {r["conversation"]: r for r in opened}
    continued = [r for r in rows if not r.get("eos")]
    assert len(continued) == len(opened)
    past = [r for r in continued if r["cached_tokens"] > by_conversation[r["conversation"]]["prompt_tokens"]]
    assert past and not any(r["failed"] for r in continued), continued  # the history through the stop, reused
    assert "eos-stop" in check["message"].split("mechanisms reached: ")[1].split(";")[0]


def _prefix_parity(tmp_path: Path, env: dict[str, str], manifest: Path) -> tuple[dict[str, Any], str]:
    """`gate run --check engine-prefix-parity` with its end-of-sequence requests on (off by default)."""
    out = tmp_path / "out"
    command = [GATE, "run", str(manifest), "--out", str(out), "--check", "engine-prefix-parity"]
    command += ["--param", "engine-prefix-parity.eos_candidates=64"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO, timeout=600, check=False)
    record = json.loads((out / "results.json").read_text())
    check = next(c for c in record["checks"] if c["check"] == "engine-prefix-parity")
    return check, done.stdout + done.stderr


def test_prefix_parity_sends_prompts_that_end_at_eos_twice_and_the_cached_one_stops_alike(
    engine_env: dict[str, str], tmp_path: Path
) -> None:
    check, run = _prefix_parity(tmp_path, engine_env, PREFIX)
    assert check["status"] == "pass", check["message"] + run
    eos = check["evidence"]["eos_stop"]
    assert eos["reached"] and "seeded prompts stopped at end-of-sequence within 64 tokens" in eos["words"]
    again = [r for r in eos["requests"] if r["request"] == "again"]
    assert again and all(r["cached_tokens"] == 63 for r in again), again  # the whole prompt but one, from the cache
    stopped = [r["candidate_tokens"] == r["reference_tokens"] < 64 for r in eos["requests"]]
    assert all(stopped) and all(r["finish_reason"] == "stop" for r in eos["requests"])
    assert not any(r["failed"] or r["stop"] for r in eos["requests"])
    assert "asked twice (then cached)" in check["message"]


def test_with_ngram_drafts_the_repeated_prompt_is_drafted_and_its_logprobs_left_out(
    engine_env: dict[str, str], tmp_path: Path
) -> None:
    """A live bug the repeat reaches (docs/real-bugs.md): with --spec-type ngram-mod the prompt asked again
    is drafted from the earlier reply, and the drafted tokens come back with logprob 0 and no top-k; the
    tokens and the stop are the reference's."""
    check, run = _prefix_parity(tmp_path, engine_env, REPO / "examples/engine-llamacpp-speculative.yaml")
    assert check["status"] == "fail", check["message"] + run
    assert check["diagnosis"]["bug_class"] == "unreported-logprobs"
    rows = check["evidence"]["eos_stop"]["requests"]
    failed = [r for r in rows if r["failed"]]
    assert failed and all(r["request"] == "again" and r["tokens_match"] and not r["stop"] for r in failed), rows
    assert not any(r["failed"] for r in rows if r["request"] == "first")
    assert not [p for p in check["diagnosis"]["problems"] if p.startswith("length ")]  # the prefix lengths hold
    assert "end-of-sequence prompt" in check["message"] and "(asked again, 63 cached tokens)" in check["message"]


def _on_build(version: str, env: dict[str, str]) -> dict[str, str]:
    """`env` with an installed xllamacpp build's llama-server first on PATH (skipped where it is not installed)."""
    bin_dir = REPO / ".cache/engine-builds" / version / "bin"
    if not (bin_dir / "llama-server").is_file():
        pytest.skip(f"llama.cpp build {version} is not installed in .cache/engine-builds (benchmarks/engine_builds.py)")
    return {**env, "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}"}


def test_b8672s_ignore_eos_bug_leaves_the_requests_that_keep_their_stop_as_on_b11549(
    engine_env: dict[str, str], tmp_path: Path
) -> None:
    """b8672 ignores `ignore_eos: true` (docs/real-bugs.md, upstream PR #21203, fixed by b8929); a request that
    leaves the stop on is served as on the fixed builds: the same openings end after the same tokens, and the
    candidate stops where the reference does (no false alarm either way)."""
    stops = {}
    for version in ("2026.4.8672.1", "2026.10.11549"):
        check, run = _run(tmp_path / version, _on_build(version, engine_env), PREFIX)
        assert check["status"] in ("pass", "warn"), check["message"] + run
        served = (tmp_path / version / "out/results.json").read_text()
        assert f'"engine_version": "b{version.split(".")[2]}' in served, version  # that build answered
        reach, rows = _eos(check)
        assert reach["reached"] and not any(r["failed"] for r in rows), rows
        stops[version] = [r["aimed_at"] for r in rows if r.get("eos")]
    assert stops["2026.4.8672.1"] == stops["2026.10.11549"] and stops["2026.10.11549"], stops
