"""spec-distribution: speculative sampling keeps the target's output distribution.

The target's exact joint law over the next `horizon` tokens of one seeded prompt is enumerated
(top-k keeps it to at most top_k^horizon cells) and the candidate's samples are G-tested against
it, at looks fixed before sampling (sizes doubling from `min_samples`, each at alpha / looks) so
that every fault in `power_against`, whose exact law is enumerated too, is rejected with the
declared power (gate.checks._spec_design).
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
