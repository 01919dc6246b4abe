"""The dossier's view of prefix-reuse-parity's evidence: the reuse ledger and what could not be asserted, as
every prefix-store check without a view of its own shows it (gate.report.evidence.read_store_requests)."""

from __future__ import annotations

from gate.report.evidence import read_store_requests as read

__all__ = ["read"]
