"""hash-collision: with a deliberately weak hash, colliding blocks are detected and not served.

The candidate is rebuilt with a hash of `bits` bits and serves a family of prompts twice, then the
same prompts under other tenants and (where it serves adapters) an adapter, which share buckets too.
Where colliding blocks were served, the workload is replayed under the store's own hash: served
exactly there, the failure is a design hazard of the hash (gate.core.hazards). A store whose hash
cannot be replaced (`PrefixHashing`) leaves the check `unproven`.
"""

from __future__ import annotations

from pydantic import Field

from gate.checks._shape import lazy_body
from gate.checks.hash_collision.evidence import HashCollisionEvidence
from gate.core.check import Params
from gate.protocols import Capability


class HashCollisionParams(Params):
    """Strength of the injected hash and size of the workload."""

    bits: int = Field(default=2, ge=1, le=16)
    """Bits of the injected hash: 2**bits buckets for every block."""
    prompts: int = Field(default=6, ge=2, le=64)
    """Distinct prompts; pairs of them share a first block so chains collide below a common parent."""
    prompt_blocks: int = Field(default=3, ge=1, le=64)
    """Full blocks per prompt (its length is prompt_blocks * block_size + 1)."""


CARD, PARAMS, EVIDENCE = "hash-collision", HashCollisionParams, HashCollisionEvidence
NEEDS = frozenset({Capability.PREFIX_SERVING})
__getattr__ = lazy_body(__name__)


__all__ = ["CARD", "EVIDENCE", "NEEDS", "PARAMS", "HashCollisionParams"]
