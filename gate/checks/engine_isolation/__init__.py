"""engine-isolation: a request under another cache salt (tenant) reuses nothing of a shared prefix.

Where the engine keys its prefix cache on a salt or tenant key (vLLM's `cache_salt`), a prompt is
sent twice under salt A (the repeat must hit, or the test proves nothing) and then under salt B,
which must report zero reused tokens. A salt the server accepts and ignores fails.

Where the engine offers no salt (llama.cpp, TGI, SGLang today; `cache_salt_field` names one the
flavor does not) it keeps no per-tenant cache, so the check has nothing to judge: it skips with the
reason, `absent: cache-salt`, which the engine-serving policy makes not applicable (a policy rule
without that `not_applicable` leaves it unproven). It never passes there.
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
