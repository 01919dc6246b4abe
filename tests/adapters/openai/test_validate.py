"""The bounds gate.adapters.openai.validate puts on what an engine reports (the hostile server tests
exercise them over HTTP; these pin the edges)."""

from __future__ import annotations

from array import array

import pytest

from gate.adapters.openai import validate
from gate.adapters.openai.validate import CacheHistory, chunk_reuse, lcp
from gate.errors import EngineBadReply


def test_the_longest_common_prefix() -> None:
    a = array("i", [1, 2, 3, 4, 5])
    assert [lcp(a, array("i", b)) for b in ([1, 2, 3, 4, 5], [1, 2, 9], [], [2], [1, 2, 3, 4, 5, 6])] == [5, 2, 0, 0, 5]


def test_chunk_reuse_is_read_from_the_launch_command() -> None:
    assert chunk_reuse(["llama-server", "--cache-reuse", "16"]) and chunk_reuse(["llama-server", "--cache-reuse=8"])
    assert not chunk_reuse(["llama-server", "--cache-reuse", "0"]) and not chunk_reuse(["llama-server", "-c", "16"])


def test_a_cache_is_bounded_by_what_was_sent_to_it() -> None:
    history = CacheHistory()
    first = history.sent([1, 2, 3, 4])
    with pytest.raises(EngineBadReply, match="on the first request"):
        history.check(2, "timings.cache_n", first, [1, 2, 3, 4], "s")
    history.check(0, "timings.cache_n", first, [1, 2, 3, 4], "s")
    history.served(first, [1, 2, 3, 4], [7, 8])
    second = history.sent([1, 2, 3, 4, 7, 8, 9])
    history.check(6, "timings.cache_n", second, [1, 2, 3, 4, 7, 8, 9], "s")  # the reply it generated is cached too
    with pytest.raises(EngineBadReply, match=r"timings.cache_n is 7, more than the 6 tokens"):
        history.check(7, "timings.cache_n", second, [1, 2, 3, 4, 7, 8, 9], "s")


def test_an_engine_that_reuses_chunks_is_bounded_by_the_prompt_only() -> None:
    history = CacheHistory(prefix_only=False)
    history.served(history.sent([1, 2, 3, 4]), [1, 2, 3, 4], [5])
    history.check(3, "timings.cache_n", history.sent([9, 2, 3, 4]), [9, 2, 3, 4], "s")
    with pytest.raises(EngineBadReply, match="on the first request"):
        CacheHistory(prefix_only=False).check(1, "timings.cache_n", 0, [1, 2], "s")


def test_counts_are_whole_numbers_in_range() -> None:
    assert validate.whole(3, "f", "s", high=3) == 3
    for bad in (True, 3.0, "3", None, -1, 4):
        with pytest.raises(EngineBadReply, match="f is"):
            validate.whole(bad, "f", "s", high=3)
    for value in (float("nan"), float("inf"), float("-inf"), 0.5):
        with pytest.raises(EngineBadReply, match="not a log probability"):
            validate.logprob(value, "the logprob", "s")
    assert validate.logprob(-3.4e38, "the logprob", "s") == -3.4e38  # llama.cpp's log(0)
