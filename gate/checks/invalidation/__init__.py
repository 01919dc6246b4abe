"""invalidation: after an update or a restart, no entry of an incompatible computation is consumed.

Every request is compared with the store's own uncached computation at that moment: around a
weight (and adapter) update (`PrefixWeightUpdates`), and after a saved cache is restored into
stores restarted on another and on the same checkpoint (`PrefixSnapshots`).
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
