"""The dossier's view of quality-slices' evidence: one strip per envelope, its worst samples, the samples as JSONL."""

from __future__ import annotations

import json
import math
import re

from gate.checks.quality_slices.evidence import SlicesEvidence
from gate.report.evidence import EvidenceViews, generic_tables
from gate.report.fmt import display
from gate.report.model import Download, SliceRow
from gate.report.plots import slice_plot


def read(evidence: SlicesEvidence, views: EvidenceViews) -> None:
    """Each envelope as a strip (threshold, point, bound) with its worst samples; the samples as downloads."""
    views.consumed.add("envelopes")
    for env in evidence.envelopes:
        threshold = float(env.threshold)
        plot = None
        if all(math.isfinite(v) for v in (env.point, env.bound, threshold)):
            plot = slice_plot(env.point, env.bound, threshold, None, env.passed)
        detail = " ".join(part for part in (f"{env.confidence:.0%} one-sided bound.", env.reason) if part)
        views.slices.append(
            SliceRow(
                slice=env.slice,
                metric=env.metric,
                point=display(env.point),
                bound=display(env.bound),
                comparator=env.comparator,
                threshold=env.threshold,
                n=f"{env.n} of {env.planned} (settled)" if env.planned else f"{env.n} (needs {env.n_required})",
                passed=env.passed,
                held="yes" if env.passed else "NO",
                tone="good" if env.passed else "bad",
                plot=plot,
                detail=detail,
                confidence=f"{env.confidence:.0%}",
            )
        )
        if env.worst:
            views.tables.append(generic_tables("Worst samples", {f"{env.slice} / {env.metric}": env.worst})[-1])
    for name, records in evidence.samples.items():
        flipped = sum(1 for r in records if r.get("flipped"))
        views.downloads.append(
            Download(
                file=f"samples/{_file_safe(str(name))}.jsonl",
                label=f"{name}: {len(records)} samples, {flipped} flipped",
                lines=[json.dumps(r, sort_keys=True, ensure_ascii=False, default=str) for r in records],
            )
        )
    views.consumed.add("samples")


def _file_safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "slice"
