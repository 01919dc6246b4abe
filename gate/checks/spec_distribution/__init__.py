"""spec-distribution: speculative sampling keeps the target's output distribution.

Greedy equality is no evidence for sampling: a sampler with the wrong acceptance ratio or residual
keeps greedy output and changes the distribution. So the check enumerates the target's exact joint
distribution over the next `horizon` tokens of one seeded prompt (temperature and top-k keep it to
at most top_k^horizon cells), draws n seeded continuations through the candidate's speculative
sampler, and applies a G-test at the claim's alpha. The horizon must exceed the draft length k, or
bugs in the bonus token (drawn at position k + 1) cannot show.

Samples are drawn sequentially. For every fault in `power_against`, the exact distribution that
fault would produce with this target and draft is enumerated too. Before any sample is drawn, a
schedule of looks is fixed: sample sizes doubling from `min_samples` up to the budget
`max_samples`, and the fewest looks after which the test (each look at alpha / looks, Bonferroni,
so the whole sequence holds alpha) rejects every such fault with the declared power (non-central
χ²). The check stops at the first look that rejects (a control stops at its first detection) or
at the last planned look. A negative control first looks at a pilot sized for its own fault, with
Bonferroni over the pilot and the planned looks; the laws and the looks are computed once per run
and shared with the controls whose candidates answer every probability query alike
(gate.checks._spec_design). A fault whose exact law equals the target's with this draft is
unobservable here and named up front; one the budget cannot reach with the declared power leaves
the check `unproven`, saying which and why, never a failure of a correct sampler. A configuration
in which the draft is never rejected (a draft identical to the target) exercises nothing: it
fails, whatever the test says.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from gate.checks._shape import lazy_body
from gate.checks.spec_distribution.evidence import DistributionEvidence
from gate.core.check import Params
from gate.protocols import Capability

DISTRIBUTION_FAULTS = ["accept-all", "inverted-ratio", "residual-from-target", "residual-abs", "bonus-from-draft"]
"""Faults of a speculative sampler the distribution test must have power against."""
SAMPLER_FAULTS = (*DISTRIBUTION_FAULTS, "drop-bonus")
"""gate.speculative.sampler.FAULTS by name, in its order, named here so validating `power_against`
imports no torch (a test keeps them equal). drop-bonus keeps the distribution."""


class SpecDistributionParams(Params):
    temperature: float = Field(default=1.0, gt=0)
    """Sampling temperature, applied identically to target and draft."""
    top_k: int = Field(default=4, ge=2, le=32)
    """Top-k truncation: keeps the enumeration to at most top_k^horizon cells."""
    horizon: int | None = Field(default=None, ge=1, le=8)
    """Tokens per sampled continuation; default k + 1 (the least that shows bonus-token bugs)."""
    prompt_len: int = Field(default=4, ge=1, le=512)
    """Length of the seeded random prompt every continuation starts from."""
    min_samples: int = Field(default=2000, ge=50)
    """The first look's sample size (the power-derived size is often smaller)."""
    max_samples: int = Field(default=200_000, ge=100)
    """The budget: most samples drawn. Looks double from min_samples up to it until the declared power is
    reached; a fault the test cannot show with this many samples leaves the check unproven."""
    batch_size: int = Field(default=2048, ge=1)
    """Continuations sampled per batched call."""
    power_against: list[str] = Field(default_factory=lambda: list(DISTRIBUTION_FAULTS))
    """Sampler faults the sample size must detect with the declared power."""
    min_rejections: int = Field(default=10, ge=1)
    """Fewer rejected drafts than this means the residual path never ran: nothing was exercised."""
    max_cells: int = Field(default=20_000, ge=10)
    """Refuse enumerations larger than this (raise top-k or horizon with care)."""

    @field_validator("power_against")
    @classmethod
    def _known_faults(cls, value: list[str]) -> list[str]:
        unknown = [f for f in value if f not in SAMPLER_FAULTS]
        if unknown:
            raise ValueError(f"unknown sampler faults {unknown} (known: {', '.join(SAMPLER_FAULTS)})")
        return value


CARD, PARAMS, EVIDENCE = "spec-distribution", SpecDistributionParams, DistributionEvidence
NEEDS = frozenset({Capability.SPECULATIVE_PATH})
__getattr__ = lazy_body(__name__)


__all__ = ["CARD", "DISTRIBUTION_FAULTS", "EVIDENCE", "NEEDS", "PARAMS", "SAMPLER_FAULTS", "SpecDistributionParams"]
