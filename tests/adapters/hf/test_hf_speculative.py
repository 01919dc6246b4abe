"""Proposal-and-verify through transformers: assisted generation and prompt lookup."""

from __future__ import annotations

import inspect

import pytest
import torch

from gate.adapters.hf.speculative import _prompt_lookup
from gate.adapters.hf.speculative import rounds as _rounds
from gate.errors import SubjectCrash
from gate.protocols import SpeculativePath
from tests.adapters.hf.subjects import greedy, path, tokens


def _prompt_lookup_guards_a_missing_eos() -> bool:
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    return "if self.eos_token_id is not None" in inspect.getsource(PromptLookupCandidateGenerator)


@pytest.mark.parametrize(
    "options",
    [
        {"path": "assisted", "draft": "llama", "draft_layers": 1},
        {"path": "prompt-lookup", "max_matching_ngram_size": 1},
    ],
)
def test_greedy_assisted_generation_equals_the_target_and_rejects_some_drafts(options: dict[str, object]) -> None:
    candidate = path("llama", **options)
    assert isinstance(candidate, SpeculativePath)
    prompts = tokens(batch=3, length=8, seed=3)
    generator = torch.Generator().manual_seed(0)
    if options["path"] == "prompt-lookup" and not _prompt_lookup_guards_a_missing_eos():
        # 5.2-5.12 call isin(ids, eos_token_id) unguarded: with no EOS token the release crashes, and
        # the adapter calls it as shipped (no eos_token_id = vocab_size dodge): a crash of the subject
        with pytest.raises(SubjectCrash, match="isin"):
            candidate.sample(prompts, 16, temperature=0.0, top_k=None, generator=generator)
        return
    out = candidate.sample(prompts, 16, temperature=0.0, top_k=None, generator=generator)
    assert torch.equal(out.tokens, greedy(path("llama"), prompts, 16))
    stats = out.stats
    assert stats.proposed > 0 and stats.rejections > 0 and stats.emitted == 3 * 16
    assert stats.accepted + stats.target_passes == stats.emitted
    if options["path"] == "assisted":
        assert stats.draft_passes >= stats.proposed


def test_accept_all_removes_verification_from_outside() -> None:
    candidate = path("llama", path="assisted", draft="llama", draft_layers=1)
    prompts = tokens(batch=2, length=8, seed=3)
    bad = candidate.with_fault("accept-all").sample(
        prompts, 16, temperature=0.0, top_k=None, generator=torch.Generator().manual_seed(0)
    )
    assert bad.stats.rejections == 0 and bad.stats.accepted == bad.stats.proposed
    assert not torch.equal(bad.tokens, greedy(path("llama"), prompts, 16))


def test_ensemble_verification_is_a_real_lossy_change_or_unavailable_with_a_reason() -> None:
    from gate.adapters.hf import compat
    from gate.errors import AdapterUnavailable

    options = {"path": "assisted", "draft": "llama", "draft_layers": 1, "num_assistant_tokens": 2}
    if not compat.cache_api(path("llama").model).ensemble_verification:
        with pytest.raises(AdapterUnavailable, match="no static ensemble verification"):
            path("llama", ensemble_weight=0.5, **options)
        return
    relaxed = path("llama", ensemble_weight=0.5, **options)
    assert relaxed.identity()["ensemble_weight"] == 0.5
    prompts = tokens(batch=2, length=8, seed=3)
    out = relaxed.sample(prompts, 16, temperature=0.0, top_k=None, generator=torch.Generator().manual_seed(0))
    assert out.stats.proposed > 0 and not torch.equal(out.tokens, greedy(path("llama"), prompts, 16))


def test_sampling_is_reproducible_from_the_generator() -> None:
    candidate = path("llama", path="assisted", draft="llama", draft_layers=1)
    prompts = tokens(batch=2, length=8)
    runs = [
        candidate.sample(prompts, 10, temperature=1.0, top_k=20, generator=torch.Generator().manual_seed(4))
        for _ in range(2)
    ]
    assert torch.equal(runs[0].tokens, runs[1].tokens)
    probs = candidate.draft_next_token_probs(prompts, temperature=1.0, top_k=None)
    assert probs.shape == (2, 256) and torch.allclose(probs.sum(-1), torch.ones(2))


def test_verify_session_serves_confirmed_drafts_and_rolls_back_the_rest() -> None:
    reference, candidate = path("llama"), path("llama", path="assisted", draft="llama", draft_layers=1)
    prompt = tokens(batch=1, length=8, seed=3)
    continuation = greedy(reference, prompt, 24)  # the target's own tokens: drafts are often right
    toks = torch.cat([prompt, continuation], 1)
    session = candidate.new_session(1)
    session.prefill(toks[:, :8])
    rows = torch.cat([session.append(toks[:, i : i + 1]) for i in range(8, 32)], 1)
    assert (rows - reference.full_logits(toks)[:, 8:32]).abs().max().item() < 1e-4
    ex = session.exercise()
    assert ex["accepted_tokens"] > 0 and ex["rollbacks"] > 0 and ex["draft_forward_passes"] > 0
    assert ex["cache_len"] == 32


def test_round_accounting() -> None:
    # prompt 5; round 0 scores 5 + 3 drafts, accepts 1 (+1 correction): cache then holds 6;
    # round 1 scores 1 + 3 drafts, accepts all 3 (+1 bonus): final length 11
    stats = _rounds([(0, 8), (6, 4)], prompt_len=5, final_len=11, k=3)
    assert (stats.proposed, stats.accepted, stats.rejections, stats.bonus, stats.emitted) == (6, 4, 1, 1, 6)


def test_prompt_lookup_proposes_what_followed_the_last_match() -> None:
    history = torch.tensor([[5, 6, 7, 8, 9, 5, 6]])
    assert _prompt_lookup(history, 3, 2).tolist() == [[7, 8, 9]]
    assert _prompt_lookup(torch.tensor([[1, 2, 3]]), 3, 2).shape == (1, 0)
