"""Deprecated: the prefix cache moved to `gate.prefix.cache` (its data types are exported from `gate.plugin`).

Kept for at least one minor release so plugins written against `gate.prefix_cache` keep importing; it warns.
"""

from __future__ import annotations

import warnings

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

warnings.warn(
    "gate.prefix_cache is deprecated: import from gate.plugin (data types) or gate.prefix.cache instead",
    DeprecationWarning,
    stacklevel=2,
)

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
