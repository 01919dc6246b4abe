"""short-prompt: a non-empty context is never dropped whole (kvpress 0.5.4's one-token prompt, PR #264)."""

from __future__ import annotations

import pytest
import torch

from gate.adapters.reference import Options, ReferenceAdapter
from gate.checks._compare import Tolerance
from gate.checks.short_prompt import ShortPromptParams, short_prompt
from gate.checks.short_prompt.body import PromptRun, verdict
from tests.support import reference as ref

TOL = Tolerance(1e-4, 1e-4, "float32 default")
CLAIM = {
    "level": "bounded-degradation",
    "envelopes": [{"slice": "local-control", "metric": "greedy-match", "comparator": ">=", "threshold": "0.90"}],
}


def _run(length: int, kept: int | None, kept_at_end: int | None, delta: float) -> PromptRun:
    want = torch.zeros(1, 3, 8)
    return PromptRun(length, kept, kept_at_end, want + delta, want, {})


def test_an_emptied_cache_fails_whatever_the_logits_say() -> None:
    emptied = verdict(_run(2, 0, 3, 0.0), steps=3, tol=TOL)
    assert emptied.dropped_whole and emptied.bad


def test_a_one_token_prompt_or_a_cache_that_kept_everything_must_match_the_full_forward() -> None:
    assert verdict(_run(1, None, None, 0.5), steps=3, tol=TOL).bad  # its one pair kept: no room to differ
    assert verdict(_run(3, 3, 6, 0.5), steps=3, tol=TOL).bad  # nothing evicted, yet different
    evicted = verdict(_run(3, 2, 5, 0.5), steps=3, tol=TOL)  # a pair evicted: the approximation is quality's
    assert not evicted.must_match and not evicted.bad
    assert not verdict(_run(1, 1, 4, 1e-6), steps=3, tol=TOL).bad


def test_lengths_must_include_a_one_token_prompt() -> None:
    with pytest.raises(ValueError, match="include 1"):
        ShortPromptParams(lengths=[2, 4])
    assert ShortPromptParams(lengths=[4, 1, 4]).lengths == [1, 4]


def test_an_evicting_reference_path_keeps_short_contexts_and_a_mispositioned_append_fails() -> None:
    """The window and sinks hold every pair of a short prompt, so each continuation is the full forward's."""
    full = ref.path("full")
    options = Options.model_validate({"max_len": ref.MAX_LEN, "path": "evicting", "evict": {"window": 16, "sink": 4}})
    evicting = ReferenceAdapter().build(options, device="cpu", dtype="float32", seed=0)
    ctx = ref.ctx(full, evicting, claim=CLAIM)
    clean = short_prompt(ctx, ShortPromptParams())
    assert clean.status == "pass", clean.message
    assert clean.metrics["dropped_whole"] == [] and clean.metrics["one_token_kept"] is None  # length not exposed
    faulty = ref.ctx(full, evicting.with_fault("missing-start-pos"), claim=CLAIM)
    caught = short_prompt(faulty, ShortPromptParams())
    assert caught.status == "fail" and caught.detected_at == 1, caught.message
    assert caught.diagnosis is not None and caught.diagnosis["bug_class"] == "uncertain"


def test_a_crash_on_one_prompt_is_a_finding_about_it_and_the_other_prompts_still_run() -> None:
    """The evicting path refuses prompts of up to 2 tokens inside its cache (as kvpress StreamingLLM
    refuses a prompt not longer than its sinks): lengths 1 and 2 crash, 3, 4 and 6 still run and hold."""
    full = ref.path("full")
    evict = {"window": 16, "sink": 4, "refuse_prompts_up_to": 2}
    options = Options.model_validate({"max_len": ref.MAX_LEN, "path": "evicting", "evict": evict})
    refusing = ReferenceAdapter().build(options, device="cpu", dtype="float32", seed=0)
    outcome = short_prompt(ref.ctx(full, refusing, claim=CLAIM), ShortPromptParams())
    assert outcome.status == "fail" and outcome.detected_at == 1, outcome.message
    assert outcome.metrics["crashed"] == [1, 2] and outcome.metrics["lengths"] == [3, 4, 6]
    assert "n_sink=2" in outcome.message and "prompts of 3, 4, 6 tokens ran and held" in outcome.message
    assert outcome.diagnosis is not None and outcome.diagnosis["bug_class"] == "crash"
    assert outcome.diagnosis["failing_lengths"] == {"1": "crash", "2": "crash"}
    assert outcome.diagnosis["exception_type"] == "AssertionError"
    prompts = outcome.evidence["prompts"]
    assert list(prompts) == ["1", "2", "3", "4", "6"] and "AssertionError" in prompts["2"]["crashed"]
    assert prompts["3"]["rows_over_tolerance"] == 0 and prompts["6"]["max_abs_delta"] < 1e-4  # window holds all
