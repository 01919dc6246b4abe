"""kvpress presses as eviction candidates (needs the kvpress extra: bash .ci/kvpress.sh)."""

from __future__ import annotations

import pytest
import torch

from tests.adapters.hf.subjects import path, tokens

kvpress = pytest.importorskip(
    "kvpress",
    reason="kvpress is an optional extra pinned to transformers<5.3: it is tested in .venv-kvpress (.ci/kvpress.sh)",
)


@pytest.mark.parametrize("press", ["streaming-llm", "snapkv", "knorm", "expected-attention", "tova", "random"])
def test_press_evicts_half_the_prefill_and_reports_it(press: str) -> None:
    reference, candidate = path("llama"), path("llama", path="kvpress", press=press, compression_ratio=0.5)
    toks = tokens()
    session = candidate.new_session(2)
    prefill = session.prefill(toks[:, :60])
    appended = session.append(toks[:, 60:61])
    full = reference.full_logits(toks)
    assert (prefill - full[:, :60]).abs().max().item() < 1e-4  # the prefill itself attends over everything
    ex = session.exercise()
    assert ex["kept_tokens"] == [31, 31] and ex["evicted_tokens"] == 2 * 30
    assert (appended[:, 0] - full[:, 60]).abs().max().item() > 1e-3


def test_no_compression_is_exact_at_true_positions() -> None:
    reference, candidate = path("llama"), path("llama", path="kvpress", press="knorm", compression_ratio=0.0)
    toks = tokens()
    session = candidate.new_session(2)
    session.prefill(toks[:, :60])
    got = torch.cat([session.append(toks[:, 60:61]), session.append(toks[:, 61:70])], 1)
    assert (got - reference.full_logits(toks)[:, 60:70]).abs().max().item() < 1e-4


def test_a_model_kvpress_cannot_hook_is_a_crash_of_the_subject_not_gates_error() -> None:
    """kvpress reaches the layers through `model.model`; GPT-2 has none, so entering the press raises
    inside kvpress: a SubjectCrash naming the press, which the runner reports as a failure."""
    from gate.errors import SubjectCrash

    candidate = path("gpt2", path="kvpress", press="streaming-llm", compression_ratio=0.5)
    with pytest.raises(SubjectCrash, match="StreamingLLMPress") as crash:
        candidate.new_session(1).prefill(tokens()[:1, :20])
    assert isinstance(crash.value.__cause__, AttributeError)
