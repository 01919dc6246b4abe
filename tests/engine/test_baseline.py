"""Baselines (gate.adapters.recorded.store): `gate record` stores the reference's answers, the `recorded`
adapter replays them with the same verdict as the live reference, a question the recording lacks
is a named error, the same store serves as a reference cache, and the attestation signs the baseline.
The two-environment version (another venv, another checkout) is .ci/baseline-two-envs.sh."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from gate.cli.main import cli
from gate.trust.keys import generate_keypair

MANIFEST = Path(__file__).parent / "tinylm" / "kv-cache.yaml"


def gate(*args: str | Path) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args])


def results(out: Path) -> dict[str, Any]:
    return json.loads((out / "results.json").read_text())  # type: ignore[no-any-return]


def replay_manifest(tmp: Path, baseline: Path, seed: int = 0) -> Path:
    text = MANIFEST.read_text().replace(
        "  reference:\n    adapter: tinylm\n    options: {engine: recompute}",
        f"  reference:\n    adapter: recorded\n    options: {{baseline: {baseline}}}",
    )
    path = tmp / f"replay-{seed}.yaml"
    path.write_text(text.replace("seed: 0", f"seed: {seed}"))
    return path


MAIN = "c0ffee00" * 5


def signer(tmp: Path) -> tuple[Path, Path]:
    """The run key and a trust policy naming it the run signer (a replay checks the baseline's signature)."""
    key, pub, _ = generate_keypair(tmp / "keys" / "gate")
    trust = tmp / "trust.yaml"
    trust.write_text(f"apiVersion: gate/trust/v1\npeople:\n  ci: {{keys: [{pub}]}}\nrun-signers: [ci]\n")
    return key, trust


def test_record_then_replay_gives_the_live_verdict_and_names_what_is_missing(tmp_path: Path, monkeypatch: Any) -> None:
    key, trust = signer(tmp_path)
    monkeypatch.setenv("GATE_COMMIT", MAIN)
    monkeypatch.setenv("GATE_TRUST", str(trust))
    monkeypatch.setenv("GATE_BASELINE_COMMIT", MAIN[:12])
    recorded = gate("record", MANIFEST, "--out", tmp_path / "baseline", "--sign-key", key)
    assert recorded.exit_code == 0, recorded.output
    assert f"for commit {MAIN}, signed" in recorded.output
    header = json.loads((tmp_path / "baseline" / "baseline.json").read_text())
    assert header["format"] == "gate/baseline/v1" and header["adapter"] == "tinylm" and header["entries"]
    for entry in header["entries"].values():
        assert (tmp_path / "baseline" / "objects" / f"{entry['sha256']}.npy").is_file()
    assert header["commit"] == MAIN and header["signature"]["keyid"]
    import torch

    assert header["torch_threads"] == torch.get_num_threads()  # a replay computes with as many
    live = gate("run", MANIFEST, "--out", tmp_path / "live")
    replay = gate(
        "run", replay_manifest(tmp_path, tmp_path / "baseline"), "--out", tmp_path / "replay", "--sign-key", key
    )
    # tinylm offers no attention probe: mask-oracle is unproven-not-applicable (a warning), so the live run
    # passes; so does the replay, which times the live reference the baseline names for step 6
    assert live.exit_code == 0, live.output
    assert replay.exit_code == 0, replay.output
    a, b = results(tmp_path / "live"), results(tmp_path / "replay")

    # the whole verdict: every check, phase-performance included; stored answers have no clock, so the
    # replay times the live reference the baseline names, side by side with the candidate (without a
    # budget, timing noise can only move it between pass and warn)
    def statuses(record: dict[str, Any]) -> list[tuple[str, str]]:
        timed = {"pass": "ran", "warn": "ran"}
        return [
            (c["check"], timed.get(c["status"], c["status"]) if c["check"] == "phase-performance" else c["status"])
            for c in record["checks"]
        ]

    assert statuses(a) == statuses(b) and ("phase-performance", "ran") in statuses(b)
    timed = next(c for c in b["checks"] if c["check"] == "phase-performance")
    assert "the recorded baseline timed live as" in timed["message"]
    baseline = b["baseline"]
    assert baseline["kind"] == "recorded baseline" and baseline["answers_computed"] == 0 and baseline["answers_read"]
    assert baseline["live_reference"].endswith("(built for clocks and layer traces)")
    # the verdict line and the summary name where the reference's answers came from
    origin = f"reference: main's recording at {MAIN[:12]}, {baseline['answers_read']} answers"
    assert b["summary"].endswith(origin) and origin in replay.output and "recording" not in a["summary"]
    assert b["subjects"]["reference"]["baseline"]["sha256"] == baseline["sha256"] == header_digest(tmp_path)
    html = (tmp_path / "replay" / "dossier.html").read_text()
    assert baseline["sha256"] in html
    envelope = json.loads((tmp_path / "replay" / "attestation.dsse.json").read_text())
    import base64

    statement = json.loads(base64.b64decode(envelope["payload"]))
    assert {"name": f"baseline:{tmp_path / 'baseline'}", "digest": {"sha256": baseline["sha256"]}} in statement[
        "subject"
    ]
    verified = gate("verify", tmp_path / "replay", "--run-key", tmp_path / "keys" / "gate.pub", "--any-verdict")
    assert verified.exit_code == 0, verified.output

    missing = gate("run", replay_manifest(tmp_path, tmp_path / "baseline", seed=5), "--out", tmp_path / "missing")
    assert missing.exit_code == 3, missing.output
    errors = [c["message"] for c in results(tmp_path / "missing")["checks"] if c["status"] == "error"]
    assert errors and all("MissingRecording" in m and "has no recording for" in m for m in errors)
    assert any("full_logits tokens [2, 192]" in m for m in errors)


def header_digest(tmp: Path) -> str:
    import hashlib

    return hashlib.sha256((tmp / "baseline" / "baseline.json").read_bytes()).hexdigest()


def test_the_same_store_caches_an_unchanged_reference(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = gate("run", MANIFEST, "--out", tmp_path / "one", "--reference-cache", cache)
    second = gate("run", MANIFEST, "--out", tmp_path / "two", "--reference-cache", cache)
    # tinylm has no attention probe: mask-oracle is unproven-not-applicable (a warning); step 6 times the
    # live reference beside the store, so both runs pass as a live run does
    assert first.exit_code == second.exit_code == 0, second.output
    timed = next(c for c in results(tmp_path / "two")["checks"] if c["check"] == "phase-performance")
    assert timed["status"] in ("pass", "warn"), timed["message"]
    one, two = results(tmp_path / "one")["baseline"], results(tmp_path / "two")["baseline"]
    assert one["kind"] == two["kind"] == "reference cache"
    assert one["answers_computed"] > 0 and two["answers_computed"] == 0 and two["answers_read"] > 0
    assert "reference cache:" in second.output and "0 computed" in second.output


def test_a_replay_computes_with_the_thread_count_the_answers_were_recorded_with(tmp_path: Path) -> None:
    """float32 bits depend on how many threads split a matmul, so an exact claim replayed with another
    thread count than it was recorded with would fail as rounding-only: the run takes the recorded count."""
    import torch

    from gate.adapters.recorded.store import BaselineStore, StoredPath
    from gate.engine.subject import _threads_of_recording

    SHAPE = {"name": "x", "vocab_size": 8, "max_len": 8, "uses_cache": True, "dtype": "float32"}
    before = torch.get_num_threads()
    lines: list[str] = []
    try:
        torch.set_num_threads(1)
        store = BaselineStore(tmp_path / "b", {"torch_threads": 2, "shape": SHAPE})
        _threads_of_recording(StoredPath(store, None, name="recorded:x"), lines.append)
        assert torch.get_num_threads() == 2
        assert lines == [
            "the stored answers were computed with 2 torch threads, this run had 1: the run uses 2, "
            "so float32 bits compare as recorded"
        ]
        lines.clear()
        _threads_of_recording(StoredPath(store, None, name="recorded:x"), lines.append)  # already matching
        recording = StoredPath(
            BaselineStore(tmp_path / "c", {"torch_threads": 3, "shape": SHAPE}), None, mode="recording"
        )
        _threads_of_recording(recording, lines.append)  # a recording sets nothing
        assert lines == [] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
