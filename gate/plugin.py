"""Everything a plugin author needs, on one screen: the contract of the plugin surface.

A check is a decorated function from `(CheckContext, params)` to an `Outcome`; an adapter is a
class with a pydantic `Options` model and a `build(options, *, device, dtype, seed)` that returns a
`DecodePath`. Register either under the `gate.checks` / `gate.adapters` entry-point groups.

    from gate.plugin import CheckContext, Outcome, Params, check

    class FiniteParams(Params):
        length: int = 64

    @check("finite-logits", params=FiniteParams)
    def finite_logits(ctx: CheckContext, params: FiniteParams) -> Outcome:
        ...

Every name in `__all__` is part of the contract. A name that moves keeps a warning shim at its old
import path until gate 0.2.0 (`gate.paths`, `gate.checks.api`, `gate.prefix_cache`, `gate.speculative`'s
old names). Importing this module imports no torch: the sampler's and the store's data types load on
first use of their name.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from gate.core.check import CheckContext, CheckSpec, Outcome, Params, check
from gate.core.result import ControlOutcome, ControlResult
from gate.errors import (
    AdapterUnavailable,
    EngineBadReply,
    EngineCacheNeverHit,
    EngineCrashed,
    EngineError,
    EngineNotReady,
    EnginePortInUse,
    EngineTimeout,
    EngineVocabMismatch,
    EngineWrongModel,
    GateError,
    InputError,
    SubjectCrash,
    UnavailableError,
    UnknownFault,
)
from gate.protocols import (
    PREFIX_CAPABILITIES,
    Adapter,
    AttentionProbe,
    BatchedSession,
    BatchedSessions,
    CacheCropping,
    CacheGeometry,
    Capability,
    ContinuousBatching,
    ContinuousSession,
    CountsServers,
    DecodePath,
    EngineCompletion,
    EngineServer,
    EngineServing,
    EngineSlots,
    EngineStream,
    EvictionPolicy,
    EvictionReport,
    EvictionStep,
    FaultVisibility,
    KVGeometry,
    LayerTracing,
    LayoutBoundaries,
    LayoutEdges,
    LiveCounterpart,
    PathCapabilities,
    PlansServers,
    PrefixBudget,
    PrefixCaching,
    PrefixHashing,
    PrefixIdentityReport,
    PrefixServing,
    PrefixSiblings,
    PrefixSnapshots,
    PrefixWeightUpdates,
    QuantizedKV,
    QuantScheme,
    QuantSession,
    QuantState,
    QuantTensorState,
    ReleasesControls,
    Session,
    SlotFilesPath,
    SlotStore,
    SpeculativePath,
    WeightReloading,
    capabilities,
    offered,
    slot_files_absent,
    slot_store_of,
    subject_call,
)

if TYPE_CHECKING:
    from gate.prefix.cache import CacheIdentity, PrefixReply, RequestStats, RestoreReport
    from gate.speculative.sampler import SpecStats, SpeculativeSample, warp

LAZY: dict[str, str] = {
    "SpecStats": "gate.speculative.sampler",
    "SpeculativeSample": "gate.speculative.sampler",
    "warp": "gate.speculative.sampler",
    "CacheIdentity": "gate.prefix.cache",
    "PrefixReply": "gate.prefix.cache",
    "RequestStats": "gate.prefix.cache",
    "RestoreReport": "gate.prefix.cache",
}
"""Names of the surface whose modules use torch: loaded on first use, so this module stays instant."""


def __getattr__(name: str) -> Any:
    module = LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gate.plugin' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


# checks: the decorator, its context and its records
__all__ = [
    "CheckContext",
    "CheckSpec",
    "Outcome",
    "Params",
    "check",
]

# adapters and paths: what an adapter builds, and the subject call it reports
__all__ += [
    "Adapter",
    "DecodePath",
    "PathCapabilities",
    "Session",
    "subject_call",
]

# capabilities: what a path offers (ask `offered` or `capabilities`, never isinstance), the protocols
# that type each one, and the records they return
# (spelled out, not derived from gate.protocols.__all__: this list is the contract a plugin may rely
# on, and a name added to gate.protocols joins it only when it is added here)
__all__ += [
    "PREFIX_CAPABILITIES",
    "AttentionProbe",
    "BatchedSession",
    "BatchedSessions",
    "CacheGeometry",
    "Capability",
    "ContinuousBatching",
    "ContinuousSession",
    "EngineCompletion",
    "EngineServer",
    "EngineServing",
    "EngineSlots",
    "EngineStream",
    "EvictionPolicy",
    "EvictionReport",
    "EvictionStep",
    "KVGeometry",
    "LayerTracing",
    "LayoutBoundaries",
    "LayoutEdges",
    "LiveCounterpart",
    "PrefixBudget",
    "PrefixCaching",
    "PrefixHashing",
    "PrefixIdentityReport",
    "PrefixServing",
    "PrefixSiblings",
    "PrefixSnapshots",
    "PrefixWeightUpdates",
    "QuantScheme",
    "QuantSession",
    "QuantState",
    "QuantTensorState",
    "QuantizedKV",
    "SlotFilesPath",
    "SlotStore",
    "SpeculativePath",
    "capabilities",
    "offered",
    "slot_files_absent",
    "slot_store_of",
]

# prefix store types (gate.prefix.cache, loaded on first use)
__all__ += [
    "CacheIdentity",
    "PrefixReply",
    "RequestStats",
    "RestoreReport",
]

# speculative types (gate.speculative.sampler, loaded on first use)
__all__ += [
    "SpecStats",
    "SpeculativeSample",
    "warp",
]

# errors
__all__ += [
    "AdapterUnavailable",
    "EngineBadReply",
    "EngineCacheNeverHit",
    "EngineCrashed",
    "EngineError",
    "EngineNotReady",
    "EnginePortInUse",
    "EngineTimeout",
    "EngineVocabMismatch",
    "EngineWrongModel",
    "GateError",
    "InputError",
    "SubjectCrash",
    "UnavailableError",
    "UnknownFault",
]

# controls: the optional capabilities that buy generic controls or shape them, and the control records
__all__ += [
    "CacheCropping",
    "ControlOutcome",
    "ControlResult",
    "CountsServers",
    "FaultVisibility",
    "PlansServers",
    "ReleasesControls",
    "WeightReloading",
]
