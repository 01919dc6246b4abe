"""invalidation: after an update or a restart, no entry of an incompatible computation is consumed.

Release-gate step 8 (background: isolation; vLLM resets its prefix cache when weights change). Every
request is compared with the store's own uncached computation at that moment:

1. weight update (`PrefixWeightUpdates`): a prompt is served twice (the repeat must hit), the weights
   change, and the next request must reuse nothing; a repeat after that must hit again (the cache
   still works);
2. adapter update: the same for one adapter's weights (stores that serve adapters);
3. restart (`PrefixSnapshots`): a store's cache is saved; the store restarted on another checkpoint
   under an unchanged revision label restores it, and must admit none of it and serve none of it;
   restarted on the same checkpoint it must admit every block it wrote and reuse them, exactly.
   Admitting saved blocks onto other weights under the same label is the design hazard
   `restart-admits-same-revision` (gate.core.hazards), named so with the configuration that avoids it.

A part whose capability the store lacks is `unproven`, named; a store with neither is unproven as a whole.
"""

from __future__ import annotations

from pydantic import Field

from gate.checks._shape import lazy_body
from gate.checks.invalidation.evidence import InvalidationEvidence
from gate.core.check import Params
from gate.protocols import Capability


class InvalidationParams(Params):
    """Update seeds and probe sizes."""

    update_seed: int = Field(default=1, ge=0)
    """Seed of the weight and adapter updates."""
    prompt_blocks: int = Field(default=3, ge=1, le=64)
    """Full blocks per prompt (its length is prompt_blocks * block_size + 1)."""


CARD, PARAMS, EVIDENCE = "invalidation", InvalidationParams, InvalidationEvidence
NEEDS = frozenset({Capability.PREFIX_SERVING})
__getattr__ = lazy_body(__name__)


__all__ = ["CARD", "EVIDENCE", "NEEDS", "PARAMS", "InvalidationParams"]
