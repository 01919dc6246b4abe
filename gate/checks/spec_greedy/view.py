"""The dossier's view of spec-greedy's evidence: the target's and the speculative path's greedy tokens."""

from __future__ import annotations

from gate.checks.spec_greedy.evidence import SpecGreedyEvidence
from gate.report.divergence import token_view
from gate.report.evidence import EvidenceViews


def read(evidence: SpecGreedyEvidence, views: EvidenceViews) -> None:
    view = token_view(
        "target greedy tokens against the speculative candidate's",
        evidence.example.target,
        evidence.example.candidate,
        note="token ids",
    )
    if view is not None:
        views.tokens.append(view)
        views.consumed.add("example")
