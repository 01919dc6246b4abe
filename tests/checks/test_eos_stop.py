"""Requests that end at end-of-sequence (gate.checks._eos): the reference picks the prompts, the candidate
must stop where it stops; and engine-concurrent-conversations sends, judges and counts them, against the
in-process engine pair of test_concurrent_conversations (replies a function of the prompt, a reply with
its stop on ending at id 2 on some prompts). Against llama.cpp: tests/adapters/openai/test_eos_llamacpp.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from gate.checks._eos import eos_fields, eos_reach, select_eos_prompts, stop_problem, stopped_at_eos
from gate.checks.engine_concurrent_conversations import EngineConversationsParams, engine_concurrent_conversations
from tests.checks.test_concurrent_conversations import _Engine, _engines


@dataclass
class _Reply:
    tokens: list[int]
    finish_reason: str | None


def test_a_reply_stopped_at_eos_ends_with_stop_short_of_the_budget() -> None:
    assert stopped_at_eos(_Reply([5, 6, 2], "stop"), 8)
    assert not stopped_at_eos(_Reply([5] * 8, "length"), 8)
    assert not stopped_at_eos(_Reply([5] * 7 + [2], "stop"), 8)  # not fewer tokens than asked
    assert not stopped_at_eos(_Reply([5, 6], None), 8)  # a reply that does not say why it ended


def test_the_reference_picks_the_prompts_it_ends_in_order_up_to_keep() -> None:
    asked: list[tuple[list[int], int, dict[str, Any]]] = []

    def ask(prompt: list[int], budget: int, fields: dict[str, Any]) -> _Reply:
        asked.append((prompt, budget, fields))
        return _Reply([9, 2], "stop") if prompt[0] % 3 == 0 else _Reply([9] * budget, "length")

    prompts = [[i, 7] for i in range(1, 20)]
    chosen = select_eos_prompts(ask, prompts, {"ignore_eos": False}, budget=16, keep=2)  # type: ignore[arg-type]
    assert [p for p, _ in chosen.chosen] == [[3, 7], [6, 7]] and chosen.tried == 6 == len(asked)
    assert all(budget == 16 and fields == {"ignore_eos": False} for _, budget, fields in asked)
    assert chosen.words() == (
        "2 of 6 seeded prompts stopped at end-of-sequence within 16 tokens on the reference; "
        "2 sent without ignore_eos (stopping after 2, 2 tokens)"
    )
    none = select_eos_prompts(ask, [[1], [2], [4]], {}, budget=16)  # type: ignore[arg-type]
    assert not none.chosen and none.tried == 3
    assert none.words() == (
        "no prompt of 3 stopped at end-of-sequence within 16 tokens on the reference: "
        "the end-of-sequence path was not reached"
    )


def test_only_engines_that_ignore_eos_on_gates_request_are_told_not_to() -> None:
    assert eos_fields("llama.cpp") == eos_fields("vllm") == {"ignore_eos": False}
    assert eos_fields("generic") == eos_fields("sglang") == {}


STOPPED = _Reply([5, 6, 7, 2], "stop")


@pytest.mark.parametrize(
    ("want", "got", "words", "certain"),
    [
        (STOPPED, _Reply([5, 6, 7, 2], "stop"), None, None),
        (
            STOPPED,
            _Reply([5, 6, 7, 2, 8, 9], "length"),
            "runs past the reference's end-of-sequence at token 4: 6",
            True,
        ),
        # an engine that leaves its stop token out of the reply
        (
            _Reply([5, 6], "stop"),
            _Reply([5, 6, 7], "length"),
            "runs past the reference's end-of-sequence at token 2",
            True,
        ),
        (STOPPED, _Reply([5, 6], "stop"), "stops early at token 2: 2 tokens (finish_reason stop)", True),
        (STOPPED, _Reply([5, 6, 7, 2], "length"), "the same 4 tokens, but finish_reason length where", True),
        # another token in place of the reference's end, or an end in place of its token: the top-k rule decides
        (
            STOPPED,
            _Reply([5, 6, 7, 9, 4], "length"),
            "runs past the reference's end-of-sequence at token 3: token 9",
            False,
        ),
        (STOPPED, _Reply([5, 2], "stop"), "stops early at token 1: its reply ends there", False),
        (STOPPED, _Reply([5, 8, 7, 2], "stop"), None, None),  # diverged before either end: the top-k rule's alone
    ],
)
def test_the_candidate_must_stop_where_the_reference_stops(
    want: _Reply, got: _Reply, words: str | None, certain: bool | None
) -> None:
    found = stop_problem(want, got)  # type: ignore[arg-type]
    if words is None:
        assert found is None
    else:
        assert found is not None and found.words.startswith(words) and found.certain is certain, found


def _eos_rows(out: Any) -> list[dict[str, Any]]:
    return [r for r in out.evidence["requests"] if r.get("aim") == "eos-stop"]


def test_a_candidate_that_stops_where_the_reference_does_passes_with_the_mechanism_reached() -> None:
    out = engine_concurrent_conversations(_engines(_Engine("candidate", eos_every=3)), EngineConversationsParams())
    assert out.status == "pass", out.message
    rows = _eos_rows(out)
    opened = [r for r in rows if r.get("eos")]
    assert len(opened) == 4 and len(rows) == 8  # four openings that end, each continued after its end
    assert all(r["aimed_at"] < 64 for r in opened) and not any(r["failed"] for r in rows)
    continued = [r for r in rows if not r.get("eos")]  # each sent with ignore_eos as usual, its history ending at 2
    assert {r["conversation"] for r in continued} == {r["conversation"] for r in opened}
    first = {r["conversation"]: r for r in opened}
    for r in continued:  # the opening, its reply up to and including the stop, a fresh 24-token turn
        opening = first[r["conversation"]]
        assert r["turn"] == 1 and r["prompt_tokens"] == opening["prompt_tokens"] + opening["aimed_at"] + 24
    reach = {m["mechanism"]: m for m in out.evidence["mechanisms"]}["eos-stop"]
    assert reach["aimed"] and reach["reached"] and reach["requests"] == 8
    assert "within 64 tokens on the reference; 4 sent without ignore_eos" in reach["evidence"]
    assert "mechanisms reached: eos-stop" in out.message
    assert out.metrics["requests"] == 30 + 8


@pytest.mark.parametrize(
    ("shift", "words"),
    [(3, "runs past the reference's end-of-sequence at token"), (40, "runs past"), (-1, "stops early at token")],
)
def test_a_candidate_that_stops_elsewhere_fails_naming_the_request_and_token(shift: int, words: str) -> None:
    candidate = _Engine("candidate", eos_every=3, stop_shift=shift)
    out = engine_concurrent_conversations(_engines(candidate), EngineConversationsParams())
    assert out.status == "fail"
    failed = [r for r in _eos_rows(out) if r["failed"]]
    assert failed and all(r["eos"] and words in r["stop"] for r in failed), failed
    first = failed[0]
    assert f"request {first['id']} (conversation {first['conversation']} turn 0" in out.message
    assert "ends at end-of-sequence on the reference [eos-stop]" in out.message and words in out.message


def test_no_prompt_that_ends_is_said_so_not_reached() -> None:
    params = EngineConversationsParams(eos_candidates=10)
    out = engine_concurrent_conversations(_engines(_Engine("candidate")), params)
    assert out.status == "pass" and not _eos_rows(out)
    reach = {m["mechanism"]: m for m in out.evidence["mechanisms"]}["eos-stop"]
    assert reach["aimed"] and not reach["reached"] and reach["requests"] == 0
    assert reach["evidence"].startswith("no prompt of 10 stopped at end-of-sequence within 64 tokens")
    assert "aimed at but not reached: eos-stop (no prompt of 10 stopped" in out.message


def test_the_reach_of_an_empty_selection_sent_nowhere() -> None:
    from gate.checks._eos import EosSelection

    reach = eos_reach(EosSelection(tried=0, budget=32), [])
    assert not reach.aimed and not reach.reached
    off = engine_concurrent_conversations(
        _engines(_Engine("candidate", eos_every=3)), EngineConversationsParams(eos_candidates=0)
    )
    assert not _eos_rows(off) and "eos-stop" not in {m["mechanism"] for m in off.evidence.get("mechanisms", [])}


@dataclass
class _Completion:
    tokens: list[int]
    finish_reason: str | None
    cached_tokens: int | None = 0
    seconds: float = 0.0

    @property
    def logprobs(self) -> list[float]:
        return [-0.5] * len(self.tokens)

    @property
    def top(self) -> list[dict[int, float]]:
        return [{t: -0.5, t + 1: -3.0} for t in self.tokens]


def test_prefix_parity_judges_each_eos_prompt_at_its_stop_first_and_again_from_the_cache() -> None:
    from gate.checks.engine_prefix_parity.body import Observations, judge_lengths
    from tests.support.reference import ctx, path

    want = _Completion([5, 6, 7, 2], "stop")
    same = _Completion([5, 6, 7, 2], "stop", cached_tokens=0)
    past = _Completion([5, 6, 7, 2, 8, 9], "length", cached_tokens=63)  # asked again: runs past from the cache
    length = (17, _Completion([4] * 8, "length"), _Completion([4] * 8, "length", 17))
    obs = Observations(8192, None, None, [17], [], [length], {}, None, [(want, same, past)])  # type: ignore[arg-type]
    context = ctx(path("dynamic"), path("dynamic"))
    judged = judge_lengths(context, obs)
    assert [r["request"] for r in judged.eos_rows] == ["first", "again"]
    assert [r["failed"] for r in judged.eos_rows] == [False, True]
    assert judged.failures == [
        "end-of-sequence prompt 0 (asked again, 63 cached tokens): runs past the reference's end-of-sequence at "
        "token 4: 6 tokens (finish_reason length) where the reference's reply ended after 4"
    ]
    assert judged.eos_rows[1]["stop"] and judged.eos_rows[0]["stop"] is None
