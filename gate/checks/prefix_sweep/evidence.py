"""The evidence record of prefix-sweep (its face's EVIDENCE; body.py writes it, view.py reads it)."""

from __future__ import annotations

from typing import Any

from pydantic import model_validator

from gate.core.evidence import EvidenceRecord, ToleranceRecord, _Record


class SweepSeries(_Record):
    """One entry per prefix length kept in the evidence (failures and ties first, then evenly spaced)."""

    length: list[int]
    """Prefix lengths, ascending."""
    max_abs_delta: list[float]
    """Largest |Δlogit| against the reference's full pass at each length."""
    argmax_agree: list[bool]
    """Whether the greedy token agreed on every batch row at each length."""
    tie: list[bool]
    """Whether the reference's top two logits were within tolerance at each length (a flip there is no bug)."""
    min_margin: list[float]
    """Smallest top-1/top-2 margin of the reference at each length."""

    @model_validator(mode="after")
    def _one_entry_per_length(self) -> SweepSeries:
        if not self.length:
            raise ValueError("no lengths")
        for name in ("max_abs_delta", "argmax_agree", "tie", "min_margin"):
            if len(getattr(self, name)) != len(self.length):
                raise ValueError(f"{name} has {len(getattr(self, name))} entries for {len(self.length)} lengths")
        return self


class SweepRow(_Record):
    """One batch row at one length: a failure (argmax flip or beyond tolerance) or a tie."""

    length: int
    """Prefix length."""
    row: int
    """Batch row."""
    margin: float
    """Reference top-1/top-2 margin."""
    reference_token: int | None = None
    """Reference argmax (failures)."""
    candidate_token: int | None = None
    """Candidate argmax (failures)."""
    max_abs_delta: float | None = None
    """|Δlogit| of the row (failures)."""
    tolerance: float | None = None
    """The tolerance the margin was within (ties)."""


class Boundaries(_Record):
    """The candidate's layout boundaries (block, chunk and window edges)."""

    count: int
    """How many there are up to the context."""
    first: list[int]
    """The first few."""
    lengths: list[int]
    """All of them (at most 512): drawn on the plot, never folded out of the table."""


class SweepCoverage(_Record):
    """Wanted standard lengths against what the paths reach."""

    wanted: list[int]
    """Standard lengths the policy wants, within `scoped_to`."""
    scoped_to: int | None
    """The claim's explicit `longest`, if any."""
    reachable_longest: int
    """The longest prefix both paths reach (max_len)."""
    unreachable: list[int]
    """Wanted lengths beyond reach: the sweep is unproven."""


class Bitwise(_Record):
    """Exact claims: the candidate against the reference running the same cached schedule."""

    reference_path: str
    """The reference path that ran the candidate's schedule."""
    lengths_bit_identical: int
    """Lengths whose logits were bit-identical."""
    lengths: int
    """Lengths compared."""
    max_abs_delta_vs_cached: float
    """Largest |Δlogit| against that cached schedule."""


class SweepEvidence(EvidenceRecord):
    """prefix-sweep: |Δlogit| and argmax agreement against prefix length."""

    per_length: SweepSeries
    """The per-length series the dossier plots."""
    rows_total: int
    """Lengths swept."""
    rows_shown: int
    """Lengths kept in `per_length`."""
    failures: list[SweepRow]
    """The first failing rows."""
    ties: list[SweepRow]
    """The first tied rows."""
    tolerance: ToleranceRecord
    """The tolerance the sweep judged with."""
    boundaries: Boundaries
    """The candidate's layout boundaries."""
    coverage: SweepCoverage
    """Wanted against reachable lengths."""
    boundary_coverage: dict[str, Any]
    """Per boundary kind: edges up to the context and edges visited ±1."""
    sweep_plan: dict[str, Any]
    """The plan's settings (and `stopped_at` when a control stopped at the first failure)."""
    bitwise: Bitwise | None = None
    """Set for exact claims."""


__all__ = ["Bitwise", "Boundaries", "SweepCoverage", "SweepEvidence", "SweepRow", "SweepSeries"]
