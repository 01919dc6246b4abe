"""The evidence record of spec-greedy (its face's EVIDENCE; body.py writes it, view.py reads it)."""

from __future__ import annotations

from typing import Any

from gate.core.evidence import EvidenceRecord, _Record


class TokenPair(_Record):
    """Two greedy continuations side by side."""

    target: list[int]
    """The target's own greedy tokens."""
    candidate: list[int]
    """The speculative path's."""


class SpecGreedyEvidence(EvidenceRecord):
    """spec-greedy: the speculative path's greedy tokens against the target's."""

    matching_by_length: dict[str, int]
    """Per continuation length: sequences that matched."""
    first_divergence: list[int | None]
    """Per sequence: the first differing token, or null."""
    efficiency: dict[str, Any]
    """Proposals, acceptances, target passes."""
    example: TokenPair
    """The first sequence, token by token."""


__all__ = ["SpecGreedyEvidence", "TokenPair"]
