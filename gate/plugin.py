"""Everything a plugin author needs, on one screen.

A check is a decorated function from `(CheckContext, params)` to an `Outcome`; an adapter is a
class with a pydantic `Options` model and a `build(options, *, device, dtype, seed)` that returns a
`DecodePath`. Register either under the `gate.checks` / `gate.adapters` entry-point groups.

    from gate.plugin import CheckContext, Outcome, Params, check

    class FiniteParams(Params):
        length: int = 64

    @check("finite-logits", params=FiniteParams)
    def finite_logits(ctx: CheckContext, params: FiniteParams) -> Outcome:
        ...

Importing this module imports no torch. See docs/plugins.md for a worked check and adapter.
"""

from __future__ import annotations

from gate.core.check import CheckContext, CheckSpec, Outcome, Params, check
from gate.errors import AdapterUnavailable, GateError, InputError, UnavailableError, UnknownFault
from gate.protocols import (
    Adapter,
    AttentionProbe,
    BatchedSession,
    BatchedSessions,
    ContinuousBatching,
    ContinuousSession,
    DecodePath,
    FaultVisibility,
    LayerTracing,
    LayoutBoundaries,
    PathCapabilities,
    PrefixCaching,
    Session,
    SpeculativePath,
    subject_call,
)

__all__ = [
    "Adapter",
    "AdapterUnavailable",
    "AttentionProbe",
    "BatchedSession",
    "BatchedSessions",
    "CheckContext",
    "CheckSpec",
    "ContinuousBatching",
    "ContinuousSession",
    "DecodePath",
    "FaultVisibility",
    "GateError",
    "InputError",
    "LayerTracing",
    "LayoutBoundaries",
    "Outcome",
    "Params",
    "PathCapabilities",
    "PrefixCaching",
    "Session",
    "SpeculativePath",
    "UnavailableError",
    "UnknownFault",
    "check",
    "subject_call",
]
