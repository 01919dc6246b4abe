"""engine-concurrent-conversations: every reply of a concurrent multi-tenant chat workload equals the
same prompt answered alone by the reference.

A serving engine holds many conversations at once: several tenants, each with its own system
prefix, their conversations interleaved, more of them than it has slots, so a slot is handed from
one conversation to another and a conversation that comes back is restored from a cache tier (or
recomputed). State that crosses between requests there (a slot or a cached prefix of one
conversation served to another) is the leak this check looks for.

The workload is seeded: `tenants` system prefixes several cache blocks long (the length derived
from the candidate's cache geometry, gate.adapters.openai.geometry: `prefix_blocks` whole blocks,
at least `min_prefix` tokens for an engine that reuses any prefix), `conversations` conversations
of `turns` turns each (fresh private tokens per turn; each later turn's prompt is the whole history:
the previous prompt, the candidate's reply, the new turn). The requests go out in rounds of up to
`max_concurrent` at once (sent at the same moment from as many threads); each round mixes fresh
conversations with ones resumed after other conversations took their turns, and a conversation is
never sent in two rounds in a row while another one waits. Every reply of the candidate is then
compared with the reference's answer to exactly the same prompt, sent alone, under the claim
(the top-k rule and its tie awareness, gate.checks._topk).

A reply that fails names its request and the other request whose state it most likely carries:
another request whose reference answer it equals, else the other conversation's request whose
prompt shares the most tokens with it (the cached prefix it would have been served from), with
the requests in flight beside it.

Replies that end where the engine stops (gate.checks._eos): every other request asks for an exact
length (`ignore_eos`), so last, `eos_candidates` seeded conversation openings are sent to the reference
alone with the engine's stop on; those it ends at end-of-sequence within `eos_budget` tokens (up to 4)
go to the candidate together, stop on, and must stop where the reference stops (same tokens up to and
including the stop, same finish reason); each is then continued after its end (its history holds the
end-of-sequence token). The mechanism `eos-stop` is listed as reached only when some opening stopped
on the reference; where none did, the evidence says so.

Proof of exercise: some round overlapped in time, the candidate has more than one slot (where it
states its slots), and the candidate reported reused prompt tokens (the shared system prefixes
and the restored conversations). The cache tiers the handed-over server's reset could not reach
are named in the evidence and the message.
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
