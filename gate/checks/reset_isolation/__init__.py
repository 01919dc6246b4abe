"""`reset-isolation`: two independent requests through ONE reused session equal two fresh runs.

Request A (prompt, then tokens appended one at a time) runs on a session; the session is reset;
request B runs on the same session. Each must match the same request on a fresh session of the
same path. Both runs execute the same shapes, so the comparison is bit-exact by default: a reset
either restores the initial state or it does not (background: mask oracle; reset position state as well as K/V).

A negative control (stop at first failure) compares request B first, token by token beside a fresh
session, and stops at the first difference: a reset fault shows there, so a control costs request A
once plus B up to its first wrong token, not the four runs of a positive run.
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
