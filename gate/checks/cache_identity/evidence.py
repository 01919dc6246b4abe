"""The evidence record of cache-identity (its face's EVIDENCE; body.py writes it, view.py reads it)."""

from __future__ import annotations

from pydantic import Field

from gate.core.evidence import ServedRequest, StoreEvidence


class IdentityProbe(ServedRequest):
    """The base prompt under one identity field changed (or, for `token-ids` and `positions`, its
    tokens changed or moved): what the cache reused, against what it was entitled to."""

    repeat_reused: int | None = None
    """Tokens reused when the variant request was repeated (it must hit its own entries)."""
    computation_differs_by: float | None = None
    """Largest |Δlogit| between the variant's computation and the base's: the field matters."""


class CacheIdentityEvidence(StoreEvidence):
    """cache-identity: one request per identity field, differing from a cached one in that field only."""

    fields: dict[str, IdentityProbe] = Field(default_factory=dict)
    """Identity field -> the request that varied it."""
    identity_example: ServedRequest | None = None
    """The second request of the fixed identity example (it must reuse exactly positions 0 and 1)."""
    unverified: list[str] = Field(default_factory=list)
    """Fields the candidate could not vary (unproven, named)."""
    identity_report_checked: bool = False
    """Whether the identity the store reports was compared with what it keys on."""


__all__ = ["CacheIdentityEvidence", "IdentityProbe"]
