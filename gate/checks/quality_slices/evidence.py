"""The evidence record of quality-slices (its face's EVIDENCE; body.py writes it, view.py reads it)."""

from __future__ import annotations

from typing import Any

from gate.core.evidence import EvidenceRecord, Judgement


class JudgedEnvelope(Judgement):
    """One declared envelope with its judgement and the samples that did worst."""

    slice: str
    """Slice name (evals/*.yaml)."""
    metric: str
    """Metric judged."""
    comparator: str
    """`>=` or `<=`."""
    threshold: str
    """Threshold, as a decimal string."""
    confidence: float
    """Confidence of the one-sided bound."""
    min_detectable_effect: float | None
    """Effect size the sample size was planned for."""
    power: float | None
    """Power the sample size was planned for."""
    worst: list[dict[str, Any]]
    """The samples that did worst on the metric."""


class SlicesEvidence(EvidenceRecord):
    """quality-slices: each envelope against its one-sided bound, with the samples behind it."""

    envelopes: list[JudgedEnvelope]
    """One per declared envelope."""
    slices: dict[str, dict[str, Any]]
    """Per slice: n, continuation, dependency, fingerprint and breakdowns."""
    space: str
    """`text` or `tokens`."""
    datasets: dict[str, str | None]
    """Per slice: the dataset fingerprint."""
    samples: dict[str, list[dict[str, Any]]]
    """Per slice: scored samples (flipped first), written beside the dossier as JSONL."""
    timing: dict[str, Any]
    """Wall time, time inside forwards, samples per second."""


__all__ = ["JudgedEnvelope", "SlicesEvidence"]
