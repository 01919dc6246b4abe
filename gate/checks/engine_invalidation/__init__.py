"""engine-invalidation: after a cache reset, or a restart with changed weights, no stale hit is served.

1. reset: a prompt served twice (the repeat must hit), the engine's own reset, the prompt again.
   Reuse from a tier the reset cannot reach is named, not judged, and gate restarts the candidate's
   server (a new process handed over to later checks); a tier neither can empty leaves it unproven;
2. restart with changed weights (when gate launches the servers): the weights must really have
   changed the reference's output, or the step tests nothing.

A part the engine cannot run is not exercised; a run where no part could run is an error.
"""

from __future__ import annotations

from pydantic import Field

from gate.checks._lengths import NEW_TOKENS
from gate.checks._shape import lazy_body
from gate.core.check import Params
from gate.protocols import Capability


class EngineInvalidationParams(Params):
    """Prompt size and the changed weights."""

    length: int = Field(default=256, ge=2)
    """Prompt length (clipped to the context)."""
    perturb_seed: int = Field(default=101, ge=0)
    """Seed of the weight change for a tiny model."""
    changed_model_file: str | None = None
    """Another model file for the restart (when the servers load model files)."""
    new_tokens: int = Field(default=NEW_TOKENS, ge=1, le=64)
    """Greedy tokens compared."""


CARD, PARAMS, EVIDENCE = "engine-invalidation", EngineInvalidationParams, None
NEEDS = frozenset({Capability.ENGINE_SERVING})
__getattr__ = lazy_body(__name__)


__all__ = ["CARD", "EVIDENCE", "NEEDS", "PARAMS", "EngineInvalidationParams"]
