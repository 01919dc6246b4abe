"""engine-concurrent-conversations' workload and its naming of a leak, without a server (the check
itself runs against a real llama-server in tests/adapters/openai/test_llamacpp_tiers.py)."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from gate.checks.engine_concurrent_conversations.body import _Request, _schedule, _suspect


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


def _request(id: int, conversation: int, round: int, prompt: list[int], reply: list[int], want: list[int]) -> _Request:
    req = _Request(id, conversation, conversation % 2, 0, round, "fresh", prompt)
    req.reply, req.want = _Reply(reply), _Reply(want)  # type: ignore[assignment]
    return req


def test_a_reply_equal_to_another_requests_answer_is_named_with_it() -> None:
    a = _request(0, 0, 0, [1, 2, 3, 4], [9, 9], [9, 9])
    b = _request(1, 1, 0, [1, 2, 7, 8], [9, 9], [5, 6])  # b answered what a should have
    other, how = _suspect(b, [a, b])
    assert other is a and "equals the reference's answer" in how


def test_otherwise_the_other_conversations_prompt_sharing_the_most_is_named() -> None:
    a = _request(0, 0, 0, [1, 2, 3, 4], [9, 9], [9, 9])
    c = _request(1, 1, 0, [1, 2, 3, 5], [4, 4], [8, 8])
    d = _request(2, 2, 0, [1, 6, 6, 6], [3, 3], [3, 3])
    failing = _request(3, 3, 1, [1, 2, 3, 4, 7], [0, 0], [1, 1])
    later = _request(4, 4, 2, [1, 2, 3, 4, 7], [0, 0], [2, 2])  # sent after it: never a suspect
    other, how = _suspect(failing, [a, c, d, failing, later])
    assert other is a and "4 tokens" in how


def test_with_no_other_conversation_sent_before_none_is_named() -> None:
    only = _request(0, 0, 0, [1, 2], [3], [4])
    assert _suspect(only, [only])[0] is None


def test_the_dossier_reads_the_evidence_into_its_tables() -> None:
    from gate.core.evidence import ConversationFailure, ConversationRequest, ConversationsEvidence
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
