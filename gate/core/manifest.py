"""The manifest: what changed, what equivalence it claims, and which paths to compare.

This module imports no torch: `gate validate` and `gate plan` must stay instant.
The shape of `Manifest` may not change without bumping its `apiVersion` (gate/v1).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from datetime import date
from decimal import Decimal, InvalidOperation
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

INT64_MAX = 2**63 - 1
MAX_CLAIMED_TOKENS = 100_000
"""Most greedy tokens one claim may ask for, summed over its lengths (claimed work is bounded)."""
MAX_THRESHOLD_MAGNITUDE = Decimal(10) ** 6
METRIC_RANGES: dict[str, tuple[Decimal | None, Decimal | None]] = {
    "greedy-match": (Decimal(0), Decimal(1)),
    "top1-agreement": (Decimal(0), Decimal(1)),
    "accuracy": (Decimal(0), Decimal(1)),
    "accuracy-drop": (Decimal(-1), Decimal(1)),
    "kl": (Decimal(0), None),
}
"""The values each known slice metric can take: a threshold outside, or on the edge a comparator can
never cross, states a claim that cannot fail (or cannot pass)."""
DEVICE_PATTERN = re.compile(r"^(cpu|mps|(cuda|xpu)(:[0-9]{1,3})?)$")


class Record(BaseModel):
    """Base for every gate record: unknown keys are rejected, docstrings become descriptions."""

    model_config = ConfigDict(
        extra="forbid", use_attribute_docstrings=True, populate_by_name=True, ser_json_inf_nan="strings"
    )


class Intervention(str, Enum):
    """The kind of decoding change (release-gate step 1; background: the release gate)."""

    layout = "layout"
    scheduling = "scheduling"
    prefix_reuse = "prefix-reuse"
    proposal_and_verify = "proposal-and-verify"
    quantisation = "quantisation"
    eviction = "eviction"
    engine_serving = "engine-serving"
    """How an engine gate did not write serves a model behind HTTP: prefix cache, batching, KV type."""
    hosted_cache = "hosted-cache"
    """A hosted API's prompt cache, which cannot be switched off: judged by behaviour only."""


class ClaimLevel(str, Enum):
    """The equivalence the change claims (release-gate step 2)."""

    exact = "exact"
    tolerance = "tolerance"
    greedy_tokens = "greedy-tokens"
    distribution = "distribution"
    bounded_degradation = "bounded-degradation"


class IdentityField(str, Enum):
    """An input to the cache key: anything that can change K, V, mask or position (background: cache identity)."""

    token_ids = "token-ids"
    positions = "positions"
    model_revision = "model-revision"
    adapter = "adapter"
    tokenizer = "tokenizer"
    rope_scaling = "rope-scaling"
    attention_window = "attention-window"
    attention_mask = "attention-mask"
    kv_dtype = "kv-dtype"
    tenant = "tenant"


class Change(Record):
    """Where the change under test lives. All fields optional."""

    repository: str | None = None
    """Repository URL or owner/name."""
    pull_request: int | None = Field(default=None, alias="pull-request")
    """Pull request number."""
    commit: str | None = None
    """Commit the change was built from; filled from CI environment variables when absent."""
    paths: list[str] = Field(default_factory=list)
    """Repository-relative files that implement the change (e.g. the cache kernel). Under GitHub
    Actions a failing check is annotated on those of them the pull request changed."""

    def with_ci_commit(self, environ: dict[str, str] | None = None) -> Change:
        """Record the commit named by CI environment variables when the manifest gives none: $GATE_COMMIT,
        else on a GitHub pull_request event the PR head commit from $GITHUB_EVENT_PATH (not the merge
        commit GITHUB_SHA names), else GITHUB_SHA, CI_COMMIT_SHA, BUILDKITE_COMMIT, GIT_COMMIT."""
        env = os.environ if environ is None else environ
        if self.commit:
            return self
        if env.get("GATE_COMMIT"):
            return self.model_copy(update={"commit": env["GATE_COMMIT"]})
        if env.get("GITHUB_EVENT_NAME", "").startswith("pull_request") and env.get("GITHUB_EVENT_PATH"):
            # GITHUB_SHA is the temporary merge commit on pull_request events
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError, AttributeError):
                pr = json.loads(Path(env["GITHUB_EVENT_PATH"]).read_text(encoding="utf-8"))["pull_request"]
                number = pr.get("number") if isinstance(pr.get("number"), int) else None
                update = {"commit": str(pr["head"]["sha"]), "pull_request": self.pull_request or number}
                return self.model_copy(update=update)
        for var in ("GITHUB_SHA", "CI_COMMIT_SHA", "BUILDKITE_COMMIT", "GIT_COMMIT"):
            if env.get(var):
                return self.model_copy(update={"commit": env[var]})
        return self


class ExactClaim(Record):
    """Bit-identical logits. Meaningful only between paths that run the same shapes."""

    level: Literal["exact"]


class ToleranceClaim(Record):
    """Logits within atol/rtol, and argmax agreement (the load-bearing assertion, background: parity)."""

    level: Literal["tolerance"]
    atol: float | None = Field(default=None, ge=0)
    """Absolute tolerance on logits; defaults to a dtype-aware value."""
    rtol: float | None = Field(default=None, ge=0)
    """Relative tolerance on logits; defaults to a dtype-aware value."""


class GreedyTokensClaim(Record):
    """Identical greedy continuations of each of `tokens` lengths."""

    level: Literal["greedy-tokens"]
    tokens: list[Annotated[int, Field(gt=0, le=100_000)]] = Field(default_factory=lambda: [8, 64], max_length=32)
    """Continuation lengths that must match token for token (at most 32 lengths, 100,000 tokens in all)."""

    @field_validator("tokens")
    @classmethod
    def _bounded_work(cls, value: list[int]) -> list[int]:
        if sum(value) > MAX_CLAIMED_TOKENS:
            raise ValueError(f"claims {sum(value)} greedy tokens in all; the limit is {MAX_CLAIMED_TOKENS}")
        return value


class DistributionClaim(Record):
    """The same output distribution under sampling, tested at significance level `alpha`."""

    level: Literal["distribution"]
    alpha: float = Field(default=0.01, gt=0, lt=0.5)
    """Significance level of the goodness-of-fit test."""
    power: float = Field(default=0.9, gt=0, lt=1)
    """Power the sample size is derived for, against the declared negative controls."""


class Comparator(str, Enum):
    """How a slice metric is compared with its threshold."""

    ge = ">="
    le = "<="


class Envelope(Record):
    """One slice's bound on degradation, judged on a one-sided confidence bound."""

    slice: str
    """Slice name, as defined under evals/."""
    metric: str
    """Metric name, e.g. greedy-match, top1-agreement, kl, accuracy."""
    comparator: Comparator
    """`>=` for rates that must stay high, `<=` for divergences that must stay low."""
    threshold: str
    """Threshold as a decimal string (no binary float surprises), e.g. "0.95"."""
    confidence: float = Field(default=0.95, gt=0.5, lt=1)
    """Confidence level of the one-sided bound."""
    min_detectable_effect: float = Field(default=0.05, alias="min-detectable-effect", gt=0, lt=1)
    """Smallest degradation the slice must be able to detect; sets the minimum sample size."""
    power: float = Field(default=0.8, gt=0, lt=1)
    """Power against `min_detectable_effect`."""

    @field_validator("threshold")
    @classmethod
    def _threshold_is_decimal(cls, value: str) -> str:
        try:
            number = Decimal(value)
        except InvalidOperation:
            raise ValueError(f"threshold {value!r} is not a decimal number written as a string") from None
        if not number.is_finite():
            raise ValueError(f"threshold {value!r} is not a finite number: a claim against it cannot fail")
        if abs(number) > MAX_THRESHOLD_MAGNITUDE:
            raise ValueError(f"threshold {value!r} is absurd (beyond +/-{MAX_THRESHOLD_MAGNITUDE:,})")
        return value

    @model_validator(mode="after")
    def _threshold_can_decide(self) -> Envelope:
        low, high = METRIC_RANGES.get(self.metric, (None, None))
        t = Decimal(self.threshold)
        if (low is not None and t < low) or (high is not None and t > high):
            span = f"[{low if low is not None else '-inf'}, {high if high is not None else 'inf'}]"
            raise ValueError(f"threshold {self.threshold} is outside what {self.metric} can be, {span}")
        if (self.comparator == Comparator.ge and low is not None and t <= low) or (
            self.comparator == Comparator.le and high is not None and t >= high
        ):
            raise ValueError(
                f"{self.metric} {self.comparator.value} {self.threshold} holds for every candidate: "
                "a claim that cannot fail"
            )
        return self


class BoundedDegradationClaim(Record):
    """Bounded task-level degradation: every envelope must hold on its slice."""

    level: Literal["bounded-degradation"]
    envelopes: list[Envelope] = Field(min_length=1)
    """Per-slice envelopes; each is judged separately."""


Claim = Annotated[
    ExactClaim | ToleranceClaim | GreedyTokensClaim | DistributionClaim | BoundedDegradationClaim,
    Field(discriminator="level"),
]


class PathSpec(Record):
    """One execution path: an adapter and its options (validated by the adapter's Options)."""

    adapter: str
    """Registered adapter name (entry point group `gate.adapters`)."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Adapter options; validated against that adapter's own pydantic Options model."""


class Subject(Record):
    """What runs: the reference path, the candidate path, and where."""

    reference: PathSpec
    """The path whose behaviour defines correct (usually a full pass, no cache)."""
    candidate: PathSpec
    """The path under test (the changed cache, scheduler or sampler)."""
    device: str = Field(default="cpu", pattern=DEVICE_PATTERN.pattern)
    """torch device: cpu, cuda, cuda:1, mps, xpu; checked to exist before anything runs."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Model dtype for both paths."""
    seed: int = Field(default=0, ge=0, le=INT64_MAX)
    """Seed for weights, inputs and sampling."""


class CheckOverride(Record):
    """Manifest-side parameters for one planned check (merged over the policy's)."""

    params: dict[str, Any] = Field(default_factory=dict)
    """Parameters merged over the policy's parameters for this check."""


ClockName = Literal[
    "ttft_p50",
    "ttft_p95",
    "ttft_p99",
    "tpot_p50",
    "tpot_p95",
    "tpot_p99",
    "itl_p50",
    "itl_p95",
    "itl_p99",
    "throughput",
    "goodput",
    "live_bytes",
    "live_bytes_mean",
    "peak_memory",
]
"""The clocks a manifest may budget (gate.core.clocks.METRICS; background: four clocks)."""


class Budget(Record):
    """A performance budget on one clock, as a candidate/reference ratio judged on its confidence
    interval: e.g. `tpot_p95: {max_ratio: 1.05}` (at most 5 % slower per token), `live_bytes:
    {max_ratio: 0.6}` (at least 40 % fewer live KV bytes), `throughput: {min_ratio: 0.95}`."""

    max_ratio: float | None = Field(default=None, gt=0)
    """The ratio must not exceed this (time, bytes: lower is better)."""
    min_ratio: float | None = Field(default=None, gt=0)
    """The ratio must not fall below this (throughput, goodput: higher is better)."""

    @model_validator(mode="after")
    def _one_bound(self) -> Budget:
        if self.max_ratio is None and self.min_ratio is None:
            raise ValueError("a budget needs max_ratio or min_ratio")
        if self.max_ratio is not None and self.min_ratio is not None and self.min_ratio > self.max_ratio:
            raise ValueError(f"min_ratio {self.min_ratio} is above max_ratio {self.max_ratio}")
        return self


class KnownBug(Record):
    """A known bug of the subject (an upstream library's, not the change's), declared as an expected
    failure: a failure of `check` whose diagnosed class is `class`, on an installed version that
    `affects` names, reads "known bug, expected (LINK)" and does not colour the verdict. A waiver-like
    relaxation the pull request itself writes: every declaration is printed on the dossier's first
    screen and bound into the evidence digest an approver signs (docs/audit.md: known bugs)."""

    id: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    """Short name of the bug, e.g. transformers-dynamic-reset."""
    link: str = Field(min_length=1, max_length=500)
    """Where the bug is described: an upstream issue or pull request, or a doc of this repository."""
    affects: str = Field(min_length=1, max_length=200)
    """The affected releases as a requirement of one package, e.g. "transformers>=5.2,<5.18"; the
    declaration applies only where that package is installed at a version inside."""
    check: str = Field(min_length=1)
    """The check the bug fails (a check of this manifest's plan)."""
    bug_class: str = Field(alias="class", min_length=1)
    """The bug class that check's diagnosis names for it (e.g. reset-leak, crash)."""
    expires: date
    """Last day (UTC) the declaration applies; after it the failure counts again, with a warning."""
    reason: str = Field(min_length=1, max_length=1000)
    """Why the failure is accepted as the library's, not the change's."""

    @field_validator("affects")
    @classmethod
    def _one_package_range(cls, value: str) -> str:
        from packaging.requirements import InvalidRequirement, Requirement

        try:
            req = Requirement(value)
        except InvalidRequirement as err:
            raise ValueError(
                f"affects {value!r} is not a package requirement such as 'transformers>=5.2,<5.18': {err}"
            ) from None
        if not req.specifier or req.marker is not None or req.extras or req.url:
            raise ValueError(
                f"affects {value!r} must be one package and a version range, e.g. 'transformers>=5.2,<5.18'"
            )
        return value


class Manifest(Record):
    """A release-gate manifest (`apiVersion: gate/v1`)."""

    api_version: Literal["gate/v1"] = Field(alias="apiVersion")
    """Manifest format version."""
    name: str = Field(min_length=1, max_length=200)
    """Short name of the change."""
    description: str = ""
    """What changed, in words."""
    change: Change = Field(default_factory=Change)
    """Repository, pull request and commit of the change."""
    intervention: Intervention
    """Exactly one intervention kind."""
    claim: Claim
    """The equivalence claimed, with its parameters."""
    identity: list[IdentityField] = Field(default_factory=list)
    """Fields the change keys its cache on; the policy says which are required."""
    subject: Subject
    """Reference and candidate paths, device, dtype, seed."""
    checks: dict[str, CheckOverride] = Field(default_factory=dict)
    """Optional per-check parameter overrides, keyed by check name."""
    performance: dict[ClockName, Budget] = Field(default_factory=dict)
    """Performance budgets per clock (release-gate step 6), judged by `phase-performance` on confidence
    intervals; the policy decides how severe a broken budget is for this intervention."""
    known_bugs: list[KnownBug] = Field(default_factory=list, max_length=50)
    """Known bugs of the subject declared as expected failures (see KnownBug): recorded in the plan,
    results.json, the dossier's first screen and the evidence digest an approver signs."""

    @field_validator("known_bugs")
    @classmethod
    def _unique_known_bugs(cls, value: list[KnownBug]) -> list[KnownBug]:
        ids = [bug.id for bug in value]
        if len(set(ids)) != len(ids):
            raise ValueError(
                f"known bug ids must not repeat: {', '.join(sorted({i for i in ids if ids.count(i) > 1}))}"
            )
        return value

    @field_validator("identity")
    @classmethod
    def _unique_identity(cls, value: list[IdentityField]) -> list[IdentityField]:
        if len(set(value)) != len(value):
            raise ValueError("identity fields must not repeat")
        return value
