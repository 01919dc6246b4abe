"""kvpress presses as eviction candidates (needs the kvpress extra: bash .ci/kvpress.sh)."""

from __future__ import annotations

import pytest
import torch

from gate.adapters.hf.paths import HFPath
from gate.core.check import Outcome
from gate.protocols import CacheCropping, offered
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


def test_request_scope_holds_the_press_over_every_forward_and_is_exact_without_eviction() -> None:
    """`press_scope: request` (kvpress's pipeline): the hooks are on the model for the prefill and
    every decode step, and with nothing to evict the request is exact at its true positions."""
    reference = path("llama")
    toks = tokens()
    lossless = path("llama", path="kvpress", press="knorm", compression_ratio=0.0, press_scope="request")
    session = lossless.new_session(2)
    session.prefill(toks[:, :60])
    got = torch.cat([session.append(toks[:, 60:61]), session.append(toks[:, 61:70])], 1)
    assert (got - reference.full_logits(toks)[:, 60:70]).abs().max().item() < 1e-4
    assert session.exercise()["pressed_forwards"] == 3 and session.exercise()["press_scope"] == "request"
    pressed = path("llama", path="kvpress", press="knorm", compression_ratio=0.5, press_scope="request")
    session = pressed.new_session(2)
    session.prefill(toks[:, :60])
    session.append(toks[:, 60:61])
    ex = session.exercise()
    assert ex["kept_tokens"] == [31, 31] and ex["evicted_tokens"] == 2 * 30  # decode steps are not pressed
    prefill_only = path("llama", path="kvpress", press="knorm", compression_ratio=0.5).new_session(2)
    prefill_only.prefill(toks[:, :60])
    prefill_only.append(toks[:, 60:61])
    assert prefill_only.exercise()["pressed_forwards"] == 1


@pytest.mark.parametrize("scope", ["prefill", "request"])
@pytest.mark.parametrize("press", ["knorm", "random"])
def test_a_one_token_prompt_keeps_its_one_key(press: str, scope: str) -> None:
    """One-token prompts through a scorer press: int(1 * (1 - 0.5)) = 0 pairs kept emptied the cache
    on kvpress 0.5.4 (the decode then attends over itself alone; kvpress PR #264 keeps at least one
    from 0.5.5), so the decode after a one-token prompt must be exact. Fails on kvpress 0.5.4."""
    reference = path("llama")
    toks = tokens()
    session = path("llama", path="kvpress", press=press, compression_ratio=0.5, press_scope=scope).new_session(2)
    session.prefill(toks[:, :1])
    got = torch.cat([session.append(toks[:, 1:2]), session.append(toks[:, 2:10])], 1)
    assert session.exercise()["kept_tokens"] == [10, 10]
    assert (got - reference.full_logits(toks[:, :10])[:, 1:10]).abs().max().item() < 1e-4


@pytest.mark.parametrize("scope", ["prefill", "request"])
def test_a_chunk_appended_after_eviction_is_causal(scope: str) -> None:
    """The cache position follows the compressed cache (as the model counts it for kvpress's
    pipeline): a chunk appended after a press equals the same tokens appended one at a time. With
    the true position as cache position the chunk's mask let every query see the whole chunk
    (max |delta| 8.7 against one at a time in a probe of this shape, before the fix)."""
    candidate = path("llama", path="kvpress", press="knorm", compression_ratio=0.5, press_scope=scope)
    toks = tokens()
    chunked = candidate.new_session(2)
    chunked.prefill(toks[:, :60])
    chunk = chunked.append(toks[:, 60:68])
    single = candidate.new_session(2)
    single.prefill(toks[:, :60])
    ones = torch.cat([single.append(toks[:, i : i + 1]) for i in range(60, 68)], 1)
    assert (chunk - ones).abs().max().item() < 1e-4


def _short_prompt(candidate: HFPath) -> Outcome:
    from gate.checks.short_prompt import ShortPromptParams, short_prompt
    from tests.support import reference as ref

    claim = {
        "level": "bounded-degradation",
        "envelopes": [{"slice": "local-control", "metric": "greedy-match", "comparator": ">=", "threshold": "0.90"}],
    }
    return short_prompt(ref.ctx(path("llama"), candidate, claim=claim), ShortPromptParams())


def test_short_prompt_counts_the_pairs_a_press_kept_and_catches_a_short_context_emptied() -> None:
    """The press session exposes its cache length (gate.protocols.CacheCropping): short-prompt says
    how many pairs each prompt kept. KnormPress(0.5) keeps 1 of 1 on 0.5.5; the planted
    short-context-emptied (0.5.4's rounding to 0) empties it, and the check fails saying so."""
    candidate = path("llama", path="kvpress", press="knorm", compression_ratio=0.5)
    session = candidate.new_session(2)
    session.prefill(tokens()[:, :60])
    cropping = offered(session, CacheCropping)
    assert cropping is not None and cropping.cache_length() == 30
    assert "short-context-emptied" in candidate.faults()
    emptied = _short_prompt(candidate.with_fault("short-context-emptied"))
    assert emptied.status == "fail" and "keeps 0 of 1 K/V pairs" in emptied.message
    clean = _short_prompt(candidate)
    assert clean.status == "pass", clean.message
    assert clean.metrics["kept_pairs"] == {"1": 1, "2": 1, "3": 1, "4": 2, "6": 3}


def test_a_press_that_refuses_a_short_prompt_is_a_crash_of_the_subject() -> None:
    """StreamingLLM asserts the prompt is longer than its 4 sinks (0.5.4 and 0.5.5 alike): a finding
    about the press, class crash, for each prompt it refuses; the longer prompts still run and are
    judged (a crash on one prompt hides nothing about the others)."""
    outcome = _short_prompt(path("llama", path="kvpress", press="streaming-llm", compression_ratio=0.5))
    assert outcome.status == "fail" and "n_sink=4" in outcome.message, outcome.message
    assert outcome.metrics["crashed"] == [1, 2, 3, 4]
    diagnosis = outcome.diagnosis or {}
    assert diagnosis["bug_class"] == "crash" and "n_sink=4" in diagnosis["exception"]
    assert "prompts of 6 tokens ran and held" in outcome.message, outcome.message


def test_evict_invariants_reads_what_a_press_kept_and_judges_it() -> None:
    """The press session says what it promises and what it kept (gate.protocols.EvictionReport, read
    by wrapping kvpress 0.5.5's ScorerPress.score and .compress): KnormPress(0.5) keeps the top half
    of minus the key norm, which gate recomputes in float32 from the keys the press scored."""
    from gate.checks.evict_invariants import EvictInvariantsParams, evict_invariants
    from gate.protocols import EvictionReport
    from tests.support import reference as ref

    candidate = path("llama", path="kvpress", press="knorm", compression_ratio=0.5)
    session = candidate.new_session(2)
    report = offered(session, EvictionReport)
    assert report is not None and report.eviction_policy().score == "knorm"
    log = report.watch_evictions()
    session.prefill(tokens()[:, :60])
    assert log and all(step.kept_from.shape[-1] == 30 for step in log)
    claim = {
        "level": "bounded-degradation",
        "envelopes": [{"slice": "local-control", "metric": "greedy-match", "comparator": ">=", "threshold": "0.90"}],
    }
    out = evict_invariants(ref.ctx(path("llama"), candidate, claim=claim), EvictInvariantsParams(prompt=40))
    assert out.status == "pass", out.message
    assert out.metrics["score_recomputed_float32"] and out.metrics["max_score_mismatch"] < 1e-4
    faulty = candidate.with_fault("evict-rank-sign")  # the press keeps the lowest of its own score
    caught = evict_invariants(ref.ctx(path("llama"), faulty, claim=claim), EvictInvariantsParams(prompt=40))
    assert caught.status == "fail" and caught.diagnosis is not None
    assert caught.diagnosis["bug_class"] == "evict-ranking", caught.message


def test_streaming_llm_keeps_three_of_its_four_sinks_and_drops_the_last_token_of_a_six_token_prompt() -> None:
    """kvpress 0.5.5's StreamingLLMPress(0.5, n_sink=4) on 6 tokens keeps int(6 * 0.5) = 3: its score
    is 1 on the 4 sinks (and on no window: n_kept - n_sink < 0), so topk picks 3 of 4 tied sinks and
    the last token goes. The reader (no model: the press's own compress on random keys) records it
    and evict-invariants' judgement names it evict-protected."""
    from types import SimpleNamespace

    from gate.adapters.hf.kvpress_path import press_policy, watch_press
    from gate.checks.evict_invariants.body import Judgement, Step, judge_step

    press = kvpress.StreamingLLMPress(compression_ratio=0.5, n_sink=4)
    watch_press(SimpleNamespace(press=press))  # type: ignore[arg-type]
    log: list = []
    press.gate_watching = log
    keys = torch.randn(1, 2, 6, 8)
    press.compress(SimpleNamespace(head_dim=8, layer_idx=0), torch.zeros(1, 6, 16), keys, keys.clone(), None, {})
    j = Judgement()
    judge_step(press_policy(press, 0.5), Step("short-6", "prefill", False, log[0]), 0, 1e-5, j)
    assert log[0].kept_from.shape[-1] == 3
    assert {f.cls for f in j.findings} == {"evict-protected"}
    assert all(5 in f.where["dropped"] for f in j.findings)  # the newest token


def test_a_bfloat16_knorm_press_keeps_the_top_of_the_float32_key_norm() -> None:
    """kvpress 0.5.4 and earlier score KnormPress by a bfloat16 key norm, so on a bfloat16 cache rounding,
    not the norm, picks what is evicted (0.5.5 takes the norm in float32). evict-invariants recomputes
    the score in float32 from the keys the press scored: on 0.5.4 evict-ranking breaks (scores off by
    0.031; .ci/kvpress.sh asserts this test fails there on it), on 0.5.5 it holds."""
    from gate.adapters.hf import HFAdapter, Options
    from gate.checks.evict_invariants import EvictInvariantsParams, evict_invariants
    from tests.support import reference as ref

    def bf16(**options: object) -> HFPath:
        built = HFAdapter().build(Options(model="llama", **options), device="cpu", dtype="bfloat16", seed=0)
        assert isinstance(built, HFPath)
        return built

    claim = {
        "level": "bounded-degradation",
        "envelopes": [{"slice": "local-control", "metric": "greedy-match", "comparator": ">=", "threshold": "0.90"}],
    }
    candidate = bf16(path="kvpress", press="knorm", compression_ratio=0.5)
    context = ref.ctx(bf16(), candidate, claim=claim, dtype="bfloat16")
    out = evict_invariants(context, EvictInvariantsParams(prompt=200))
    assert "evict-ranking" not in out.metrics["broken"], out.message
    assert out.metrics["score_recomputed_float32"] and out.metrics["max_score_mismatch"] < 1e-2
    assert out.status == "pass", out.message


@pytest.mark.parametrize(
    ("press", "prompt", "ratio"),
    [("snapkv", 40, 0.6), ("expected-attention", 8, 0.5), ("tova", 3, 0.5)],
)
def test_a_press_keeps_what_it_protects_when_the_budget_just_holds_it(press: str, prompt: int, ratio: float) -> None:
    """Up to kvpress 0.5.3, SnapKV, ExpectedAttention and TOVA scored the positions they protect (the
    16-token window, the 4 sinks, the last token) with `scores.max()`, so one protected position tied
    the best unprotected one; where the budget is just the protected positions (16 of 40 at 0.6, 4 of 8
    at 0.5, 1 of 3 at 0.5) top-k keeps that one and evicts a protected position (0.5.4 scores them
    max + 1, kvpress PR #227). evict-invariants' judgement of every layer's eviction in a prefill of
    the tiny Llama: on 0.5.3 evict-protected breaks (.ci/kvpress.sh asserts all 3 fail there on it),
    on 0.5.4 and 0.5.5 it holds."""
    from gate.checks.evict_invariants import EvictInvariantsParams
    from gate.checks.evict_invariants.body import Observations, Step, explain, judge
    from gate.protocols import EvictionReport

    candidate = path("llama", path="kvpress", press=press, compression_ratio=ratio)
    session = candidate.new_session(1)
    report = offered(session, EvictionReport)
    assert report is not None
    log = report.watch_evictions()
    session.prefill(tokens(batch=1)[:, :prompt])
    policy = report.eviction_policy()
    assert policy.sink + (policy.window or 0) + policy.keeps_last * (not policy.window) == int(prompt * (1 - ratio))
    steps = [Step("prefill", "prefill", False, st) for st in log]
    obs = Observations(policy, steps, dict(session.exercise()), stopped=False)
    params = EvictInvariantsParams()
    out = explain(params, obs, judge(obs, params))
    assert len(steps) == 2 and out.metrics["evictions_judged"] == 2  # both layers evicted
    assert out.status == "pass", out.message


@pytest.mark.parametrize(
    ("press", "prompt", "ratio"),
    [("snapkv", 40, 0.6), ("expected-attention", 8, 0.5), ("tova", 3, 0.5)],
)
def test_evict_invariants_judges_the_rest_when_a_press_refuses_short_prompts(
    press: str, prompt: int, ratio: float
) -> None:
    """The whole check on the presses of the test above: each refuses its 1-token scenario (and SnapKV
    its 15-token one) on every release, a finding of class crash, and the check judges the prompt
    whole and in chunks all the same. On 0.5.4 and 0.5.5 those hold, so crash is the only class; on
    0.5.3 the prefill breaks evict-protected and names the diagnosis (.ci/kvpress.sh asserts all 3
    fail there on it)."""
    from gate.checks.evict_invariants import EvictInvariantsParams, evict_invariants
    from tests.support import reference as ref

    claim = {
        "level": "bounded-degradation",
        "envelopes": [{"slice": "local-control", "metric": "greedy-match", "comparator": ">=", "threshold": "0.90"}],
    }
    candidate = path("llama", path="kvpress", press=press, compression_ratio=ratio)
    params = EvictInvariantsParams(prompt=prompt, chunk=prompt, batch=1)
    out = evict_invariants(ref.ctx(path("llama"), candidate, claim=claim), params)
    assert out.status == "fail" and out.diagnosis is not None
    assert out.diagnosis["bug_class"] == "crash", out.message
    assert out.diagnosis["classes"] == ["crash"] and out.diagnosis["scenario"] == "short-1"
    assert {"prefill", "chunked"} <= set(out.exercise["scenarios"]) and out.metrics["evictions_judged"] == 4
