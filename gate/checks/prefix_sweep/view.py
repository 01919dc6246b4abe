"""The dossier's view of prefix-sweep's evidence: the |Δlogit| plot against prefix length and its table."""

from __future__ import annotations

from gate.checks.prefix_sweep.evidence import Bitwise, SweepEvidence
from gate.core.evidence import ToleranceRecord
from gate.report.evidence import EvidenceViews, fold_rows
from gate.report.fmt import display, number
from gate.report.model import KeyValue, Table
from gate.report.plots import sweep_plot
from gate.report.words import BITWISE_COMPARISON, SWEEP_COMPARISON


def _tolerance_words(tolerance: ToleranceRecord) -> str:
    words = f"atol {number(tolerance.atol)}"
    if tolerance.rtol:
        words += f" + rtol {number(tolerance.rtol)}·|ref|"
    return words + (f" ({tolerance.source})" if tolerance.source else "")


def read(evidence: SweepEvidence, views: EvidenceViews) -> None:
    """The |Δlogit| plot against prefix length, and its table with long passing runs folded."""
    series = evidence.per_length  # one entry per length in each series (validated)
    lengths = [float(x) for x in series.length]
    deltas, agree = series.max_abs_delta, series.argmax_agree
    ties = {length for length, tied in zip(lengths, series.tie, strict=True) if tied}
    ties |= {float(t.length) for t in evidence.ties}
    tolerance = evidence.tolerance.atol
    edges = {float(x) for x in evidence.boundaries.lengths}
    plot = sweep_plot(lengths, deltas, agree, ties, tolerance, _tolerance_words(evidence.tolerance), sorted(edges))
    views.sweep = plot
    views.sweep_facts = _comparisons(evidence.bitwise)
    views.consumed.update(("per_length", "tolerance"))  # tie and failure records stay visible as tables
    views.first_failing_length = plot.first_failure
    rows, failing = [], []
    for length, delta, ok in zip(lengths, deltas, agree, strict=True):
        over = not delta <= tolerance
        failing.append((not ok and length not in ties) or over)
        rows.append(
            [
                number(length),
                number(delta),
                "yes" if ok else "NO",
                "tie" if length in ties else ("over tolerance" if over else ""),
            ]
        )
    shown, folded = fold_rows(rows, failing, pinned=[length in edges for length in lengths])
    views.sweep_table = Table(
        title="Prefix sweep",
        columns=["prefix length", "max |Δlogit| vs the full pass", "argmax agrees", ""],
        rows=shown,
        note=(
            f"{folded} of {len(rows)} rows folded (all passing); every failing length, every layout "
            "boundary and the lengths either side of each change are shown (all rows: results.json)"
            if folded
            else ""
        ),
        folded=folded,
    )


def _comparisons(bitwise: Bitwise | None) -> list[KeyValue]:
    """Which comparison each |Δ| in the sweep is against, in words."""
    facts = [KeyValue("max |Δlogit| in the plot", SWEEP_COMPARISON)]
    if bitwise is not None:
        against = BITWISE_COMPARISON.format(path=display(bitwise.reference_path))
        same = f"{bitwise.lengths_bit_identical} of {bitwise.lengths} lengths"
        facts.append(KeyValue("bit identity", f"{against}: {same}"))
        facts.append(KeyValue("max |Δlogit| against that cached schedule", display(bitwise.max_abs_delta_vs_cached)))
    return facts
