"""Adapter and path protocols: the only way checks talk to models.

A check receives two `DecodePath`s (reference and candidate) built by adapters. Optional capabilities
are separate protocols, read in one place: `capabilities(path)` and `offered(path, Protocol)` (the
path typed as that protocol where it offers it, else None). The contract is split by idea (`.paths`,
`.prefix`, `.engine`, `.kv`, `.controls`, `.capability`), every name importable from here.
This package imports no torch at run time.
"""

from __future__ import annotations

from gate.protocols.capability import PREFIX_CAPABILITIES, Capability, capabilities, offered
from gate.protocols.capability import slot_files_absent as slot_files_absent
from gate.protocols.capability import slot_store_of as slot_store_of
from gate.protocols.controls import CacheCropping, FaultVisibility, WeightReloading
from gate.protocols.controls import CountsServers as CountsServers
from gate.protocols.controls import PlansServers as PlansServers
from gate.protocols.controls import ReleasesControls as ReleasesControls
from gate.protocols.engine import CacheGeometry as CacheGeometry
from gate.protocols.engine import (
    EngineCompletion,
    EngineServer,
    EngineServing,
    EngineSlots,
    EngineStream,
    SlotFilesPath,
    SlotStore,
)
from gate.protocols.kv import EvictionPolicy as EvictionPolicy
from gate.protocols.kv import EvictionReport as EvictionReport
from gate.protocols.kv import EvictionStep as EvictionStep
from gate.protocols.kv import QuantizedKV, QuantScheme, QuantSession, QuantState, QuantTensorState
from gate.protocols.paths import (
    Adapter,
    AttentionProbe,
    BatchedSession,
    BatchedSessions,
    ContinuousBatching,
    ContinuousSession,
    DecodePath,
    KVGeometry,
    LayerTracing,
    LayoutBoundaries,
    LayoutEdges,
    LiveCounterpart,
    PathCapabilities,
    Session,
    SpeculativePath,
    subject_call,
)
from gate.protocols.prefix import (
    PrefixBudget,
    PrefixCaching,
    PrefixHashing,
    PrefixIdentityReport,
    PrefixServing,
    PrefixSiblings,
    PrefixSnapshots,
    PrefixWeightUpdates,
)

# The `X as X` imports above are public too (gate.plugin re-exports them) but stay outside __all__,
# as they did before the split (gate.paths star-imports exactly this list).
__all__ = [
    "PREFIX_CAPABILITIES",
    "Adapter",
    "AttentionProbe",
    "BatchedSession",
    "BatchedSessions",
    "CacheCropping",
    "Capability",
    "ContinuousBatching",
    "ContinuousSession",
    "DecodePath",
    "EngineCompletion",
    "EngineServer",
    "EngineServing",
    "EngineSlots",
    "EngineStream",
    "FaultVisibility",
    "KVGeometry",
    "LayerTracing",
    "LayoutBoundaries",
    "LayoutEdges",
    "LiveCounterpart",
    "PathCapabilities",
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
    "Session",
    "SlotFilesPath",
    "SlotStore",
    "SpeculativePath",
    "WeightReloading",
    "capabilities",
    "offered",
    "subject_call",
]
