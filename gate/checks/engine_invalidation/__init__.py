"""engine-invalidation: after a cache reset, or a restart with changed weights, no stale hit is served.

1. reset: a prompt is served twice by the candidate (the repeat must hit, or the reset proves
   nothing), the engine's own reset runs (llama.cpp: erase every slot; vLLM: /reset_prefix_cache;
   SGLang: /flush_cache), and the same prompt must then reuse nothing and equal the reference's.
   Where the reset cannot reach a tier (llama.cpp's host-memory prompt cache) or the engine has none,
   reuse from that tier is named, not judged, and gate restarts the candidate's server (a new process
   handed over to later checks): the same prompt must then reuse nothing and equal the reference's.
   A tier that neither can empty (a `base_url` server) leaves the reset unproven;
2. restart with changed weights (when gate launches the servers): both servers restart on other
   weights (a perturbed tiny model, or `changed_model_file`); the first request must reuse nothing
   and equal the no-cache server's output, the weights must really have changed the output (or the
   step tests nothing), and a repeat must hit again.

A part the engine cannot run is reported as not exercised; a run where no part could run is an error,
never a pass.
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
