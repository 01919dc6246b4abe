"""The params of every built-in check, in one module that imports no torch.

`gate validate` and `gate plan` validate a manifest's `checks.<name>.params` (and the policy's) with
these models without importing the checks themselves, so planning stays instant. Each check module
re-exports its own model; a check in the package shape (gate.checks._shape) defines it in its
torch-free `__init__`, and this module serves it from there. A plugin
check's params are validated by importing the plugin.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gate.checks import (
    batch_invariance,
    cache_identity,
    engine_batch_invariance,
    engine_concurrent_conversations,
    engine_invalidation,
    engine_isolation,
    engine_prefix_parity,
    engine_repeat_consistency,
    hash_collision,
    invalidation,
    phase_performance,
    prefix_reuse_parity,
    quality_slices,
    reset_isolation,
    schedule_fuzz,
    short_prompt,
    spec_distribution,
    spec_greedy,
    tenant_isolation,
)
from gate.checks._sweep import SEED_LENGTHS
from gate.checks.batch_invariance import BatchInvarianceParams as BatchInvarianceParams
from gate.checks.cache_identity import CacheIdentityParams as CacheIdentityParams
from gate.checks.hash_collision import HashCollisionParams as HashCollisionParams
from gate.checks.invalidation import InvalidationParams as InvalidationParams
from gate.checks.phase_performance import PhasePerformanceParams as PhasePerformanceParams
from gate.checks.prefix_reuse_parity import PrefixReuseParityParams as PrefixReuseParityParams
from gate.checks.quality_slices import QualitySlicesParams as QualitySlicesParams
from gate.checks.reset_isolation import ResetIsolationParams as ResetIsolationParams
from gate.checks.schedule_fuzz import ScheduleFuzzParams as ScheduleFuzzParams
from gate.checks.spec_distribution import DISTRIBUTION_FAULTS as DISTRIBUTION_FAULTS
from gate.checks.spec_distribution import SpecDistributionParams as SpecDistributionParams
from gate.checks.spec_greedy import SpecGreedyParams as SpecGreedyParams
from gate.checks.tenant_isolation import TenantIsolationParams as TenantIsolationParams
from gate.core.check import Lengths, Params, PrefixLengths


class GreedyParityParams(Params):
    tokens: Lengths | None = None
    """Continuation lengths that must match (default: the claim's `tokens` for greedy-tokens, else [8, 64])."""
    prompt_lengths: Lengths = Field(default_factory=lambda: [7, 100])
    """Prompt lengths; each is a separate batch of random prompts."""
    batch: int = Field(default=2, ge=1, le=64)
    """Prompts per batch."""
    top_k: int = Field(default=5, ge=1, le=50)
    """Logits kept per row at the first diverging step."""
    atol: float | None = Field(default=None, ge=0)
    """Tie band: absolute part (default: the claim's, else dtype-aware)."""
    rtol: float | None = Field(default=None, ge=0)
    """Tie band: relative part (default: the claim's, else dtype-aware)."""
    chunked_prompt: bool | None = None
    """Feed the candidate's prompt as multi-token chunks cut at its layout boundaries (default: for
    scheduling changes)."""


class MaskOracleParams(Params):
    rtol: float | None = Field(default=None, gt=0)
    """Relative tolerance on the oracle's outputs (they are exact rationals, so only the probe's own
    rounding moves them). None: by the dtype the probe computes in (gate.checks.mask_oracle.ORACLE_RTOL:
    1e-5 in float32, a few units in the last place in bfloat16 and float16)."""
    heads: int = Field(default=4, ge=1)
    """Query heads of the nonzero-score variant."""
    kv_heads: int = Field(default=2, ge=1)
    """KV heads of the nonzero-score variant (grouped-query attention when fewer than heads)."""
    head_dim: int = Field(default=8, ge=1)
    """Head dimension of the nonzero-score variant."""
    poison_tail: bool = True
    """Repeat every case with NaN written into the allocated-but-unused cache slots."""


class PrefixSweepParams(Params):
    """Parameters of the prefix-sweep check."""

    lengths: PrefixLengths = Field(default_factory=lambda: list(SEED_LENGTHS))
    """Prefix lengths always visited (background: parity), clipped to the longest prefix."""
    log_spaced: int = Field(default=64, ge=0, le=4096)
    """How many log-spaced lengths from 1 to the longest prefix to add."""
    boundaries: bool = True
    """Visit the layout boundaries ±1 the candidate reports (block, chunk, window, page edges)."""
    first_edges: int = Field(default=8, ge=0)
    """Edges of each kind always visited ±1, from the shortest (short-prefix bugs live there);
    the last edge of each kind within reach is always visited too."""
    sampled_edges: int = Field(default=24, ge=0)
    """Further edges ±1 drawn (seeded by the run's seed) from every kind's remaining edges."""
    max_lengths: int | None = Field(default=256, ge=1)
    """Most lengths in all; the standard lengths and the first and last edges are kept beyond it.
    None: no cap."""
    exhaustive: bool = False
    """Every boundary ±1 of every kind up to `longest`, no cap, no reach (nightly jobs)."""
    reach: int | None = Field(default=8191, ge=1)
    """Longest prefix a bounded sweep visits (each length costs a causal pass up to it); the
    standard lengths and the first edge of every kind are visited even beyond it, and the coverage
    counts the edges left out. None: up to `longest`."""
    every_length_up_to: int | None = Field(default=None, ge=1)
    """Also visit every length 1..N (dense sweep)."""
    longest: int | None = Field(default=None, ge=1)
    """Longest prefix; default: the smaller model's max_len - 1. Setting it scopes the claim: the
    standard lengths beyond it are not wanted (the result records the scope)."""
    batch: int = Field(default=2, ge=1, le=64)
    """Independent random sequences, run as one batch."""
    compare: Literal["full", "cached"] = "full"
    """full: against one full pass (argmax + tolerance). cached: also bit-identical to the
    reference path running the same cached schedule (the only honest `exact`)."""
    atol: float | None = Field(default=None, ge=0)
    """Absolute logit tolerance (default: the claim's, else dtype-aware)."""
    rtol: float | None = Field(default=None, ge=0)
    """Relative logit tolerance (default: the claim's, else dtype-aware)."""
    evidence_rows: int = Field(default=96, ge=8, le=1024)
    """Most per-length rows kept in the evidence (failures first, then evenly spaced)."""


PACKAGES = (
    cache_identity,
    invalidation,
    prefix_reuse_parity,
    batch_invariance,
    schedule_fuzz,
    reset_isolation,
    hash_collision,
    tenant_isolation,
    engine_batch_invariance,
    engine_invalidation,
    engine_isolation,
    engine_prefix_parity,
    engine_repeat_consistency,
    engine_concurrent_conversations,
    phase_performance,
    short_prompt,
    spec_greedy,
    spec_distribution,
    quality_slices,
)
"""The checks in the package shape (gate.checks._shape): each states its own params model."""

BUILTIN_PARAMS: dict[str, type[Params]] = {
    "greedy-parity": GreedyParityParams,
    "mask-oracle": MaskOracleParams,
    "prefix-sweep": PrefixSweepParams,
    **{package.CARD: package.PARAMS for package in PACKAGES},
}
"""Check name -> its params model, for the built-in checks."""
