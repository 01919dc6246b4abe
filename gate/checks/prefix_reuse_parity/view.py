"""The dossier's view of prefix-reuse-parity's evidence: the reuse ledger and what could not be asserted."""

from __future__ import annotations

from gate.checks.prefix_reuse_parity.evidence import PrefixReuseEvidence
from gate.report.evidence import EvidenceViews, read_store_requests


def read(evidence: PrefixReuseEvidence, views: EvidenceViews) -> None:
    read_store_requests(evidence, views)
