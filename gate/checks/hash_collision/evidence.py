"""The evidence record of hash-collision (its face's EVIDENCE; body.py writes it, view.py reads it)."""

from __future__ import annotations

from typing import Any

from gate.core.evidence import StoreEvidence


class HashCollisionEvidence(StoreEvidence):
    """hash-collision: requests under a weak injected hash, also under other identities."""

    cache: dict[str, Any] | None = None
    """The store's state after the last request."""


__all__ = ["HashCollisionEvidence"]
