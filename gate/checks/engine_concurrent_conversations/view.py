"""The dossier's view of engine-concurrent-conversations' evidence: the failing replies, the reuse
mechanisms, then every request of the workload."""

from __future__ import annotations

from gate.checks.engine_concurrent_conversations.evidence import ConversationsEvidence
from gate.report.evidence import EvidenceViews
from gate.report.fmt import display, number


def read(evidence: ConversationsEvidence, views: EvidenceViews) -> None:
    """The failing replies with the request each is named with, then every request of the workload."""
    if evidence.failures:
        views.table(
            title="Replies that differ from the reference alone",
            columns=["request", "named with", "why", "failure"],
            rows=[[str(f.request), display(f.other_request), f.how, f.message] for f in evidence.failures],
        )
    if evidence.mechanisms:
        views.table(
            title="The candidate's reuse mechanisms: aimed at and reached, by the engine's own counters",
            columns=["mechanism", "aimed at", "lengths", "requests", "reached", "counted / why not"],
            rows=[
                [m.mechanism, str(m.aimed), ", ".join(map(str, m.lengths)), str(m.requests), str(m.reached), m.evidence]
                for m in evidence.mechanisms
            ],
            note="gate/checks/_mechanisms.py; the server log's counters: "
            + (
                ", ".join(f"{k} {v}" for k, v in evidence.engine_log_counters.items())
                if evidence.engine_log_counters
                else "not stated by its log"
            ),
        )
    views.table(
        title=(
            f"{len(evidence.requests)} requests: {evidence.conversations} conversations over {evidence.tenants} "
            f"tenants' {evidence.system_prefix}-token system prefixes, up to {evidence.max_concurrent} at once"
        ),
        columns=[
            "request",
            "conversation",
            "turn",
            "round",
            "kind",
            "prompt",
            "cached",
            "tokens match",
            "max |Δlogprob|",
        ],
        rows=[
            [
                str(r.id),
                str(r.conversation),
                str(r.turn),
                str(r.round),
                r.kind,
                str(r.prompt_tokens),
                display(r.cached_tokens),
                str(r.tokens_match),
                number(r.max_abs_dlogprob),
            ]
            for r in evidence.requests
        ],
        note="each reply against the reference's answer to the same prompt sent alone",
    )
    views.consumed.update({"requests", "failures", "mechanisms", "engine_log_counters"})
