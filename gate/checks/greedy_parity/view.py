"""The dossier's view of greedy-parity's evidence: each diverging run's continuations, token by token."""

from __future__ import annotations

from gate.checks.greedy_parity.evidence import GreedyEvidence
from gate.report.divergence import token_view
from gate.report.evidence import EvidenceViews


def read(evidence: GreedyEvidence, views: EvidenceViews) -> None:
    """Each diverging run's two continuations, token by token (the runs also stay as a table)."""
    for run in evidence.runs:
        first = run.first_divergence
        if first is None:
            continue
        tie = " (within the tie band: not a bug on its own)" if first.tie else ""
        view = token_view(
            f"prompt length {run.prompt_len}, row {first.row}: continuations part at step {first.step}{tie}",
            first.reference_tokens,
            first.candidate_tokens,
            first.tokens_from,
            note="token ids; step 0 is the first generated token",
        )
        if view is not None:
            views.tokens.append(view)
