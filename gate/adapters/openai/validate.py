"""An engine's reply is data to check, never a statement to take on trust.

Every number gate reads from an engine is checked before a check sees it; a violation is a bad reply
(`EngineBadReply`, exit 14) naming the field. On a server gate launched, a cache can only hold what
was sent to it since it started (`CacheHistory`): a hit on its first request, or more cached tokens
than the prompt shares with anything sent before, is refused. An engine that reuses chunks after a
mismatch (llama.cpp `--cache-reuse`), and a `base_url` server, are bounded by the prompt's length only.
"""

from __future__ import annotations

import math
import threading
from array import array
from collections.abc import Sequence
from typing import Any

from gate.errors import EngineBadReply

LOGPROB_SLACK = 1e-3
"""How far above 0 a reported logprob may be (float rounding of log(1)); more is not a probability."""
MAX_VOCAB = 1 << 24
MAX_CONTEXT = 1 << 31
MAX_SLOTS = 4096
HISTORY_TOKENS = 1 << 23
"""Tokens of history kept per server (32 MiB); past it, only the prompt's length bounds a hit."""


def whole(value: Any, field: str, where: str, *, low: int = 0, high: int | None = None) -> int:
    """A count from a reply: an integer (JSON true/false and 3.0 are not) within [low, high]."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise EngineBadReply(f"{where}: {field} is {_shown(value)}, not a whole number")
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise EngineBadReply(f"{where}: {field} is {value}, which is impossible: it must be {bound}")
    return value


def logprob(value: float, field: str, where: str) -> float:
    """A logprob: finite and at most 0 (within LOGPROB_SLACK)."""
    if not math.isfinite(value) or value > LOGPROB_SLACK:
        raise EngineBadReply(f"{where}: {field} is {value!r}, not a log probability (a finite number <= 0)")
    return value


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "..."


def reported_cached(usage: Any, timings: Any) -> tuple[str, Any] | None:
    """The field that reports cached prompt tokens and its raw value; None when the reply reports none."""
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    if isinstance(details, dict) and details.get("cached_tokens") is not None:
        return "usage.prompt_tokens_details.cached_tokens", details["cached_tokens"]
    if isinstance(timings, dict) and "cache_n" in timings:
        return "timings.cache_n", timings["cache_n"]
    if isinstance(usage, dict) and usage.get("cache_read_input_tokens") is not None:
        return "usage.cache_read_input_tokens", usage["cache_read_input_tokens"]
    return None


def objects(usage: Any, timings: Any, where: str) -> None:
    """`usage` and `timings` are JSON objects where a reply has them."""
    for name, value in (("usage", usage), ("timings", timings)):
        if value is not None and not isinstance(value, dict):
            raise EngineBadReply(f"{where}: {name} is {_shown(value)}, not an object")


def check_tokens(
    tokens: Sequence[int],
    lps: Sequence[float],
    top: Sequence[dict[int, float]],
    *,
    where: str,
    max_tokens: int,
    exact_length: bool,
    vocab: int | None,
) -> None:
    """The generated tokens, their logprobs and top-k lists (module docstring)."""
    if not tokens:
        raise EngineBadReply(f"{where}: the reply carries no generated token with its logprob")
    if not len(tokens) == len(lps) == len(top):
        raise EngineBadReply(
            f"{where}: {len(tokens)} tokens, {len(lps)} logprobs and {len(top)} top-k lists: "
            "positions cannot be aligned"
        )
    if len(tokens) > max_tokens or (exact_length and len(tokens) != max_tokens):
        raise EngineBadReply(
            f"{where}: {len(tokens)} tokens generated where {max_tokens} were asked for"
            + (" (end-of-sequence ignored)" if exact_length else "")
        )
    high = None if not vocab else vocab - 1
    for i, (token, value, alternatives) in enumerate(zip(tokens, lps, top, strict=True)):
        whole(token, f"the id of token {i}", where, high=high)
        logprob(value, f"the logprob of token {i}", where)
        for alt, alt_value in alternatives.items():
            whole(alt, f"a top-k id at token {i}", where, high=high)
            logprob(alt_value, f"the top-k logprob of id {alt} at token {i}", where)


def lcp(a: array[int], b: array[int]) -> int:
    """Length of the longest common prefix of two token arrays (slices compared in C)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        mid = (low + high + 1) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid - 1
    return low


class CacheHistory:
    """What a server gate launched can hold in its cache: every token sequence sent to it (prompts,
    and prompts with what it generated) since it started. Thread-safe (concurrent requests)."""

    def __init__(self, *, prefix_only: bool = True) -> None:
        self.prefix_only = prefix_only
        """False for an engine that reuses chunks after a mismatch: no shared-prefix bound."""
        self._lock = threading.Lock()
        self._seen: list[array[int]] = []
        self._tokens = 0
        self.overflowed = False
        """More than HISTORY_TOKENS were sent: the shared-prefix bound is no longer kept."""
        self.restored = False
        """A saved state was loaded into it (a slot file restored): its cache holds tokens gate did not send
        to this process, so the bound is no longer kept."""

    def sent(self, prompt: Sequence[int]) -> int:
        """Record a prompt about to be sent; its index (for `served`)."""
        with self._lock:
            self._seen.append(array("i", prompt))
            self._tokens += len(prompt)
            self._trim()
            return len(self._seen) - 1

    def served(self, index: int, prompt: Sequence[int], generated: Sequence[int]) -> None:
        """The prompt's entry extended by the tokens the server generated (which it may cache too)."""
        with self._lock:
            if index < len(self._seen):
                self._seen[index] = array("i", [*prompt, *generated])
                self._tokens += len(generated)
                self._trim()

    def _trim(self) -> None:
        if self._tokens > HISTORY_TOKENS:
            self.overflowed, self._seen = True, []

    def check(self, cached: int, field: str, index: int, prompt: Sequence[int], where: str) -> None:
        """Refuse a cached-token count this server cannot have served (module docstring)."""
        if cached == 0:
            return
        with self._lock:
            if self.overflowed or self.restored:
                return
            # everything sent before this reply came back (a concurrent request may have been served first)
            earlier = [seen for i, seen in enumerate(self._seen) if i != index]
        if not earlier:
            raise EngineBadReply(
                f"{where}: {field} is {cached} on the first request this server was sent since gate started it, "
                "when it cannot have cached anything yet (a cache kept outside the process, e.g. on disk, would "
                "serve another run's tokens)"
            )
        if not self.prefix_only:
            return
        mine = array("i", prompt)
        shared = 0
        for seen in reversed(earlier):  # the newest first: the likeliest to share the most
            shared = max(shared, lcp(seen, mine))
            if shared >= cached:
                return
        raise EngineBadReply(
            f"{where}: {field} is {cached}, more than the {shared} tokens this prompt shares with anything sent to "
            "this server before: no prefix cache can have served them"
        )


def chunk_reuse(command: Sequence[str]) -> bool:
    """Whether a launch command turns on reuse of cached chunks after a mismatch (llama.cpp `--cache-reuse N`)."""
    for i, part in enumerate(command):
        value = part.split("=", 1)[1] if part.startswith("--cache-reuse=") else None
        if part == "--cache-reuse" and i + 1 < len(command):
            value = command[i + 1]
        if value is not None and value.strip() not in ("", "0"):
            return True
    return False
