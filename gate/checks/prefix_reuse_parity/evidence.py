"""The evidence record of `prefix-reuse-parity`: what its body writes into `Outcome.evidence`
(`record.dump()`) and what the dossier reads back (its view, gate.checks.prefix_reuse_parity.view).

Torch-free and pydantic-only: the face states the record (`EVIDENCE`), and `gate schema` writes
`schemas/evidence-prefix-reuse-parity.schema.json` from it. A shape may not change without its view,
docs/report-evidence.md and the committed schema."""

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
