"""cache-identity: a request that differs from a cached one in any identity field must not reuse it.

On a fresh worker a base prompt P is served, then served again: it must hit (else the cache is off
and no miss below proves anything). Then, for every identity field the manifest declares (the
policy makes it declare the required ones), P is served once more differing only in that field:

* token-ids: one token changed in block 1: exactly block 0 is reused, nothing after it;
* positions: P's later blocks at offset 0: nothing is reused;
* adapter, tenant: the same worker, another adapter or tenant;
* model-revision, tokenizer, rope-scaling, attention-window, attention-mask, kv-dtype: a sibling
  worker sharing the cache store that differs in that field alone (`PrefixCaching.sibling`).

Each such request must reuse nothing (or be refused), must still match its own uncached
computation, and must hit when repeated (the variant is cacheable, so its miss was a decision).
The cache-identity example (background) holds exactly on a block-size-1 worker: after [11, 24, 31, 42, 57], the request
[11, 24, 99, 42, 57] reuses positions 0 and 1 and never the later equal ids.

Where the store reports the identity it keys on (`PrefixIdentityReport`), the report is held against
the keying observed: a perturbed field the report says nothing about must not separate entries,
and one it names must (and a sibling must report exactly the field it varies). A field the store
cannot vary (no siblings, no adapters) is `unproven`, with the capability named.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gate.checks._shape import lazy_body
from gate.checks.cache_identity.evidence import CacheIdentityEvidence
from gate.core.check import Params
from gate.core.manifest import IdentityField
from gate.protocols import Capability


class CacheIdentityParams(Params):
    """Which fields to vary and how long the probe is."""

    fields: list[IdentityField] | None = None
    """Identity fields to probe; default: every field the manifest declares."""
    prompt_blocks: int = Field(default=3, ge=2, le=64)
    """Full blocks in the probe prompt (its length is prompt_blocks * block_size + 2)."""
    seed_example_block_size: int = Field(default=1, ge=1, le=2)
    """Block size of the worker that replays the cache-identity example (1 or 2 keeps it meaningful)."""
    unverifiable: Literal["unproven", "fail", "warn"] = "unproven"
    """What a declared field the candidate cannot vary (no siblings, no adapters) does: unproven names
    it and the policy rule's `missing_capability` decides; fail or warn override that."""


CARD, PARAMS, EVIDENCE = "cache-identity", CacheIdentityParams, CacheIdentityEvidence
NEEDS = frozenset({Capability.PREFIX_SERVING})
__getattr__ = lazy_body(__name__)


__all__ = ["CARD", "EVIDENCE", "NEEDS", "PARAMS", "CacheIdentityParams"]
