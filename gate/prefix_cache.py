"""Deprecated: the prefix cache moved to `gate.prefix.cache` (its data types are exported from `gate.plugin`).

Kept until gate 0.2.0 (gate._util.deprecation.REMOVED_IN) so plugins written against `gate.prefix_cache` keep
importing; it warns once, at import.
"""

from __future__ import annotations

from gate._util.deprecation import warn_moved
from gate.prefix.cache import (
    SAVE_FORMAT,
    WORKER_ATTRS,
    CacheCounters,
    CachedBlock,
    CacheIdentity,
    CacheRules,
    PrefixCache,
    PrefixReply,
    RequestStats,
    RestoreReport,
    chained_key,
    longest_prefix,
    sha256_hash,
    verify_material,
    weak_hash,
)

Block = CachedBlock
"""The old name of gate.prefix.cache.CachedBlock."""

warn_moved("gate.prefix_cache", "from gate.plugin (data types) or gate.prefix.cache")

__all__ = [
    "SAVE_FORMAT",
    "WORKER_ATTRS",
    "Block",
    "CacheCounters",
    "CacheIdentity",
    "CacheRules",
    "CachedBlock",
    "PrefixCache",
    "PrefixReply",
    "RequestStats",
    "RestoreReport",
    "chained_key",
    "longest_prefix",
    "sha256_hash",
    "verify_material",
    "weak_hash",
]
