"""The evidence record of `tenant-isolation`: what its body writes into `Outcome.evidence`
(`record.dump()`) and what the dossier reads back (its view, gate.checks.tenant_isolation.view).

Torch-free and pydantic-only: the face states the record (`EVIDENCE`), and `gate schema` writes
`schemas/evidence-tenant-isolation.schema.json` from it. A shape may not change without its view,
docs/report-evidence.md and the committed schema."""

from __future__ import annotations

from gate.core.evidence import StoreEvidence


class TenantIsolationEvidence(StoreEvidence):
    """tenant-isolation: the same prompts under tenants and salts, also under a weak hash."""


__all__ = ["TenantIsolationEvidence"]
