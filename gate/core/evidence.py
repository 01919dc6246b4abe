"""Typed evidence: the base records, and what several built-in checks share of what they write and the
dossier reads (the tolerance, an envelope's judgement, the prefix stores' requests, the engines'
reuse mechanisms). Each built-in check's own record lives with its check and is returned as
`record.dump()` in `Outcome.evidence`; the report validates it back and reads typed fields only. A
shape may not change without its views, docs/report-evidence.md and the committed schemas."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


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


# --- slices: gate.quality.stats judges, quality-slices reports ------------------------------------


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


# --- prefix stores: prefix-reuse-parity, cache-identity, tenant-isolation, hash-collision, invalidation


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


# --- engines under load: gate.checks._mechanisms and _eos build it -----------------------------------


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
