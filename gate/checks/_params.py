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
    engine_batch_invariance,
    engine_concurrent_conversations,
    engine_invalidation,
    engine_isolation,
    engine_prefix_parity,
    engine_repeat_consistency,
    hash_collision,
    phase_performance,
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
from gate.checks.hash_collision import HashCollisionParams as HashCollisionParams
from gate.checks.phase_performance import PhasePerformanceParams as PhasePerformanceParams
from gate.checks.quality_slices import QualitySlicesParams as QualitySlicesParams
from gate.checks.reset_isolation import ResetIsolationParams as ResetIsolationParams
from gate.checks.schedule_fuzz import ScheduleFuzzParams as ScheduleFuzzParams
from gate.checks.spec_distribution import DISTRIBUTION_FAULTS as DISTRIBUTION_FAULTS
from gate.checks.spec_distribution import SpecDistributionParams as SpecDistributionParams
from gate.checks.spec_greedy import SpecGreedyParams as SpecGreedyParams
from gate.checks.tenant_isolation import TenantIsolationParams as TenantIsolationParams
from gate.core.check import Lengths, Params, PrefixLengths
from gate.core.manifest import IdentityField


class CacheIdentityParams(Params):
    """Which fields to vary and how long the probe is."""

    fields: list[IdentityField] | None = None
    """Identity fields to probe; default: every field the manifest declares."""
    prompt_blocks: int = Field(default=3, ge=2, le=64)
    """Full blocks in the probe prompt (its length is prompt_blocks * block_size + 2)."""
    seed_example_block_size: int = Field(default=1, ge=1, le=2)
    """Block size of the worker that replays the cache-identity example (1 or 2 keeps it meaningful)."""
    unverifiable: Literal["unproven", "fail", "warn"] = "unproven"
    """What a declared field the candidate cannot vary (no siblings, no adapters) does: unproven names
    it and the policy rule's `missing_capability` decides; fail or warn override that."""


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


class InvalidationParams(Params):
    """Update seeds and probe sizes."""

    update_seed: int = Field(default=1, ge=0)
    """Seed of the weight and adapter updates."""
    prompt_blocks: int = Field(default=3, ge=1, le=64)
    """Full blocks per prompt (its length is prompt_blocks * block_size + 1)."""


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


class PrefixReuseParityParams(Params):
    """Workload of the parity check."""

    compare: Literal["logits", "greedy"] = "logits"
    """logits: every row within tolerance with the same argmax. greedy: the same argmax on every
    row (greedy continuations token for token); |Δlogit| over tolerance is only reported."""
    sequences: int = Field(default=2, ge=1, le=16)
    """Base sequences, each with its own family of requests."""
    base_blocks: int = Field(default=4, ge=2, le=64)
    """Full blocks in each base sequence (its length is base_blocks * block_size + 1)."""
    lengths: PrefixLengths | None = None
    """Shared-prefix lengths; default 0, 1 and every block boundary ±1 up to the base length."""
    suffix_len: int = Field(default=3, ge=1)
    """Fresh tokens after the shared prefix."""
    new_tokens: int | None = Field(default=None, ge=1)
    """Greedy continuation per request; default 4, or the longest of a greedy-tokens claim."""
    byte_budget: int | None = Field(default=None, ge=1)
    """Run on a worker with this cache budget (exercises eviction); default: the candidate's."""
    budget_blocks: int = Field(default=3, ge=1, le=64)
    """Budget contract (stores with a byte budget): a store whose budget holds this many blocks
    serves twice as many distinct blocks; it must stay within the budget by evicting."""
    atol: float | None = Field(default=None, ge=0)
    """Absolute logit tolerance; default: the claim's, else the dtype default."""
    rtol: float | None = Field(default=None, ge=0)
    """Relative logit tolerance; default: the claim's, else the dtype default."""


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
    "cache-identity": CacheIdentityParams,
    "greedy-parity": GreedyParityParams,
    "invalidation": InvalidationParams,
    "mask-oracle": MaskOracleParams,
    "prefix-reuse-parity": PrefixReuseParityParams,
    "prefix-sweep": PrefixSweepParams,
    **{package.CARD: package.PARAMS for package in PACKAGES},
}
"""Check name -> its params model, for the built-in checks."""
