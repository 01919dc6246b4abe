"""A reply that leaves out the probabilities it was asked for (gate.checks._engine.unreported_logprobs) and
engine-prefix-parity's class for it, without a server: llama.cpp b8672 with speculative decoding on
(`--spec-type ngram-mod`) answers the right greedy tokens but, after the first, each with logprob 0 and no
top_logprobs (benchmarks/engine_build_bugs.py's speculative-logprobs probe; the real build is run by
.ci/engine-builds.sh on examples/engine-llamacpp-speculative.yaml)."""

from __future__ import annotations

from dataclasses import dataclass

from gate.checks._engine import unreported_logprobs
from gate.checks.engine_prefix_parity.body import Judgement, Observations, failure_class


@dataclass
class _Completion:
    tokens: list[int]
    logprobs: list[float]
    top: list[dict[int, float]]
    cached_tokens: int | None = 0


def _full(tokens: list[int]) -> _Completion:
    return _Completion(tokens, [-1.5] * len(tokens), [{t: -1.5, t + 1: -2.5} for t in tokens])


def _left_out(tokens: list[int]) -> _Completion:
    """The first token's probabilities, then logprob 0 and no top-k (what b8672 answered)."""
    return _Completion(
        tokens, [-1.5] + [0.0] * (len(tokens) - 1), [{tokens[0]: -1.5, tokens[0] + 1: -2.5}] + [{}] * (len(tokens) - 1)
    )


def _obs(replies: list[tuple[int, _Completion, _Completion]]) -> Observations:
    return Observations(8192, None, None, [r[0] for r in replies], [], replies, {})  # type: ignore[arg-type]


def test_positions_without_the_top_k_the_reference_reports_are_named() -> None:
    assert unreported_logprobs(_full([5, 6, 7]), _left_out([5, 6, 7])) == [1, 2]  # type: ignore[arg-type]
    assert unreported_logprobs(_full([5, 6, 7]), _full([5, 6, 7])) == []  # type: ignore[arg-type]
    # other tokens: a wrong reply, not only its reported probabilities
    assert unreported_logprobs(_full([5, 6, 7]), _left_out([5, 9, 7])) == []  # type: ignore[arg-type]


def test_prefix_parity_names_left_out_logprobs_apart_from_a_wrong_cached_reply() -> None:
    want = _full([5, 6, 7])
    left_out = Judgement(failures=["length 1: ...", "length 17: ..."], failed_at=[1, 17])
    assert failure_class(_obs([(1, want, _left_out([5, 6, 7])), (17, want, _left_out([5, 6, 7]))]), left_out) == (
        "unreported-logprobs"
    )
    # one failing length whose reply has every top-k: a reply through the cache that differs
    mixed = _obs([(1, want, _left_out([5, 6, 7])), (17, want, _Completion([5, 6, 7], [-0.2] * 3, want.top))])
    assert failure_class(mixed, left_out) == "cached-reply"
    assert failure_class(_obs([(1, want, want)]), Judgement(no_hit=[1])) == "missed-reuse"
