"""The evidence record of greedy-parity (its face's EVIDENCE; body.py writes it, view.py reads it)."""

from __future__ import annotations

from typing import Any

from gate.core.evidence import EvidenceRecord, ToleranceRecord, _Record


class Divergence(_Record):
    """The first step where a batch row's greedy continuations part."""

    step: int
    """Generated step (0 is the first generated token)."""
    row: int
    """Batch row."""
    absolute_position: int
    """Prompt length + step."""
    reference_token: int
    """Reference's token at that step."""
    candidate_token: int
    """Candidate's token at that step."""
    reference_margin: float
    """The reference's preference for its own token over the candidate's."""
    tie_band: float
    """Tolerance of that row: a margin within it is a tie, not a bug."""
    tie: bool
    """Whether the divergence is within the tie band."""
    max_abs_delta: float
    """|Δlogit| of that step's rows."""
    reference_top_k: list[Any]
    """Reference's top-k (token, logit) at that step."""
    candidate_top_k: list[Any]
    """Candidate's top-k at that step."""
    tokens_from: int
    """Step of the first token in the two windows below."""
    reference_tokens: list[int]
    """Reference continuation around the divergence."""
    candidate_tokens: list[int]
    """Candidate continuation around the divergence."""


class GreedyRun(_Record):
    """One prompt batch's greedy continuations."""

    prompt_len: int
    """Prompt length."""
    steps: int
    """Tokens generated."""
    match: dict[str, bool]
    """Per continuation length: whether every row matched."""
    first_divergence: Divergence | None = None
    """The earliest real (non-tie) divergence, else the earliest tie."""
    tied_rows: int | None = None
    """Rows whose divergence was a tie."""


class GreedyEvidence(EvidenceRecord):
    """greedy-parity: greedy continuations on both paths."""

    runs: list[GreedyRun]
    """One per prompt batch."""
    tolerance: ToleranceRecord
    """The tie band's tolerance."""


__all__ = ["Divergence", "GreedyEvidence", "GreedyRun"]
