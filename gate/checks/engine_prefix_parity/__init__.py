"""engine-prefix-parity: an engine's prefix cache gives what the same engine gives with it off.

Two server processes (never two request flags on one process, which may share allocator state and
hide the bug). Per planned length a warm-up with the prefix and another suffix makes the candidate
cache the prefix; then prefix + suffix goes to both servers and is compared under the claim
(gate.checks._engine). Every such request asks for an exact length (`ignore_eos`); `eos_candidates`
adds prompts that end at end-of-sequence (gate.checks._eos). No request asks for prompt logprobs
(vLLM skips its prefix cache for such a request). `planned_lengths` lives here, torch-free, so
`gate plan` states the lengths (gate.checks._coverage).
"""

from __future__ import annotations

import math

from pydantic import Field

from gate.checks._eos import EOS_BUDGET
from gate.checks._lengths import NEW_TOKENS, clip_lengths, geometry_lengths
from gate.checks._shape import lazy_body
from gate.core.check import Params
from gate.protocols import Capability

DEFAULT_LENGTHS = [1, 17, 200, 2048, 8192]
SUFFIX = 4
EOS_PROMPT = 64
"""Length of the seeded prompts tried for an end at end-of-sequence."""


class EnginePrefixParams(Params):
    """Prefix lengths and the continuation compared."""

    lengths: list[int] = Field(default_factory=lambda: list(DEFAULT_LENGTHS), min_length=1)
    """Prefix lengths (clipped to the context)."""
    dense: int = Field(default=0, ge=0, le=64)
    """Extra log-spaced lengths between 1 and the longest (denser sweep on request)."""
    new_tokens: int = Field(default=NEW_TOKENS, ge=1, le=64)
    """Greedy tokens compared after each prompt."""
    geometry: bool = True
    """Plan the lengths on the candidate's reuse block (its edges ±1 and multiples); false: `lengths` as given."""
    eos_candidates: int = Field(default=0, ge=0, le=1024)
    """Seeded 64-token prompts the reference is asked to continue with its stop on (no ignore_eos); those it
    ends at end-of-sequence within `eos_budget` tokens (up to 4) go to the candidate twice, the second
    served from the cache its first reply left, and must stop where the reference stops (gate.checks._eos).
    0 (the default): none. Off by default: the repeated prompt is the first gate sends an engine twice, and on
    llama.cpp with n-gram speculative decoding it makes the drafter draft the earlier reply, whose drafted
    tokens come back with logprob 0 (a live bug, docs/real-bugs.md): `64` turns it on
    (`--param engine-prefix-parity.eos_candidates=64`) once the examples' expectations say so."""
    eos_budget: int = Field(default=EOS_BUDGET, ge=2, le=256)
    """Tokens each of those requests may decode."""


def planned_lengths(params: EnginePrefixParams, limit: int, block: int | None) -> list[int]:
    """The lengths the check visits: `lengths` (and `dense`) planned on the reuse block, clipped to `limit`."""
    lengths = list(params.lengths)
    if params.dense:
        top = max(2, min(max(lengths), limit))
        lengths += [round(math.exp(math.log(top) * (i + 1) / (params.dense + 1))) for i in range(params.dense)]
    if not params.geometry:
        return sorted(clip_lengths(lengths, limit))
    return geometry_lengths(block, limit, lengths)


CARD, PARAMS, EVIDENCE = "engine-prefix-parity", EnginePrefixParams, None
NEEDS = frozenset({Capability.ENGINE_SERVING})
__getattr__ = lazy_body(__name__)


__all__ = ["CARD", "DEFAULT_LENGTHS", "EVIDENCE", "NEEDS", "PARAMS", "SUFFIX", "EnginePrefixParams", "planned_lengths"]
