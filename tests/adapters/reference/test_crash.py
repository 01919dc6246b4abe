"""A crash inside the reference decoder is a failure of the subject (class crash), not gate's error.

The subject is real: a static KV cache of 48 slots whose reset keeps the previous request's position
(the planted `reset-keeps-position` bug). reset-isolation's second request then writes past the
cache's last slot, and the decoder's own cache raises "cache overflow" inside `Transformer.step`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from gate.adapters.reference import Options, ReferenceAdapter
from gate.core.result import Status
from gate.engine.pipeline import run_pipeline
from gate.errors import SubjectCrash
from tests.support.manifests import write_subject_manifest


def _manifest(tmp_path: Path, fault: str | None) -> Path:
    candidate = {"preset": "tiny", "path": "static", "max_len": 48, **({"fault": fault} if fault else {})}
    return write_subject_manifest(
        tmp_path / "reference-crash.yaml",
        {"adapter": "reference", "options": {"preset": "tiny", "path": "dynamic", "max_len": 48}},
        {"adapter": "reference", "options": candidate},
        claim={"level": "exact"},
        device="cpu",
        dtype="float32",
        seed=0,
    )


def test_a_session_call_that_raises_inside_the_decoder_is_a_subject_crash() -> None:
    path = ReferenceAdapter().build(
        Options(path="static", max_len=8, fault="reset-keeps-position"), device="cpu", dtype="float32", seed=0
    )
    session = path.new_session(1)
    session.prefill(torch.zeros(1, 6, dtype=torch.long))
    session.reset()
    with pytest.raises(SubjectCrash) as caught:
        session.prefill(torch.zeros(1, 6, dtype=torch.long))
    assert caught.value.call == "Transformer.step" and caught.value.where == {"length": 6, "tokens": 6}
    assert "cache overflow" in str(caught.value.error)


def test_reset_isolation_fails_a_crashing_reference_path_with_class_crash(tmp_path: Path) -> None:
    outputs = run_pipeline(
        _manifest(tmp_path, "reset-keeps-position"), tmp_path / "out", only=["reset-isolation"], ledger=None
    )
    (result,) = [c for c in outputs.result.checks if c.check == "reset-isolation"]
    assert result.status == Status.failed, result.message
    assert result.diagnosis is not None and result.diagnosis["bug_class"] == "crash"
    assert result.diagnosis["call"] == "Transformer.step"
    # request A (24 + 8 tokens) left the position at 32; request B's prompt of 17 starts there
    assert result.diagnosis["length"] == 32 and result.diagnosis["tokens"] == 17
    assert "cache overflow" in result.diagnosis["exception"]
    assert outputs.exit_code == 1  # a failure of the subject, never exit 3 (gate's error)
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert any(c["diagnosis"] and c["diagnosis"].get("bug_class") == "crash" for c in saved["checks"])


def test_the_same_check_passes_the_correct_static_cache(tmp_path: Path) -> None:
    outputs = run_pipeline(_manifest(tmp_path, None), tmp_path / "out", only=["reset-isolation"], ledger=None)
    (result,) = [c for c in outputs.result.checks if c.check == "reset-isolation"]
    assert result.status == Status.passed, result.message
