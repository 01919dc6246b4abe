"""The dossier's view of spec-distribution's evidence: observed against expected shares and the test's numbers."""

from __future__ import annotations

from gate.checks.spec_distribution.evidence import DistributionEvidence
from gate.report.evidence import EvidenceViews
from gate.report.fmt import display, number
from gate.report.model import Distribution, KeyValue
from gate.report.plots import distribution_plot

MAX_CATEGORIES = 40


def read(evidence: DistributionEvidence, views: EvidenceViews) -> None:
    """Observed against expected shares per continuation, and the test's numbers."""
    views.consumed.update(("categories", "observed", "expected", "statistic", "dof", "p_value", "alpha", "n_samples"))
    facts = [
        KeyValue("statistic", display(evidence.statistic)),
        KeyValue("degrees of freedom", display(evidence.dof)),
        KeyValue("p-value", display(evidence.p_value)),
        KeyValue("α", display(evidence.alpha)),
        KeyValue("samples", display(evidence.n_samples)),
    ]
    # one observed and one expected non-negative count per category (validated)
    rows = sorted(zip(evidence.categories, evidence.observed, evidence.expected, strict=True), key=lambda r: -r[2])
    note = ""
    if len(rows) > MAX_CATEGORIES:
        rest = rows[MAX_CATEGORIES - 1 :]
        note = f"{len(rest)} least expected categories folded into 'other'"
        rows = [*rows[: MAX_CATEGORIES - 1], ("other", sum(r[1] for r in rest), sum(r[2] for r in rest))]
    plot = distribution_plot([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
    views.distribution = Distribution(
        plot=plot, facts=facts, rows=[[name, number(o), number(e)] for name, o, e in rows], note=note
    )
