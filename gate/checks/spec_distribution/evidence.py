"""The evidence record of spec-distribution (its face's EVIDENCE; body.py writes it, view.py reads it)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, model_validator

from gate.core.evidence import EvidenceRecord, _Record


class Look(_Record):
    """One look of spec-distribution's sequential test."""

    n: int
    """Samples drawn so far."""
    statistic: float
    """G statistic on all of them."""
    dof: int
    """Degrees of freedom."""
    p_value: float
    """p-value, judged at the per-look level."""


class SequentialDesign(_Record):
    """spec-distribution's looks, fixed before any sample is drawn."""

    method: str
    """How the looks hold the claim's alpha."""
    planned_looks: list[int]
    """Cumulative sample size at each planned look."""
    pilot: int | None = None
    """A negative control's first look, on its own samples sized for its fault (not pooled with the
    planned looks, which then draw exactly what a positive run draws); None: no pilot."""
    alpha_per_look: float
    """Level of each look (alpha over the number of looks, the pilot included)."""
    budget: int
    """Most samples the check may draw (max_samples)."""
    reaches_power: bool
    """Whether the last planned look has the declared power against every observable fault."""
    history: list[Look]
    """The looks taken, up to the first rejection or the last planned one."""


class DistributionEvidence(EvidenceRecord):
    """spec-distribution: sampled continuations against the target's exact joint law."""

    categories: list[str] = Field(min_length=1)
    """Continuations (cells), at most a bounded number plus `(rest)` and `(outside enumeration)`."""
    observed: list[Annotated[float, Field(ge=0)]]
    """Sampled count per category."""
    expected: list[Annotated[float, Field(ge=0)]]
    """Expected count per category under the exact law."""
    statistic: float
    """G statistic (infinite when a sample has probability 0)."""
    p_value: float
    """p-value of the goodness-of-fit test."""
    dof: int
    """Degrees of freedom."""
    pooled_cells: int
    """Cells pooled for small expected counts."""
    alpha: float
    """Significance level."""
    declared_power: float
    """Power the policy requires against each named fault."""
    power: dict[str, float]
    """Power of this test at this n against each fault law."""
    samples_needed: dict[str, Any]
    """Samples each fault would need for the declared power."""
    k: int
    """Draft tokens per round."""
    horizon: int
    """Tokens per sampled continuation."""
    n_samples: int
    """Samples drawn."""
    temperature: float
    """Sampling temperature."""
    top_k: int
    """Sampling top-k."""
    prompt: list[Any]
    """The prompt's token ids."""
    by_depth: list[dict[str, Any]]
    """The same test on each continuation prefix."""
    efficiency: dict[str, Any]
    """Acceptance rate, tokens per target pass, throughput."""
    min_top_k_gap: float | None
    """Smallest logit gap at the top-k boundary (near-ties explain support differences)."""
    outside_enumeration_examples: list[list[int]]
    """Sampled continuations outside the enumerated support."""
    power_note: str | None = None
    """Why power was not computed."""
    sequential: SequentialDesign | None = None
    """The sequential design and the looks taken."""
    unobservable: dict[str, str] = Field(default_factory=dict)
    """Faults whose exact law with this draft is the target's, and why (no power asked of them)."""

    @model_validator(mode="after")
    def _one_count_per_category(self) -> DistributionEvidence:
        if not len(self.categories) == len(self.observed) == len(self.expected):
            raise ValueError("categories, observed and expected differ in length")
        return self


__all__ = ["DistributionEvidence", "Look", "SequentialDesign"]
