"""The evidence record of `hash-collision`: what its body writes into `Outcome.evidence`
(`record.dump()`) and what the dossier reads back (its view, gate.checks.hash_collision.view).

Torch-free and pydantic-only: the face states the record (`EVIDENCE`), and `gate schema` writes
`schemas/evidence-hash-collision.schema.json` from it. A shape may not change without its view,
docs/report-evidence.md and the committed schema."""

from __future__ import annotations

from typing import Any

from gate.core.evidence import StoreEvidence


class HashCollisionEvidence(StoreEvidence):
    """hash-collision: requests under a weak injected hash, also under other identities."""

    cache: dict[str, Any] | None = None
    """The store's state after the last request."""


__all__ = ["HashCollisionEvidence"]
