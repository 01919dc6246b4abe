"""`reset-isolation`: two independent requests through ONE reused session equal two fresh runs.

Request A, a reset, request B on one session, each against the same request on a fresh session;
same shapes, so bit-exact by default. A negative control compares B first, token by token beside a
fresh session, and stops at the first difference.
"""

from __future__ import annotations

from pydantic import Field

from gate.checks._shape import lazy_body
from gate.core.check import Params
from gate.protocols import Capability


class ResetIsolationParams(Params):
    first: int = Field(default=24, ge=1)
    """Prompt tokens of request A."""
    second: int = Field(default=17, ge=1)
    """Prompt tokens of request B (different from A, so a stale offset shows)."""
    steps: int = Field(default=8, ge=0)
    """Tokens appended one at a time after each prompt."""
    batch: int = Field(default=2, ge=1, le=64)
    """Sequences per request batch."""
    exact: bool = True
    """Bit-identical to fresh runs (same path, same shapes). False: argmax agreement within tolerance."""


CARD, PARAMS, EVIDENCE = "reset-isolation", ResetIsolationParams, None
NEEDS = frozenset({Capability.DECODE_PATH})
__getattr__ = lazy_body(__name__)


__all__ = ["CARD", "EVIDENCE", "NEEDS", "PARAMS", "ResetIsolationParams"]
