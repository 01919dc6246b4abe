"""engine-isolation: a request under another cache salt (tenant) reuses nothing of a shared prefix.

Where the engine keys its prefix cache on a salt or tenant key (vLLM's `cache_salt`), a prompt is
sent twice under salt A (the repeat must hit, or the test proves nothing) and then under salt B,
which must report zero reused tokens. A salt the server accepts and ignores fails.

Where the engine offers no salt (llama.cpp, TGI, SGLang today) the check cannot show anything
either way: it says so, unproven, and never passes.

Torch-free (gate.checks._shape): the body is `gate.checks.engine_isolation.body`, loaded on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from gate.checks._shape import body_attribute
from gate.core.check import Params
from gate.protocols import Capability

if TYPE_CHECKING:
    from gate.checks.engine_isolation.body import engine_isolation

CARD = "engine-isolation"
"""The check's name and its card (checks/engine-isolation.yaml)."""
NEEDS = frozenset({Capability.ENGINE_SERVING})
"""What the candidate must offer (without a salt, ENGINE_SALT, the check is unproven)."""
EVIDENCE = None
"""No typed record: its evidence is shown generically."""


class EngineIsolationParams(Params):
    """The shared prefix."""

    length: int = Field(default=256, ge=2)
    """Prompt length (clipped to the context)."""


PARAMS = EngineIsolationParams


def __getattr__(name: str) -> Any:
    return body_attribute(__name__, name)


__all__ = ["CARD", "EVIDENCE", "NEEDS", "PARAMS", "EngineIsolationParams", "engine_isolation"]
