"""engine-concurrent-conversations: every reply of a concurrent multi-tenant chat workload equals the
same prompt answered alone by the reference.

The workload is seeded: `tenants` system prefixes `prefix_blocks` of the candidate's reuse blocks
long (at least `min_prefix` tokens), `conversations` conversations of `turns` turns (each later turn's
prompt is the whole history), sent in rounds of up to `max_concurrent` at once from as many threads.
Before them, requests aimed at each reuse mechanism (`aim`, gate.checks._mechanisms); after them,
`eos_candidates` openings (gate.checks._eos). A failing reply names the other request whose state it
carries, where the evidence shows it, and is asked again alone off the cache. Proof of exercise: some
round overlapped in time, the candidate has more than one slot (where stated), and it reported a hit.
"""

from __future__ import annotations

from pydantic import Field

from gate.checks._eos import EOS_BUDGET, EOS_CANDIDATES
from gate.checks._lengths import NEW_TOKENS, PREFIX_BLOCKS
from gate.checks._shape import lazy_body
from gate.checks.engine_concurrent_conversations.evidence import ConversationsEvidence
from gate.core.check import Params
from gate.protocols import Capability


class EngineConversationsParams(Params):
    """The workload: tenants, conversations, turns and how many are in flight at once."""

    tenants: int = Field(default=3, ge=1, le=16)
    """Distinct system prefixes (tenants); conversation i belongs to tenant i mod tenants."""
    private: int = Field(default=2, ge=0, le=16)
    """Of the conversations, the last `private` open with no system prefix: no slot shares anything with
    them, so when one is resumed after others only a cache tier that kept it (llama.cpp's host-memory
    prompt cache) can serve its history."""
    conversations: int | None = Field(default=None, ge=2, le=64)
    """Conversations in the workload (default: twice the candidate's slots plus two, at least 8, at
    most 16: more conversations than slots, so slots are handed over and conversations restored)."""
    turns: int = Field(default=3, ge=1, le=8)
    """Turns per conversation."""
    turn_tokens: int = Field(default=24, ge=1, le=512)
    """Fresh private tokens each turn adds."""
    prefix_blocks: int = Field(default=PREFIX_BLOCKS, ge=1, le=64)
    """System prefix length in the candidate's reuse blocks (gate.adapters.openai.geometry)."""
    min_prefix: int = Field(default=256, ge=1, le=16384)
    """Shortest system prefix (for an engine that reuses any prefix, block 1, or states no block)."""
    max_concurrent: int | None = Field(default=None, ge=2, le=64)
    """Requests in flight at once (default: the candidate's slots plus one, so one waits; 4 where the
    engine states no slots; at most 8)."""
    new_tokens: int = Field(default=NEW_TOKENS, ge=1, le=64)
    """Greedy tokens each reply decodes (and each one compared)."""
    aim: bool = True
    """Before the seeded rounds, aim requests at each reuse mechanism the candidate's cache geometry
    names (gate.checks._mechanisms: the sliding window's edge, context checkpoints, the sliding-window
    cache's room per slot, the host-memory prompt cache, edited turns)."""
    eos_candidates: int = Field(default=EOS_CANDIDATES, ge=0, le=1024)
    """Seeded conversation openings the reference is asked to continue with its stop on (no ignore_eos);
    those it ends at end-of-sequence within `eos_budget` tokens (up to 4) are sent to the candidate, judged
    at the stop, then continued (gate.checks._eos). 0: none."""
    eos_budget: int = Field(default=EOS_BUDGET, ge=2, le=256)
    """Tokens each of those requests may decode."""


CARD, PARAMS, EVIDENCE = "engine-concurrent-conversations", EngineConversationsParams, ConversationsEvidence
NEEDS = frozenset({Capability.ENGINE_SERVING})
__getattr__ = lazy_body(__name__)


__all__ = ["CARD", "EVIDENCE", "NEEDS", "PARAMS", "EngineConversationsParams"]
