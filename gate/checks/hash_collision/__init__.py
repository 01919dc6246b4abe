"""hash-collision: with a deliberately weak hash, colliding blocks are detected and not served.

A hash picks a bucket; it is not a proof that two contexts are equal (background: cache identity). The candidate is
rebuilt with a hash of `bits` bits (2**bits buckets), so distinct blocks are bound to collide, and
serves a family of prompts twice over, then the same prompts under another tenant and (where the
store serves adapters) another adapter: the same tokens under another identity share buckets too,
so a store that compares the tokens on a hash hit but trusts the hash to separate identities serves
another tenant's or the base model's blocks. A correct cache compares the stored key material
(tokens, parent, position, identity) before serving: every request reuses exactly what it is
entitled to and matches its uncached computation. The run must show collisions happened, within one
identity and across identities, or it proves nothing. Where colliding blocks were served, the same
workload is replayed under the store's own hash: served exactly there, the failure is a design hazard
of the hash and named so (gate.core.hazards: `weak-hash-across-tenants` where every block served
wrongly held the same tokens under another identity, else `weak-hash-across-contexts`), with the
configuration that avoids it.

A store whose hash cannot be replaced (`PrefixHashing`) leaves the check `unproven`, naming that.
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
