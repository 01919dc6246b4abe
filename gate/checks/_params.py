"""The params of every built-in check, in one module that imports no torch.

`gate validate` and `gate plan` validate a manifest's `checks.<name>.params` (and the policy's) with
these models without importing the checks themselves, so planning stays instant. Each check module
re-exports its own model; a check in the package shape (gate.checks._shape) defines it in its
torch-free `__init__`, and this module serves it from there. A plugin
check's params are validated by importing the plugin.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from gate.checks import (
    engine_batch_invariance,
    engine_invalidation,
    engine_isolation,
    engine_prefix_parity,
    engine_repeat_consistency,
    greedy_parity,
    hash_collision,
    mask_oracle,
    prefix_sweep,
    reset_isolation,
    tenant_isolation,
)
from gate.checks.greedy_parity import GreedyParityParams as GreedyParityParams
from gate.checks.hash_collision import HashCollisionParams as HashCollisionParams
from gate.checks.mask_oracle import MaskOracleParams as MaskOracleParams
from gate.checks.prefix_sweep import PrefixSweepParams as PrefixSweepParams
from gate.checks.reset_isolation import ResetIsolationParams as ResetIsolationParams
from gate.checks.tenant_isolation import TenantIsolationParams as TenantIsolationParams
from gate.core.check import Lengths, Params, PrefixLengths
from gate.core.manifest import Budget, ClockName, IdentityField
from gate.quality.stats import MIN_SAMPLES

DISTRIBUTION_FAULTS = ["accept-all", "inverted-ratio", "residual-from-target", "residual-abs", "bonus-from-draft"]
"""Faults of a speculative sampler the distribution test must have power against."""


class BatchInvarianceParams(Params):
    """The requests batched together and how far each is decoded."""

    lengths: Lengths = Field(default_factory=lambda: [3, 9, 17, 30])
    """Prompt lengths of the requests padded into one batch (at least two differ, so rows are padded)."""
    steps: int = Field(default=6, ge=1, le=256)
    """Greedy tokens each request of a left-padded batch decodes (the reference's continuation)."""
    equal_length: int = Field(default=12, ge=1, le=1_000_000)
    """Prompt length of the equal-length batch (no padding: batch composition alone)."""
    top_k: int = Field(default=5, ge=1, le=50)
    """Logits kept per row at the first failing position."""
    atol: float | None = Field(default=None, ge=0)
    """Tolerance: absolute part (default: the claim's, else dtype-aware)."""
    rtol: float | None = Field(default=None, ge=0)
    """Tolerance: relative part (default: the claim's, else dtype-aware)."""


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


class InvalidationParams(Params):
    """Update seeds and probe sizes."""

    update_seed: int = Field(default=1, ge=0)
    """Seed of the weight and adapter updates."""
    prompt_blocks: int = Field(default=3, ge=1, le=64)
    """Full blocks per prompt (its length is prompt_blocks * block_size + 1)."""


WATCHED: tuple[ClockName, ...] = ("ttft_p95", "tpot_p95", "itl_p95", "throughput", "live_bytes")
"""Unbudgeted clocks phase-performance judges by default: one per clock family."""


class PhasePerformanceParams(Params):
    """Parameters of the phase-performance check."""

    scenario: str = "chat-shared-prefix"
    """A shipped scenario's name (scenarios/*.yaml) or a path to a scenario file."""
    conversations: int | None = Field(default=None, ge=1, le=4096)
    """Override the scenario's number of conversations (smaller for a quick run)."""
    max_concurrent: int | None = Field(default=None, ge=1, le=4096)
    """Override the scenario's admission limit."""
    repeats: int = Field(default=6, ge=2, le=100)
    """Replays per path, alternating which path goes first: the paired observations each interval is built from."""
    confidence: float = Field(default=0.95, gt=0.5, lt=1)
    """Two-sided confidence of each ratio's interval."""
    resamples: int = Field(default=2000, ge=200, le=100_000)
    """Bootstrap resamples per interval."""
    min_effect: float = Field(default=0.10, ge=0, le=10)
    """Without a budget, warn when a clock is confidently worse than the reference by more than this
    share (its interval clears 1 + min_effect; fourteen clocks are judged at once, so a margin keeps
    an unchanged candidate quiet)."""
    watch: list[ClockName] = Field(default_factory=lambda: list(WATCHED))
    """Clocks judged without a budget (a confident regression warns); the rest are reported only."""
    gross: float = Field(default=2.0, gt=1)
    """Without a budget, also warn when a watched clock's point estimate is this many times worse even
    though the noise leaves its interval unresolved: a gross slowdown is never a green pass."""
    show_savings: bool = False
    """An approximation must show the saving it exists for: a budget below 1 (or a min_ratio above 1)
    passes only when the whole interval lies within it."""
    budgets: dict[ClockName, Budget] = Field(default_factory=dict)
    """Default budgets from the policy; the manifest's `performance` section replaces them clock by clock."""


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


class QualitySlicesParams(Params):
    """Parameters of the quality-slices check."""

    samples: int | None = Field(default=None, ge=1)
    """Evaluate exactly this many samples per slice (no power sizing, no top-up). Fewer than a
    slice needs for its declared effect makes its envelopes fail as underpowered."""
    max_samples: int | None = Field(default=None, ge=1)
    """Cap on samples per slice (default: the slice's own max_samples)."""
    batch_size: int = Field(default=8, ge=1)
    """Samples of equal prompt length scored together."""
    worst: int = Field(default=3, ge=0, le=20)
    """Worst samples kept per envelope."""
    log_samples: int = Field(default=500, ge=0, le=20000)
    """Samples per slice kept in the evidence (flipped first) for the dossier's JSONL download."""
    dataset_seed: int | None = None
    """Seed the slices are built from (default: the manifest's subject seed)."""
    space: Literal["auto", "tokens", "text"] = "auto"
    """Token space (ids), text space (the model's tokenizer), or auto: text when the reference
    path exposes a `tokenizer`, tokens otherwise."""
    extra_slices: list[str] = Field(default_factory=list)
    """Slices scored and reported without an envelope (context for the dossier)."""
    min_samples: int = Field(default=MIN_SAMPLES, ge=2)
    """No envelope is judged on fewer samples than this."""
    bootstrap_resamples: int = Field(default=2000, ge=200)
    """Resamples of the paired bootstrap."""
    evals_dir: str | None = None
    """Directory of slice definitions (default: the shipped evals/)."""


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
        from gate.speculative.sampler import FAULTS  # torch, only when the list is overridden

        unknown = [f for f in value if f not in FAULTS]
        if unknown:
            raise ValueError(f"unknown sampler faults {unknown} (known: {', '.join(FAULTS)})")
        return value


class SpecGreedyParams(Params):
    n_tokens: int | None = Field(default=None, ge=1, le=4096)
    """Continuation length; default: the longest of a greedy-tokens claim's lengths, else 32."""
    prompts: int = Field(default=8, ge=1, le=1024)
    """Seeded random prompts decoded as one batch."""
    prompt_len: int = Field(default=8, ge=1, le=4096)
    """Tokens per prompt."""
    min_rejections: int = Field(default=1, ge=1)
    """Rejected drafts required as proof that verification ran."""


class ScheduleFuzzParams(Params):
    """The search budget and the shape of the schedules it draws."""

    max_examples: int = Field(default=100, ge=1, le=100_000)
    """Schedules drawn before the search gives up (shrinking a failure comes on top)."""
    max_seconds: float = Field(default=30.0, gt=0, le=86_400)
    """Wall-clock budget of the search; a failure found in time is still shrunk."""
    max_steps: int = Field(default=8, ge=1, le=64)
    """Operations per schedule."""
    max_chunk: int = Field(default=32, ge=1, le=4096)
    """Largest prefill or append chunk, in tokens."""
    max_tokens: int = Field(default=96, ge=2, le=1_000_000)
    """Longest request a schedule builds (clipped to the paths' context)."""
    batch: int = Field(default=2, ge=1, le=16)
    """Rows per session (two or more let a row read another row's cache)."""
    forks: bool = True
    """Draw forks (a second live session prefilled with the current request's tokens) and switches between them."""
    joins: bool = True
    """Where the path batches continuously (gate.protocols.ContinuousBatching), draw requests joining
    and leaving its running batch, and decode steps of it."""
    slots: int = Field(default=3, ge=1, le=64)
    """Requests the running batch holds at once (a join beyond them waits: a no-op)."""
    atol: float | None = Field(default=None, ge=0)
    """Tolerance: absolute part (default: the claim's, else dtype-aware)."""
    rtol: float | None = Field(default=None, ge=0)
    """Tolerance: relative part (default: the claim's, else dtype-aware)."""


PACKAGES = (
    reset_isolation,
    hash_collision,
    tenant_isolation,
    engine_batch_invariance,
    engine_invalidation,
    engine_isolation,
    engine_prefix_parity,
    engine_repeat_consistency,
    greedy_parity,
    mask_oracle,
    prefix_sweep,
)
"""The checks in the package shape (gate.checks._shape): each states its own params model."""

BUILTIN_PARAMS: dict[str, type[Params]] = {
    "batch-invariance": BatchInvarianceParams,
    "cache-identity": CacheIdentityParams,
    "invalidation": InvalidationParams,
    "phase-performance": PhasePerformanceParams,
    "prefix-reuse-parity": PrefixReuseParityParams,
    "quality-slices": QualitySlicesParams,
    "schedule-fuzz": ScheduleFuzzParams,
    "spec-distribution": SpecDistributionParams,
    "spec-greedy": SpecGreedyParams,
    **{package.CARD: package.PARAMS for package in PACKAGES},
}
"""Check name -> its params model, for the built-in checks."""
