"""Evidence tables for one judged slice: worst samples, breakdowns by cell, kind and distance.

Bounded on purpose (the dossier plots these): a few worst samples per envelope, at most one row
per (context length, depth) cell, distance bins in powers of two.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gate.quality.scoring import SampleScores

Render = Callable[[Sequence[int]], str]


@dataclass(frozen=True)
class Metric:
    """How an envelope metric is read from the per-sample scores and judged."""

    kind: Literal["rate", "mean"]
    """rate (0/1 per sample, Wilson bound) or mean (bootstrap bound)."""
    column: str
    """SampleScores column of the candidate's per-sample score."""
    sigma: float | None
    """Standard deviation for the sample-size rule; None: the observed one (plug-in)."""
    reference_column: str | None = None
    """For a paired difference: the reference's per-sample score (judged: reference - candidate)."""
    needs_answer: bool = False


METRICS: dict[str, Metric] = {
    "greedy-match": Metric("rate", "greedy_match", 0.5),
    "top1-agreement": Metric("mean", "top1", 0.5),
    "kl": Metric("mean", "kl", None),
    "accuracy": Metric("rate", "cand_correct", 0.5, needs_answer=True),
    "accuracy-drop": Metric("mean", "cand_correct", 0.5, reference_column="ref_correct", needs_answer=True),
}
"""greedy-match: the candidate's greedy continuation equals the reference's over k tokens.
top1-agreement: share of the k teacher-forced steps whose argmax agrees. kl: mean KL(reference ‖
candidate) in nats over the k steps. accuracy: the candidate's greedy answer equals the ground
truth. accuracy-drop: reference accuracy minus candidate accuracy, paired per sample."""


def sample_value(scores: SampleScores, metric: Metric, i: int) -> float:
    value = float(getattr(scores, metric.column)[i])
    if metric.reference_column:
        return float(getattr(scores, metric.reference_column)[i]) - value
    return value


def worst_samples(
    rows: Any, scores: SampleScores, metric: Metric, comparator: str, count: int, render: Render
) -> list[dict[str, Any]]:
    """The `count` samples that did worst on `metric` (ties: larger KL first)."""
    higher_is_worse = comparator == "<=" or metric.reference_column is not None

    def badness(i: int) -> tuple[float, float]:
        v = sample_value(scores, metric, i)
        return (v if higher_is_worse else -v, scores.kl[i])

    picked = sorted(range(len(scores.kl)), key=badness, reverse=True)[:count]
    return [
        {
            **_sample(rows[i], scores, render, i, tail=16),
            "depth": float(rows[i]["depth"]),
            "distance": len(rows[i]["prompt"]) - int(rows[i]["evidence_at"]),
            "value": sample_value(scores, metric, i),
            "greedy_match": bool(scores.greedy_match[i]),
            "top1": scores.top1[i],
            "kl_max": scores.kl_max[i],
        }
        for i in picked
    ]


def _sample(row: Any, scores: SampleScores, render: Render, i: int, tail: int) -> dict[str, Any]:
    """One scored sample: where it sits, how far it diverged, and the texts a reader compares."""
    return {
        "index": int(row["index"]),
        "kind": row["kind"],
        "context_len": int(row["context_len"]),
        "first_divergence": scores.first_divergence[i],
        "kl": scores.kl[i],
        "prompt_tail": render(list(row["prompt"])[-tail:]),
        "answer": render(list(row["answer"])),
        "reference": render(scores.ref_tokens[i]),
        "candidate": render(scores.cand_tokens[i]),
    }


def slice_samples(rows: Any, scores: SampleScores, render: Render, limit: int) -> list[dict[str, Any]]:
    """Every scored sample of a slice (flipped ones first, at most `limit`): the prompt's tail, the
    expected answer, and the reference's and candidate's greedy continuations. The dossier offers
    them as JSONL, like lm-evaluation-harness's --log_samples."""
    order = sorted(range(len(scores.kl)), key=lambda i: (bool(scores.greedy_match[i]), i))[:limit]
    return [
        {**_sample(rows[i], scores, render, i, tail=32), "flipped": not bool(scores.greedy_match[i])} for i in order
    ]


def _summary(idx: list[int], scores: SampleScores) -> dict[str, Any]:
    """The mean of each score over the samples `idx` (None for none)."""
    columns = {"greedy_match": "greedy_match", "top1": "top1", "kl": "kl"}
    if scores.ref_correct:
        columns |= {"reference_accuracy": "ref_correct", "candidate_accuracy": "cand_correct"}
    means = {key: [getattr(scores, column)[i] for i in idx] for key, column in columns.items()}
    return {"n": len(idx), **{key: sum(xs) / len(xs) if xs else None for key, xs in means.items()}}


def breakdowns(rows: Any, scores: SampleScores) -> dict[str, Any]:
    """Point estimates per (context length, depth) cell, per kind and per distance bin."""
    cells: dict[tuple[int, float], list[int]] = defaultdict(list)
    kinds: dict[str, list[int]] = defaultdict(list)
    bins: dict[int, list[int]] = defaultdict(list)
    for i in range(len(scores.kl)):
        row = rows[i]
        cells[(int(row["context_len"]), float(row["depth"]))].append(i)
        kinds[str(row["kind"])].append(i)
        distance = max(1, len(row["prompt"]) - int(row["evidence_at"]))
        bins[1 << int(math.log2(distance))].append(i)
    return {
        "overall": _summary(list(range(len(scores.kl))), scores),
        "by_cell": [{"context_len": c, "depth": d, **_summary(idx, scores)} for (c, d), idx in sorted(cells.items())],
        "by_kind": {k: _summary(idx, scores) for k, idx in sorted(kinds.items())},
        "by_distance": [
            {"distance_from": lo, "distance_to": 2 * lo, **_summary(idx, scores)} for lo, idx in sorted(bins.items())
        ],
    }
