"""Typed evidence of the built-in checks: what a check writes and what the dossier reads.

A check builds one of these records and returns `record.dump()` as `Outcome.evidence`, so
results.json keeps a plain JSON object there (third-party checks write any object). The report
validates a built-in check's evidence back into its record (`EVIDENCE[check]`) and reads typed
fields only; the evidence of any other check, or evidence that does not validate, is shown as
generic tables. A field the dossier does not draw is typed loosely (`dict[str, Any]`): it is
shown as a table.

A shape may not change without its reader in gate/report/evidence.py, docs/report-evidence.md and
the committed schemas (`schemas/evidence-<check>.schema.json`)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class EvidenceRecord(_Record):
    """A check's typed evidence."""

    def dump(self) -> dict[str, Any]:
        """The JSON object results.json stores. An optional field (default None) is absent when
        None; a required field that may be None is stored as null."""
        return self.model_dump(exclude_defaults=True)


class ToleranceRecord(_Record):
    """The |Δlogit| tolerance a check judged with: atol + rtol·|ref|."""

    atol: float
    """Absolute tolerance (the line the dossier draws)."""
    rtol: float
    """Relative tolerance, times the largest |logit| of the reference row."""
    source: str
    """Where it came from: params, claim or the dtype default."""


# --- sweep: prefix-sweep --------------------------------------------------------------------------


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


# --- greedy continuations: greedy-parity, spec-greedy ---------------------------------------------


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


# --- distribution: spec-distribution --------------------------------------------------------------


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


# --- slices: quality-slices -----------------------------------------------------------------------


class Judgement(_Record):
    """One envelope judged on one slice (gate.quality.stats.judge)."""

    point: float
    """Point estimate (reported, never decisive)."""
    bound: float
    """One-sided bound at `confidence`: lower for `>=`, upper for `<=`."""
    n: int
    """Samples judged."""
    n_required: int
    """Samples needed for the declared effect and power."""
    sigma: float
    """Standard deviation the sample size was derived with."""
    passed: bool
    """True only when n >= n_required and the bound satisfies the threshold."""
    reason: str
    """Why it passed or failed, in words."""
    planned: int | None = None
    """Set when scoring stopped at n of these planned samples because the envelope failed however
    the rest turned out (a rate's deterministic curtailment); `bound` is over the n scored, and
    `reason` gives the best case over `planned`. None: every planned sample was scored."""


class JudgedEnvelope(Judgement):
    """One declared envelope with its judgement and the samples that did worst."""

    slice: str
    """Slice name (evals/*.yaml)."""
    metric: str
    """Metric judged."""
    comparator: str
    """`>=` or `<=`."""
    threshold: str
    """Threshold, as a decimal string."""
    confidence: float
    """Confidence of the one-sided bound."""
    min_detectable_effect: float | None
    """Effect size the sample size was planned for."""
    power: float | None
    """Power the sample size was planned for."""
    worst: list[dict[str, Any]]
    """The samples that did worst on the metric."""


class SlicesEvidence(EvidenceRecord):
    """quality-slices: each envelope against its one-sided bound, with the samples behind it."""

    envelopes: list[JudgedEnvelope]
    """One per declared envelope."""
    slices: dict[str, dict[str, Any]]
    """Per slice: n, continuation, dependency, fingerprint and breakdowns."""
    space: str
    """`text` or `tokens`."""
    datasets: dict[str, str | None]
    """Per slice: the dataset fingerprint."""
    samples: dict[str, list[dict[str, Any]]]
    """Per slice: scored samples (flipped first), written beside the dossier as JSONL."""
    timing: dict[str, Any]
    """Wall time, time inside forwards, samples per second."""


# --- prefix: prefix-reuse-parity ------------------------------------------------------------------


class ServedRequest(_Record):
    """One request to the prefix cache, against what a correct cache lets it reuse."""

    request: str
    """What the request tests."""
    prompt_tokens: int
    """Prompt length."""
    entitled: int
    """Tokens a correct cache may reuse, given the requests before it."""
    reused: int
    """Tokens the cache reused."""
    hit_blocks: int
    """Cached blocks hit."""
    spans: list[list[int]]
    """Reused [start, end) spans."""
    served_at: list[int]
    """Positions served from the cache (first few)."""
    served_from: list[Any]
    """Where each served position came from (first few)."""
    computed: int
    """Tokens computed."""
    collisions_detected: int
    """Hash collisions the cache detected."""
    evicted: int
    """Blocks evicted."""
    max_abs_delta: float | None
    """|Δlogit| against a full recompute, when compared."""
    argmax_flips: int
    """Rows whose argmax differs from the full recompute."""


class StoreEvidence(EvidenceRecord):
    """What every check of a cross-request prefix store records: its requests and what it could not assert."""

    requests: list[ServedRequest] = Field(default_factory=list)
    """The requests (first and last when many); none when nothing could be asserted."""
    unproven_assertions: dict[str, str] | None = None
    """Assertions the store could not support -> the capability it lacks."""
    store_starts_in_run: list[str] | None = None
    """Every store the run's prefix checks started so far (on an engine, each is a process start)."""


class PrefixReuseEvidence(StoreEvidence):
    """prefix-reuse-parity: requests with shared prefixes, each against a full recompute."""

    tolerance: ToleranceRecord
    """The tolerance outputs were compared with."""
    compare: str
    """`argmax` or `logits`."""
    below_entitlement: list[str]
    """Requests that reused less than they could (a missed hit, not a wrong one)."""
    cache: dict[str, Any]
    """The cache's state after the last request."""
    budget: dict[str, Any] | None = None
    """The budget contract (stores with a byte budget): the budget, bytes per block and served, bytes
    held after each request, evictions, and whether the latest prompt still hit."""


# --- prefix: cache-identity, tenant-isolation, hash-collision, invalidation -----------------------


class IdentityProbe(ServedRequest):
    """The base prompt under one identity field changed (or, for `token-ids` and `positions`, its
    tokens changed or moved): what the cache reused, against what it was entitled to."""

    repeat_reused: int | None = None
    """Tokens reused when the variant request was repeated (it must hit its own entries)."""
    computation_differs_by: float | None = None
    """Largest |Δlogit| between the variant's computation and the base's: the field matters."""


class CacheIdentityEvidence(StoreEvidence):
    """cache-identity: one request per identity field, differing from a cached one in that field only."""

    fields: dict[str, IdentityProbe] = Field(default_factory=dict)
    """Identity field -> the request that varied it."""
    identity_example: ServedRequest | None = None
    """The second request of the fixed identity example (it must reuse exactly positions 0 and 1)."""
    unverified: list[str] = Field(default_factory=list)
    """Fields the candidate could not vary (unproven, named)."""
    identity_report_checked: bool = False
    """Whether the identity the store reports was compared with what it keys on."""


class TenantIsolationEvidence(StoreEvidence):
    """tenant-isolation: the same prompts under tenants and salts, also under a weak hash."""


class HashCollisionEvidence(StoreEvidence):
    """hash-collision: requests under a weak injected hash, also under other identities."""

    cache: dict[str, Any] | None = None
    """The store's state after the last request."""


class UpdateProbe(_Record):
    """A weight (or adapter) update between two pairs of requests for one prompt."""

    computation_changed_by: float
    """Largest |Δlogit| the update made to the prompt's uncached computation (0: it tests nothing)."""
    hit_before: int
    """Tokens the repeated request before the update reused (0: the miss after it proves nothing)."""
    reused_after: int
    """Tokens the first request after the update reused (must be 0: entries of the old weights)."""
    hit_after: int
    """Tokens the repeat after the update reused (the new entries)."""


class RestoredStore(_Record):
    """A store restarted from the saved cache file."""

    admitted: int
    """Blocks its restore admitted."""
    dropped: dict[str, int]
    """Reason -> blocks its restore refused."""
    consumed: int | None = None
    """Tokens of restored entries it served (on another checkpoint this must be 0)."""
    reused_tokens: int | None = None
    """Tokens of restored entries it reused (on the same checkpoint: proof that restore works)."""


class RestartProbe(_Record):
    """A saved cache restored by a store restarted on another checkpoint, then on the same one."""

    blocks_saved: int
    other_checkpoint: RestoredStore
    same_checkpoint: RestoredStore


class InvalidationEvidence(StoreEvidence):
    """invalidation: no stale entry served after a weight or adapter update or a restart."""

    updates: dict[str, UpdateProbe] = Field(default_factory=dict)
    """`model` / `adapter` -> the update and the requests around it."""
    restart: RestartProbe | None = None
    """The restart, when the store offers snapshots."""


# --- serving: phase-performance -------------------------------------------------------------------


class LatencySamples(_Record):
    """One path's latency samples, in seconds."""

    ttft_s: list[float]
    """Time to first token per request."""
    tpot_s: list[float]
    """Time per output token per request."""
    itl_s: list[float]
    """Inter-token latencies."""


class LiveBytes(_Record):
    """One path's live cache bytes over time."""

    t_s: list[float]
    """Seconds since the scenario started."""
    live_bytes: list[float]
    """Bytes held."""
    theory_bytes: list[float] | None
    """What a dense KV cache of the live tokens would hold."""


class ClockRow(_Record):
    """One clock, candidate against reference."""

    clock: str
    """Clock name (ttft_p95, tpot_p95, throughput, live_bytes, ...)."""
    measures: str
    """What it measures, in words."""
    unit: str
    """Unit of `reference` and `candidate`."""
    better: str
    """`lower` or `higher`."""
    reference: float | None
    """Reference's value."""
    candidate: float | None
    """Candidate's value."""
    budget: str
    """The policy's budget, in words ("" when watched only)."""
    verdict: str
    """What the interval says against the budget."""
    ratio: float | None = None
    """candidate / reference."""
    low: float | None = None
    """Lower end of the ratio's interval."""
    high: float | None = None
    """Upper end of the ratio's interval."""
    confidence: float | None = None
    """Joint confidence of the intervals."""
    repeats: int | None = None
    """Interleaved repeats behind the interval."""


class ServingEvidence(EvidenceRecord):
    """phase-performance: four clocks on a serving scenario, with the samples behind them."""

    scenario: dict[str, Any]
    """The serving scenario as run."""
    timer: str
    """The clock the timings were read from."""
    device: str
    """Device."""
    repeats: int
    """Interleaved repeats."""
    confidence: float
    """Joint confidence of the intervals."""
    clocks: list[ClockRow]
    """The four clocks (and the watched ones)."""
    kv_theory: dict[str, Any] | None
    """Theoretical KV bytes per token and live/theory ratios."""
    pressure: dict[str, Any]
    """Per path: memory pressure during the last repeat."""
    goodput_share: dict[str, Any]
    """Per path: share of requests within the SLO."""
    paths: dict[str, str]
    """Path names."""
    latency_samples: dict[str, LatencySamples]
    """Per path (`reference`, `candidate`): latency samples."""
    live_bytes_over_time: dict[str, LiveBytes]
    """Per path: live bytes over time."""
    servers: dict[str, Any] | None = None
    """Engines behind HTTP: each server's command, port, start-up time and log tail."""
    cache_reset: dict[str, str] | None = None
    """Engines behind HTTP: how each server's prefix cache was reset between repeats."""
    correctness: dict[str, Any] | None = None
    """Engines behind HTTP: every reply of the candidate's last repeat against the reference's answer to
    the same prompt sent alone, under the claim (compared, failed, the failures, max |Δlogprob|)."""


# --- schedules: schedule-fuzz ---------------------------------------------------------------------


class ScheduleReproducer(_Record):
    """The minimal failing schedule a search shrank to."""

    schedule: list[str]
    """Its steps in order ("prefill 15", "append 2", "reset", "fork", "switch")."""
    steps: int
    """How many."""
    failure: str
    """What the last step did ("argmax differs at step 4 (row 0, position 16: ...)")."""
    text: str
    """The steps and the failure on one line."""
    snippet: str
    """Python that rebuilds both paths through the adapter registry and replays the schedule."""
    found_after_schedules: int | None
    """Schedules drawn until the first failing one."""
    reproduces_on_replay: bool
    """Whether the schedule failed again when run alone (false: state outlived the sessions)."""


class ScheduleFuzzEvidence(EvidenceRecord):
    """schedule-fuzz: random cache schedules against full passes, a failure shrunk to a reproducer."""

    coverage: dict[str, Any]
    """Schedules, operations by kind, the longest request, layout edges touched per kind."""
    tolerance: ToleranceRecord
    """The tolerance steps were judged with."""
    seed: int
    """The search's seed."""
    reproducer: ScheduleReproducer | None = None
    """The minimal failing schedule, when the search found one."""


# --- engines under load: engine-concurrent-conversations ------------------------------------------


class ConversationRequest(_Record):
    """One request of the concurrent workload, compared with the reference's answer to its prompt alone."""

    id: int
    """The request's number, in the order the rounds sent them."""
    conversation: int
    """Its conversation."""
    tenant: int
    """Its tenant (the system prefix its conversation opens with; -1: none, a private conversation)."""
    turn: int
    """Its turn in the conversation (0: a fresh conversation)."""
    round: int
    """The round it was sent in (a round's requests go out at the same moment)."""
    kind: str
    """fresh, continued (its conversation was in the round before) or resumed after others."""
    prompt_tokens: int
    """Prompt length (the whole history for a later turn)."""
    cached_tokens: int | None
    """Prompt tokens the candidate says it reused (None: not reported)."""
    tokens_match: bool
    """The candidate's greedy tokens equal the reference's."""
    first_divergence: int | None
    """First generated position where they differ."""
    max_abs_dlogprob: float
    """Largest |Δlogprob| over aligned tokens and shared top-k entries."""
    tie: bool
    """The divergence is a tie (inside the reference's top-k within tolerance)."""
    failed: bool
    """The reply breaks the claim."""
    warned: bool
    """Within the claim, but over the logprob tolerance (or a tie)."""
    aim: str | None = None
    """The reuse mechanism the request was aimed at (gate.checks._mechanisms; None: a seeded round's)."""
    aimed_at: int | None = None
    """The length it aimed at: the shared prefix, the long prompt, the edited turn's cut; for an
    end-of-sequence request (aim `eos-stop`), the tokens the reference decoded up to and including its stop."""
    eos: bool = False
    """Sent without ignore_eos: the engine ended the reply where it stops (gate.checks._eos)."""
    stop: str | None = None
    """Where the candidate stopped otherwise than the reference, in words (an end-of-sequence request)."""


class MechanismReach(_Record):
    """One reuse mechanism of the candidate: whether the workload aimed at it and reached it, by the
    engine's own counters, or why it could not."""

    mechanism: str
    """window-edge, checkpoint-interval, swa-cache-wrap, host-cache-restore, edited-turn or eos-stop (replies
    that end at end-of-sequence on the reference, gate.checks._eos)."""
    aimed: bool
    """The workload sent requests aimed at it."""
    lengths: list[int]
    """The lengths aimed at."""
    requests: int
    """Requests aimed at it."""
    reached: bool
    """The engine's counters show it ran (reused tokens, requests in flight together, its log)."""
    evidence: str
    """What was counted, in words (or why it could not be aimed at)."""


class ConversationFailure(_Record):
    """A reply that broke the claim, with the other request whose state it most likely carries."""

    request: int
    """The failing request."""
    other_request: int | None
    """The other conversation's request named with it (None: none was sent before it)."""
    how: str
    """Why that one: its reference answer equals this reply, or its prompt shares the most tokens."""
    message: str
    """The failure in words, naming both requests."""


class ConversationsEvidence(EvidenceRecord):
    """engine-concurrent-conversations: every reply of a concurrent multi-tenant workload against the reference."""

    claim: str
    """The claim each reply was judged under."""
    cache_geometry: str
    """The candidate's cache geometry the system prefix length was derived from."""
    system_prefix: int
    """Tokens of each tenant's system prefix."""
    tenants: int
    """Distinct system prefixes."""
    conversations: int
    """Conversations in the workload."""
    turns: int
    """Turns per conversation."""
    max_concurrent: int
    """Requests sent at once in a round."""
    candidate_slots: int | None
    """Slots the candidate states (None: not stated)."""
    rounds: int
    """Rounds planned."""
    rounds_overlapping: int
    """Rounds in which requests were in flight together."""
    requests: list[ConversationRequest]
    """Every request sent, in order."""
    failures: list[ConversationFailure]
    """The replies that broke the claim."""
    cache_tiers_not_reset: list[str]
    """Cache tiers of the handed-over candidate that its reset before this check could not reach."""
    noise_floor: dict[str, Any] | None = None
    """The candidate's measured noise (gate.checks._noise): same-prompt pairs alone and in batches, off the
    cache, their worst |Δlogprob| and the floor the replies were judged against; None: not measurable."""
    servers: dict[str, Any]
    """Each server's command, port, start-up time and log tail."""
    mechanisms: list[MechanismReach] = Field(default_factory=list)
    """The candidate's reuse mechanisms: aimed at and reached, or why not (gate.checks._mechanisms)."""
    engine_log_counters: dict[str, int] | None = None
    """What the candidate's log says its cache did during the check (None: its log does not say)."""


__all__ = [
    "CacheIdentityEvidence",
    "ConversationFailure",
    "ConversationRequest",
    "ConversationsEvidence",
    "DistributionEvidence",
    "EvidenceRecord",
    "GreedyEvidence",
    "HashCollisionEvidence",
    "InvalidationEvidence",
    "PrefixReuseEvidence",
    "ScheduleFuzzEvidence",
    "ScheduleReproducer",
    "ServingEvidence",
    "SlicesEvidence",
    "SpecGreedyEvidence",
    "StoreEvidence",
    "SweepEvidence",
    "TenantIsolationEvidence",
    "ToleranceRecord",
]
