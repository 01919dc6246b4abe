"""Paths users call: the model object reused after continuous batching, prompt lookup with an EOS token."""

from __future__ import annotations

import inspect

import pytest
import torch

from gate.adapters.hf import Options, compat
from gate.adapters.hf.paths import PAGED_KERNEL
from gate.errors import AdapterUnavailable
from gate.protocols import SpeculativePath
from tests.adapters.hf.subjects import build, greedy, path, tokens


def _restores_attention() -> bool:
    """The release's continuous batching manager switches the model back when it stops (5.9+)."""
    from transformers.generation.continuous_batching import continuous_api

    return "_original_attn_impl" in inspect.getsource(continuous_api)


def test_the_new_options_apply_only_to_their_paths() -> None:
    with pytest.raises(ValueError, match="reuse_after"):
        Options(model="gpt2", path="static", reuse_after="paged")
    with pytest.raises(ValueError, match="eos_token"):
        Options(model="llama", path="assisted", draft="llama", eos_token="model")
    with pytest.raises(ValueError, match="token id"):
        Options(model="llama", path="prompt-lookup", eos_token=-1)


def test_a_model_reused_after_generate_batch_is_compared_with_a_fresh_one() -> None:
    if compat.page_field() is None:
        with pytest.raises(AdapterUnavailable, match="ContinuousBatchingConfig"):
            build("gpt2", path="dynamic", reuse_after="paged").full_logits(tokens(1, 8))
        return
    # a fresh build each: reuse mutates the path's model object (that is the point)
    reused = build.__wrapped__("gpt2", path="dynamic", reuse_after="paged")
    fresh = path("gpt2")
    toks = tokens(2, 40)
    session = reused.new_session(2)
    got = torch.cat([session.prefill(toks[:, :24]), session.append(toks[:, 24:])], 1)
    record = session.exercise()
    assert record["reused_after"] == "paged" and record["batch_generated_tokens"] > 0 and record["batch_forwards"] > 1
    assert reused.identity()["reuse_after"] == "paged"
    gap = (got - fresh.full_logits(toks)).abs().max().item()
    if _restores_attention():
        assert record["attn_implementation_after_batch"] == record["attn_implementation_before_batch"]
        assert gap < 1e-4
    else:  # 5.4-5.8: the model is left on the paged attention implementation (docs/real-bugs.md)
        assert record["attn_implementation_after_batch"] != record["attn_implementation_before_batch"]
        assert gap > 1e-2


def test_the_attention_left_paged_fault_changes_a_copy_and_not_the_clean_model() -> None:
    if compat.page_field() is None:
        pytest.skip("no continuous batching config on this release (5.2-5.3)")
    clean = build.__wrapped__("gpt2", path="dynamic", reuse_after="paged")
    assert "attention-left-paged" in clean.faults()
    faulty = clean.with_fault("attention-left-paged")
    assert faulty.model is not clean.model
    toks = tokens(1, 24)
    bad = faulty.full_logits(toks)
    assert faulty.reused is not None and faulty.reused["attn_implementation_after_batch"] == PAGED_KERNEL
    assert compat_attention(clean.model) != PAGED_KERNEL
    assert (bad - path("gpt2").full_logits(toks)).abs().max().item() > 1e-2
    assert "attention-left-paged" not in path("gpt2", path="dynamic").faults()


def compat_attention(model: object) -> str:
    return str(model.config._attn_implementation)  # type: ignore[attr-defined]


def test_prompt_lookup_with_a_stop_token_stops_there_and_agrees_up_to_it() -> None:
    reference = path("llama")
    prompts = tokens(batch=3, length=8, seed=3)
    expected = greedy(reference, prompts, 16)
    stop = int(expected[0, 3])  # a token row 0 emits: its continuation must stop there
    candidate = path("llama", path="prompt-lookup", max_matching_ngram_size=1, eos_token=stop)
    assert isinstance(candidate, SpeculativePath) and candidate.identity()["eos_token_id"] == stop
    out = candidate.sample(prompts, 16, temperature=0.0, top_k=None, generator=torch.Generator().manual_seed(0))
    assert out.produced is not None and out.stats.eos_stops is not None and out.stats.eos_stops >= 1
    for row, made in enumerate(out.produced):
        first = (expected[row] == stop).nonzero()
        want = int(first[0]) + 1 if first.numel() else 16  # the reference's own first stop token
        assert made == want
        assert torch.equal(out.tokens[row, :made], expected[row, :made])
        assert bool((out.tokens[row, made:] == stop).all())


def test_prompt_lookup_with_the_model_eos_names_it_in_the_identity() -> None:
    candidate = path("llama", path="prompt-lookup", eos_token="model")
    assert candidate.identity()["eos_token_id"] == candidate.model.config.eos_token_id
    assert path("llama", path="prompt-lookup").identity()["eos_token_id"] is None
