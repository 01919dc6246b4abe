"""The evidence record of tenant-isolation (its face's EVIDENCE; body.py writes it, view.py reads it)."""

from __future__ import annotations

from gate.core.evidence import StoreEvidence


class TenantIsolationEvidence(StoreEvidence):
    """tenant-isolation: the same prompts under tenants and salts, also under a weak hash."""


__all__ = ["TenantIsolationEvidence"]
