"""The dossier's view of prefix-reuse-parity's evidence: the reuse ledger and what could not be asserted.

Imported by the report on first use (gate.report.evidence.readers); torch-free.
"""

from __future__ import annotations

from gate.checks.prefix_reuse_parity.evidence import PrefixReuseEvidence
from gate.report.evidence import EvidenceViews, requests_table, store_findings


def read(evidence: PrefixReuseEvidence, views: EvidenceViews) -> None:
    requests_table(evidence.requests, views)
    store_findings(evidence, views)
