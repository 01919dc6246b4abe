"""engine-concurrent-conversations' workload and its naming of a leak, without a server: its helpers,
and the whole check against an in-process engine pair whose replies are a function of the prompt
(the check also runs against a real llama-server in tests/adapters/openai/test_llamacpp_tiers.py)."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from gate.checks._engine import common_prefix
from gate.checks.engine_concurrent_conversations import EngineConversationsParams, engine_concurrent_conversations
from gate.checks.engine_concurrent_conversations.body import _Request, _schedule, _suspect
from gate.core.check import CheckContext
from gate.protocols import CacheGeometry, Capability, capabilities
from tests.support.reference import ctx, path


@pytest.mark.parametrize(("conversations", "turns", "width"), [(12, 3, 6), (8, 2, 3), (3, 4, 2), (16, 3, 8)])
def test_the_schedule_sends_every_turn_in_order_once_and_resumes_conversations_after_others(
    conversations: int, turns: int, width: int
) -> None:
    rounds = _schedule(conversations, turns, width, random.Random(7))
    seen: dict[int, list[int]] = {}
    resumed_after_others = 0
    last_round: dict[int, int] = {}
    for number, batch in enumerate(rounds):
        assert 1 <= len(batch) <= width
        assert len({c for c, _ in batch}) == len(batch)  # a conversation at most once per round
        for conv, turn in batch:
            seen.setdefault(conv, []).append(turn)
            if turn and last_round[conv] < number - 1:
                resumed_after_others += 1
            last_round[conv] = number
    assert seen == {c: list(range(turns)) for c in range(conversations)}
    if turns > 1 and conversations > width:
        assert resumed_after_others > 0
    assert rounds == _schedule(conversations, turns, width, random.Random(7))  # seeded


@dataclass
class _Reply:
    tokens: list[int]
    cached_tokens: int | None = None


def _request(id: int, conversation: int, round: int, prompt: list[int], reply: list[int], want: list[int]) -> _Request:
    req = _Request(id, conversation, conversation % 2, 0, round, "fresh", prompt)
    req.reply, req.want = _Reply(reply), _Reply(want)  # type: ignore[assignment]
    return req


def test_a_reply_equal_to_another_requests_answer_is_named_with_it() -> None:
    a = _request(0, 0, 0, [1, 2, 3, 4], [9, 9], [9, 9])
    b = _request(1, 1, 0, [1, 2, 7, 8], [9, 9], [5, 6])  # b answered what a should have
    other, how = _suspect(b, [a, b])
    assert other is a and "equals the reference's answer" in how


def test_otherwise_no_request_is_named_on_a_guess_and_the_re_ask_says_what_it_showed() -> None:
    """A prompt sharing the most tokens is no evidence: only a reply showing another request's content
    names it; the failing prompt asked again alone off the cache says whether state or configuration did it."""
    a = _request(0, 0, 0, [1, 2, 3, 4], [9, 9], [9, 9])
    failing = _request(3, 3, 1, [1, 2, 3, 4, 7], [0, 0], [1, 1])
    other, how = _suspect(failing, [a, failing])
    assert other is None and "not re-asked" in how
    failing.reask = SimpleNamespace(failed=False)  # type: ignore[assignment]
    other, how = _suspect(failing, [a, failing])
    assert other is None and "alone off the cache it matches the reference: the state it was served with" in how
    failing.reask = SimpleNamespace(failed=True)  # type: ignore[assignment]
    assert "still differs from the reference: this configuration computes" in _suspect(failing, [a, failing])[1]


def test_with_no_other_conversation_sent_before_none_is_named() -> None:
    only = _request(0, 0, 0, [1, 2], [3], [4])
    assert _suspect(only, [only])[0] is None


def test_the_dossier_reads_the_evidence_into_its_tables() -> None:
    from gate.checks.engine_concurrent_conversations.evidence import (
        ConversationFailure,
        ConversationRequest,
        ConversationsEvidence,
    )
    from gate.report.evidence import read_evidence

    row = ConversationRequest(
        id=1, conversation=1, tenant=0, turn=0, round=0, kind="fresh", prompt_tokens=280, cached_tokens=256,
        tokens_match=False, first_divergence=2, max_abs_dlogprob=0.5, tie=False, failed=True, warned=False,
    )  # fmt: skip
    failure = ConversationFailure(request=1, other_request=0, how="shares 256 tokens", message="request 1 ...")
    evidence = ConversationsEvidence(
        claim="tolerance", cache_geometry="block 1", system_prefix=256, tenants=3, conversations=8, turns=3,
        max_concurrent=4, candidate_slots=3, rounds=6, rounds_overlapping=6, requests=[row], failures=[failure],
        cache_tiers_not_reset=["llama.cpp's host-memory prompt cache"], servers={},
    )  # fmt: skip
    views = read_evidence("engine-concurrent-conversations", evidence.dump())
    assert not views.notes
    titles = [t.title for t in views.tables]
    assert titles[0] == "Replies that differ from the reference alone" and views.tables[0].rows[0][:2] == ["1", "0"]
    assert titles[1].startswith("1 requests: 8 conversations over 3 tenants' 256-token system prefixes")


VOCAB = 512


@dataclass
class _Completion:
    tokens: list[int]
    logprobs: list[float]
    top: list[dict[int, float]]
    cached_tokens: int | None
    seconds: float = 0.0
    finish_reason: str | None = "length"

    def summary(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "cached_tokens": self.cached_tokens}


@dataclass
class _Server:
    """Greedy tokens a function of the prompt; a prefix cache of what it was sent (the longest prefix
    shared with an earlier prompt); a planted wrong token on every prompt whose token sum is a
    multiple of `wrong_every`. With its stop on (`extra` given: gate.checks._eos), a reply to a prompt
    whose token sum is a multiple of `eos_every` ends at end-of-sequence (id 2) partway, moved by
    `stop_shift` tokens (a candidate that stops elsewhere; past the budget: it never stops)."""

    slots: int | None
    cache: bool
    wrong_every: int | None
    eos_every: int | None = None
    stop_shift: int = 0
    flavor: str = "generic"
    seen: list[list[int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def info(self) -> dict[str, Any]:
        return {"vocab_size": VOCAB, **({"total_slots": self.slots} if self.slots else {})}

    def complete(self, prompt: list[int], max_tokens: int, top_k: int, extra: Any = None) -> _Completion:
        time.sleep(0.02)  # in flight long enough for a round's requests to overlap
        with self.lock:
            shared = max((common_prefix(prompt, s) for s in self.seen), default=0)
            self.seen.append(list(prompt))
        tokens = [3 + (sum(prompt) * 31 + 7 * i) % (VOCAB - 3) for i in range(max_tokens)]
        if self.wrong_every is not None and sum(prompt) % self.wrong_every == 0 and max_tokens > 1:
            tokens[1] = 3 + (tokens[1] + 100) % (VOCAB - 3)
        finish = "length"
        if extra is not None and self.eos_every and sum(prompt) % self.eos_every == 0:
            end = 1 + sum(prompt) % max(1, max_tokens - 2) + self.stop_shift  # the end-of-sequence token's index
            if end < max_tokens:
                tokens, finish = [*tokens[:end], 2], "stop"
        top = [{t: -0.125, 3 + (t + 1) % (VOCAB - 3): -3.0} for t in tokens]
        cached = min(shared, len(prompt) - 1) if self.cache else 0
        return _Completion(tokens, [-0.125] * len(tokens), top, cached, finish_reason=finish)

    def reset_cache(self) -> str | None:
        return None

    def unreset_tiers(self) -> list[str]:
        return []

    def restart(self) -> bool:
        return False

    @property
    def reused(self) -> bool:
        return self.cache

    def evidence(self) -> dict[str, Any]:
        return {"requests": len(self.seen)}


@dataclass
class _Engine:
    """An EngineServing path serving `_Server`s (the reference: cache off)."""

    name: str
    slots: int | None = 4
    cache: bool = True
    wrong_every: int | None = None
    eos_every: int | None = None
    stop_shift: int = 0
    flavor: str = "generic"
    vocab_size: int = VOCAB
    max_len: int = 512
    top_k: int = 2
    salt_field: str | None = None
    cache_geometry: CacheGeometry = field(default_factory=lambda: CacheGeometry(block_size=16, source="stated"))

    @contextmanager
    def serve(self, label: str = "") -> Iterator[_Server]:
        yield _Server(self.slots, self.cache, self.wrong_every, self.eos_every, self.stop_shift)

    def changed_model(self, perturb_seed: int) -> Any:
        return None

    def reload_weights(self, version: int) -> None:
        raise NotImplementedError("not an engine gate can reload")

    def cache_length(self) -> int:
        return 0

    def crop(self, length: int) -> None:
        raise NotImplementedError("not an engine gate can crop")

    def release_controls(self, keep: set[str]) -> list[str]:
        return []

    def invisible_faults(self) -> dict[str, str]:
        return {}


def _engines(candidate: _Engine, *, stop: bool = False) -> CheckContext:
    context = ctx(path("dynamic"), path("dynamic"))
    context.reference = _Engine("reference", cache=False, eos_every=candidate.eos_every)
    context.candidate = candidate
    context.stop_at_first_failure = stop
    assert Capability.ENGINE_SERVING in capabilities(candidate)
    return context


def test_a_correct_engine_passes_with_every_reply_compared_and_its_cache_hit() -> None:
    out = engine_concurrent_conversations(_engines(_Engine("candidate")), EngineConversationsParams())
    assert out.status == "pass", out.message
    assert out.metrics["requests"] == out.exercise["compared_replies"] == 30  # 10 conversations of 3 turns
    assert out.metrics["rounds_overlapping"] > 0 and out.metrics["system_prefix"] == 256
    assert out.metrics["resumed_after_others"] > 0 and out.exercise["cached_prompt_tokens"] > 0
    assert out.evidence["candidate_slots"] == 4 and not out.evidence["failures"]


def test_a_wrong_reply_fails_naming_its_request_and_a_suspect_and_a_control_stops_at_its_round() -> None:
    params = EngineConversationsParams()
    out = engine_concurrent_conversations(_engines(_Engine("candidate", wrong_every=7)), params)
    assert out.status == "fail"
    failures = out.evidence["failures"]
    assert failures and out.metrics["failed"] == len(failures) < out.metrics["requests"]
    assert out.message.startswith(f"{len(failures)} of 30 replies differ from the reference alone: request ")
    assert "not re-asked (the engine offers no request off its cache)" in failures[0]["message"]
    assert out.diagnosis is not None and out.diagnosis["problems"] == [f["message"] for f in failures]
    assert out.diagnosis["bug_class"] == "continuous-batching"  # what a known_bugs declaration matches on
    first = min(r["prompt_tokens"] for r in out.evidence["requests"] if r["failed"])
    assert out.detected_at == first
    control = engine_concurrent_conversations(_engines(_Engine("candidate", wrong_every=7), stop=True), params)
    assert control.status == "fail" and control.metrics["requests"] < out.metrics["requests"]
    rounds = {r["round"] for r in control.evidence["requests"]}
    assert max(rounds) == min(r["round"] for r in out.evidence["requests"] if r["failed"])


def test_a_single_slot_candidate_is_not_exercised_and_unproven_not_failed() -> None:
    out = engine_concurrent_conversations(_engines(_Engine("candidate", slots=1)), EngineConversationsParams())
    assert out.status == "unproven" and out.message.startswith("not exercised: ")
    assert "the candidate states 1 slot: it serves one request at a time" in out.message


def test_the_dossier_lists_each_mechanism_aimed_at_and_reached_with_the_logs_counters() -> None:
    from gate.checks.engine_concurrent_conversations.evidence import ConversationsEvidence
    from gate.core.evidence import MechanismReach
    from gate.report.evidence import read_evidence

    reached = MechanismReach(
        mechanism="window-edge", aimed=True, lengths=[64, 65], requests=2, reached=True, evidence="2 of 2 reused"
    )
    out = MechanismReach(
        mechanism="checkpoint-interval", aimed=False, lengths=[], requests=0, reached=False, evidence="spacing 8192"
    )
    evidence = ConversationsEvidence(
        claim="tolerance", cache_geometry="block 1", system_prefix=256, tenants=3, conversations=8, turns=3,
        max_concurrent=4, candidate_slots=3, rounds=6, rounds_overlapping=6, requests=[], failures=[],
        cache_tiers_not_reset=[], servers={}, mechanisms=[reached, out],
        engine_log_counters={"checkpoint_restores": 3, "restores_short_of_window": 1},
    )  # fmt: skip
    views = read_evidence("engine-concurrent-conversations", evidence.dump())
    assert not views.notes
    [table] = [t for t in views.tables if t.title.startswith("The candidate's reuse mechanisms")]
    assert table.rows[0] == ["window-edge", "True", "64, 65", "2", "True", "2 of 2 reused"]
    assert table.rows[1][0] == "checkpoint-interval" and table.rows[1][-1] == "spacing 8192"
    assert "checkpoint_restores 3, restores_short_of_window 1" in table.note


def test_a_warned_reply_is_set_against_the_noise_floor_measured_off_the_cache() -> None:
    """The b11549 sliding-window run's warning: an edited turn 86 of 112 tokens reused, |Δlogprob| 6.5e-3
    against a floor of 9.02e-4 (7.2 x: beyond it, a tolerance finding); a near-tie within it is said so."""
    from gate.checks._noise import NoiseFloor
    from gate.checks.engine_concurrent_conversations.body import Judgement, _worst_warned
    from gate.checks.engine_concurrent_conversations.evidence import ConversationRequest

    def row(ident: int, delta: float, warned: bool) -> ConversationRequest:
        return ConversationRequest(
            id=ident, conversation=1006, tenant=-1, turn=1, round=-6, kind="its last turn edited [edited-turn]",
            prompt_tokens=112, cached_tokens=86, tokens_match=True, first_divergence=None, max_abs_dlogprob=delta,
            tie=False, failed=False, warned=warned,
        )  # fmt: skip

    noise = NoiseFloor(pairs=120, worst=0.000451, median=1.7e-6, flips=0, off_cache="cache_prompt=False")
    rows = [row(23, 0.0022, False), row(24, 0.00651, True), row(25, 0.005, True)]
    j = Judgement("held", rows, [], None, 0, 0, 0, warned=2)
    words = _worst_warned(SimpleNamespace(noise=noise), j)  # type: ignore[arg-type]
    assert words.startswith(" (the furthest: request 24, its last turn edited [edited-turn], 86 of 112 prompt")
    assert "max |Δlogprob| 0.00651, 7.2 x the noise floor 0.000902 measured off the cache: beyond it" in words
    tie = Judgement("held", [row(7, 0.0004, True)], [], None, 0, 0, 0, warned=1)
    assert "0.4 x the noise floor 0.000902 measured off the cache: within it" in _worst_warned(
        SimpleNamespace(noise=noise),
        tie,  # type: ignore[arg-type]
    )
