"""cache-identity: a request that differs from a cached one in any identity field must not reuse it.

A base prompt P is served twice (the repeat must hit), then once per declared field, differing in
that field alone: token-ids and positions change P's tokens, adapter and tenant vary on the same
worker, the other fields on a sibling worker sharing the store (`PrefixCaching.sibling`). Where
the store reports its identity (`PrefixIdentityReport`), the report is held against the keying.
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
