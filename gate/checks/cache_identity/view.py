"""The dossier's view of cache-identity's evidence: one row per identity field, then the reuse ledger."""

from __future__ import annotations

from gate.checks.cache_identity.evidence import CacheIdentityEvidence
from gate.report.evidence import EvidenceViews, requests_table, store_findings
from gate.report.fmt import display


def read(evidence: CacheIdentityEvidence, views: EvidenceViews) -> None:
    """One row per identity field: the variant request's reuse, which must be none it is not entitled to."""
    rows = [
        [
            name,
            *(str(n) for n in (probe.prompt_tokens, probe.entitled, probe.reused)),
            "BEYOND entitlement" if probe.reused > probe.entitled else "",
            *map(display, (probe.repeat_reused, probe.computation_differs_by, probe.max_abs_delta)),
        ]
        for name, probe in evidence.fields.items()
    ]
    rows += [[name, "", "", "", "not varied (unproven)", "", "", ""] for name in evidence.unverified]
    if evidence.identity_example is not None:  # the fixed example: B after A reuses exactly positions 0-1
        example = evidence.identity_example
        spans = ", ".join(f"{start}-{end - 1}" for start, end in example.spans) or "none"
        counts = (str(n) for n in (example.prompt_tokens, example.entitled, example.reused))
        rows.append(
            ["identity example (B after A)", *counts, f"positions {spans}", "", "", display(example.max_abs_delta)]
        )
    views.table(
        title="Identity fields: a request that differs in one field only",
        columns=[
            "field",
            "prompt",
            "entitled",
            "reused",
            "",
            "repeat reused",
            "computation differs by",
            "max |Δlogit|",
        ],
        rows=rows,
        note="a field's variant may reuse only what it is entitled to; its repeat must hit (the cache is on); "
        "'computation differs by' shows the field changes the output"
        + ("; the identity the store reports was compared with its key" if evidence.identity_report_checked else ""),
    )
    views.consumed.update(("fields", "unverified", "identity_report_checked", "identity_example"))
    requests_table(evidence.requests, views)
    store_findings(evidence, views)
