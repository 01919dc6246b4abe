"""engine-isolation: a request under another cache salt (tenant) reuses nothing of a shared prefix.

A prompt is sent twice under salt A (the repeat must hit, or the test proves nothing), then under salt
B, which must report zero reused tokens. Without a salt the check skips, `absent: cache-salt`.
"""

from __future__ import annotations

from pydantic import Field

from gate.checks._shape import lazy_body
from gate.core.check import Params
from gate.protocols import Capability


class EngineIsolationParams(Params):
    """The shared prefix."""

    length: int = Field(default=256, ge=2)
    """Prompt length (clipped to the context)."""


CARD, PARAMS, EVIDENCE = "engine-isolation", EngineIsolationParams, None
NEEDS = frozenset({Capability.ENGINE_SERVING})
__getattr__ = lazy_body(__name__)


__all__ = ["CARD", "EVIDENCE", "NEEDS", "PARAMS", "EngineIsolationParams"]
