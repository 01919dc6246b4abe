"""What a path offers, asked in one place: the `Capability` members, the protocol that types each
(`capabilities(path)`, `offered(path, Protocol)`), the prefix-capability table and the slot-file
accessors. The only module of gate that tests a path with `isinstance` against a capability
protocol. This module imports no torch at run time.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TypeVar, cast

from gate.protocols.controls import CacheCropping, FaultVisibility, ReleasesControls, WeightReloading
from gate.protocols.engine import EngineServing, EngineSlots, SlotFilesPath, SlotStore
from gate.protocols.kv import EvictionReport, QuantizedKV
from gate.protocols.paths import (
    AttentionProbe,
    BatchedSessions,
    ContinuousBatching,
    DecodePath,
    KVGeometry,
    LayerTracing,
    LayoutBoundaries,
    LayoutEdges,
    LiveCounterpart,
    SpeculativePath,
)
from gate.protocols.prefix import (
    PrefixBudget,
    PrefixHashing,
    PrefixIdentityReport,
    PrefixServing,
    PrefixSiblings,
    PrefixSnapshots,
    PrefixWeightUpdates,
)


class Capability(StrEnum):
    """What a path offers, by the protocol that types it (the value is the protocol's name, as cards'
    `needs` and `PathCapabilities.offers` spell it), plus the flags a protocol alone cannot state."""

    DECODE_PATH = "DecodePath"
    BATCHED_SESSIONS = "BatchedSessions"
    CONTINUOUS_BATCHING = "ContinuousBatching"
    """ContinuousBatching with its `continuous_batching` flag set (a path may type it and opt out)."""
    LAYER_TRACING = "LayerTracing"
    LIVE_COUNTERPART = "LiveCounterpart"
    KV_GEOMETRY = "KVGeometry"
    ATTENTION_PROBE = "AttentionProbe"
    LAYOUT_BOUNDARIES = "LayoutBoundaries"
    LAYOUT_EDGES = "LayoutEdges"
    SPECULATIVE_PATH = "SpeculativePath"
    PREFIX_SERVING = "PrefixServing"
    PREFIX_IDENTITY_REPORT = "PrefixIdentityReport"
    PREFIX_SIBLINGS = "PrefixSiblings"
    PREFIX_HASHING = "PrefixHashing"
    PREFIX_WEIGHT_UPDATES = "PrefixWeightUpdates"
    PREFIX_SNAPSHOTS = "PrefixSnapshots"
    PREFIX_BUDGET = "PrefixBudget"
    ENGINE_SERVING = "EngineServing"
    ENGINE_SALT = "EngineSalt"
    """EngineServing with a `salt_field`: requests can be keyed on a cache salt or tenant."""
    WEIGHT_RELOADING = "WeightReloading"
    CACHE_CROPPING = "CacheCropping"
    RELEASES_CONTROLS = "ReleasesControls"
    FAULT_VISIBILITY = "FaultVisibility"
    EVICTION_REPORT = "EvictionReport"
    QUANTIZED_KV = "QuantizedKV"


_TYPED: tuple[tuple[Capability, type], ...] = (
    (Capability.DECODE_PATH, DecodePath),
    (Capability.BATCHED_SESSIONS, BatchedSessions),
    (Capability.LAYER_TRACING, LayerTracing),
    (Capability.LIVE_COUNTERPART, LiveCounterpart),
    (Capability.KV_GEOMETRY, KVGeometry),
    (Capability.ATTENTION_PROBE, AttentionProbe),
    (Capability.LAYOUT_BOUNDARIES, LayoutBoundaries),
    (Capability.LAYOUT_EDGES, LayoutEdges),
    (Capability.SPECULATIVE_PATH, SpeculativePath),
    (Capability.PREFIX_SERVING, PrefixServing),
    (Capability.PREFIX_IDENTITY_REPORT, PrefixIdentityReport),
    (Capability.PREFIX_SIBLINGS, PrefixSiblings),
    (Capability.PREFIX_HASHING, PrefixHashing),
    (Capability.PREFIX_WEIGHT_UPDATES, PrefixWeightUpdates),
    (Capability.PREFIX_SNAPSHOTS, PrefixSnapshots),
    (Capability.PREFIX_BUDGET, PrefixBudget),
    (Capability.ENGINE_SERVING, EngineServing),
    (Capability.WEIGHT_RELOADING, WeightReloading),
    (Capability.CACHE_CROPPING, CacheCropping),
    (Capability.RELEASES_CONTROLS, ReleasesControls),
    (Capability.FAULT_VISIBILITY, FaultVisibility),
    (Capability.EVICTION_REPORT, EvictionReport),
    (Capability.QUANTIZED_KV, QuantizedKV),
)
"""Capability -> the protocol a path (or store) must satisfy to offer it."""


def capabilities(path: object) -> frozenset[Capability]:
    """What `path` (a DecodePath, a prefix store or an engine) offers: every protocol it satisfies,
    with the flags read once here (`continuous_batching`, `salt_field`) instead of at each use."""
    offered = {capability for capability, protocol in _TYPED if isinstance(path, protocol)}
    if isinstance(path, ContinuousBatching) and path.continuous_batching:
        offered.add(Capability.CONTINUOUS_BATCHING)
    if isinstance(path, EngineServing) and path.salt_field is not None:
        offered.add(Capability.ENGINE_SALT)
    return frozenset(offered)


_CAPABILITY_OF: dict[type, Capability] = {protocol: capability for capability, protocol in _TYPED}
_CAPABILITY_OF[ContinuousBatching] = Capability.CONTINUOUS_BATCHING

_P = TypeVar("_P")


def offered(path: object, protocol: type[_P]) -> _P | None:
    """`path` typed as `protocol` where it offers that capability, else None: the same test as
    `capabilities(path)`, flags included; TypeError for a protocol that is not a capability."""
    capability = _CAPABILITY_OF.get(protocol)
    if capability is None:
        raise TypeError(f"{protocol.__name__} is not a capability (gate.protocols.Capability)")
    return cast("_P", path) if capability in capabilities(path) else None


PREFIX_CAPABILITIES: dict[str, type] = {
    "serve and recompute": PrefixServing,
    "identity report": PrefixIdentityReport,
    "siblings": PrefixSiblings,
    "pluggable hash": PrefixHashing,
    "weight update": PrefixWeightUpdates,
    "save and restore": PrefixSnapshots,
    "byte budget": PrefixBudget,
}
"""Capability name (as verdicts name it) -> protocol."""


def slot_store_of(server: object) -> SlotStore | str | None:
    """The server's slot files, or why it offers none, where it is an EngineSlots server; None where not."""
    return server.slot_store() if isinstance(server, EngineSlots) else None


def slot_files_absent(path: object) -> str | None:
    """Why a path's servers offer no slot files, known before they start (SlotFilesPath); None: they may."""
    return path.slot_files_absent() if isinstance(path, SlotFilesPath) else None
