"""The evidence record of prefix-reuse-parity (its face's EVIDENCE; body.py writes it, view.py reads it)."""

from __future__ import annotations

from typing import Any

from gate.core.evidence import StoreEvidence, ToleranceRecord


class PrefixReuseEvidence(StoreEvidence):
    """prefix-reuse-parity: requests with shared prefixes, each against a full recompute."""

    tolerance: ToleranceRecord
    """The tolerance outputs were compared with."""
    compare: str
    """`argmax` or `logits`."""
    below_entitlement: list[str]
    """Requests that reused less than they could (a missed hit, not a wrong one)."""
    cache: dict[str, Any]
    """The cache's state after the last request."""
    budget: dict[str, Any] | None = None
    """The budget contract (stores with a byte budget): the budget, bytes per block and served, bytes
    held after each request, evictions, and whether the latest prompt still hit."""


__all__ = ["PrefixReuseEvidence"]
