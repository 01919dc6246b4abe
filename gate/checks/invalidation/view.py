"""The dossier's view of invalidation's evidence: each update, the restart, then the reuse ledger."""

from __future__ import annotations

from collections.abc import Mapping

from gate.checks.invalidation.evidence import InvalidationEvidence
from gate.report.evidence import EvidenceViews, requests_table, store_findings
from gate.report.fmt import display


def read(evidence: InvalidationEvidence, views: EvidenceViews) -> None:
    """Updates and the restart as their own tables, then the requests."""
    if evidence.updates:
        views.table(
            title="Updates: reuse before, right after and after again",
            columns=["update", "computation changed by", "hit before", "reused right after", "hit after"],
            rows=[
                [
                    f"{name} weights",
                    display(u.computation_changed_by),
                    *map(str, (u.hit_before, u.reused_after, u.hit_after)),
                ]
                for name, u in evidence.updates.items()
            ],
            note="right after an update nothing may be reused (entries of the old weights)",
        )
    if evidence.restart is not None:
        other, same = evidence.restart.other_checkpoint, evidence.restart.same_checkpoint
        views.table(
            title=f"Restart from a saved cache ({evidence.restart.blocks_saved} blocks saved)",
            columns=["restarted on", "admitted", "refused", "served"],
            rows=[
                [label, str(store.admitted), _reasons(store.dropped), display(served)]
                for label, store, served in (
                    ("another checkpoint (must admit and serve nothing)", other, other.consumed),
                    ("the same checkpoint (must admit and reuse)", same, same.reused_tokens),
                )
            ],
        )
    views.consumed.update(("updates", "restart"))
    requests_table(evidence.requests, views)
    store_findings(evidence, views)


def _reasons(dropped: Mapping[str, int]) -> str:
    return "; ".join(f"{count} blocks: {reason}" for reason, count in dropped.items()) or "none"
