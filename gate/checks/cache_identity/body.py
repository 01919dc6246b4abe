"""cache-identity's body: measure a probe per identity field and the identity example, judge, explain."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import torch

from gate.checks._compare import Tolerance, compare_rows, tolerance_for
from gate.checks._prefix_oracle import Oracle, memoized, recompute_oracle, reference_oracle
from gate.checks._prefix_store import StorePool
from gate.checks._prefix_support import (
    IDENTITY_EXAMPLE_A,
    IDENTITY_EXAMPLE_B,
    WHY,
    Findings,
    PrefixRun,
    RequestLog,
    ReuseTally,
    Served,
    describe_excess,
    prefix_run,
    seeded_ids,
    stop_rule,
    until_first_failure,
)
from gate.checks._probe import probe_order as shared_probe_order
from gate.checks.cache_identity import CacheIdentityParams
from gate.checks.cache_identity.events import Event, FieldProbe, OwnPass, Repeated, event_problems
from gate.checks.cache_identity.evidence import CacheIdentityEvidence
from gate.core.check import CheckContext, Outcome, check
from gate.prefix.cache import CacheIdentity
from gate.protocols import PrefixIdentityReport, PrefixServing, PrefixSiblings, offered

TENANT = "tenant-a"
BASE_KEY: Hashable = ("base",)
"""The ledger key of every request under the base identity."""


def probe_order(fields: list[str], control: str | None) -> list[str]:
    """The fields in the order a run probes them (gate.checks._probe): a control probes first the
    field its fault's name points at (key-ignores-tenant: tenant)."""
    return [fields[i] for i in shared_probe_order(fields, control, points_at)]


def points_at(fault: str, field: str) -> bool:
    """Whether a fault's name points at an identity field (key-ignores-revision: model-revision)."""
    words = [w for w in fault.split("-") if w not in ("key", "ignores")]
    return any(part.startswith(word) for word in words for part in field.split("-"))


# --- measure --------------------------------------------------------------------------------------


@dataclass
class Probing:
    """The run of probes on the base worker: its requests, the events observed and the problems so far."""

    ctx: CheckContext
    worker: PrefixServing
    log: RequestLog
    prompt: list[int]
    ref_rows: torch.Tensor
    tol: Tolerance
    events: list[Event] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    own_rows: torch.Tensor | None = None
    again: Served | None = None
    """P's first repeat (the proof the cache is on)."""
    table: dict[str, dict[str, Any]] = field(default_factory=dict)

    def record(self, event: Event) -> None:
        self.events.append(event)
        self.problems.extend(event_problems(event, self.worker.block_size))

    def own(self) -> torch.Tensor:
        """The candidate's uncached pass over P, checked once against the reference (it is the oracle)."""
        if self.own_rows is None:
            self.own_rows = self.worker.recompute(self.prompt).logits
            compared = compare_rows(self.ref_rows, self.own_rows.to(self.ref_rows.device), self.tol)
            self.record(OwnPass(bool(compared.over_tolerance.any())))
        return self.own_rows

    def base(self, label: str, oracle: Oracle) -> Served:
        return self.log.issue(self.worker, label, self.prompt, BASE_KEY, oracle, tenant=TENANT)

    def cache_on(self, oracle: Oracle) -> None:
        """Serve P again: an identical request must hit, or no miss below proves anything."""
        self.again = self.base("base repeated", oracle)
        self.record(Repeated(self.again))


def _variant(
    worker: PrefixServing, name: str, findings: Findings, pool: StorePool
) -> tuple[PrefixServing, dict[str, Any], Hashable] | None:
    """(store, request options, ledger key) of a request differing only in `name`, or None (unproven)."""
    if name == "adapter":
        names = worker.adapters()
        if not names:
            findings.lacks(name, "the store serves no adapters, so no request can differ in adapter alone")
            return None
        return worker, {"adapter": names[0], "tenant": TENANT}, ("adapter", names[0])
    if name == "tenant":
        return worker, {"tenant": "tenant-b"}, ("tenant", "tenant-b")
    siblings: PrefixSiblings | None = findings.needs(worker, PrefixSiblings, name)
    if siblings is None:
        return None
    sibling = pool.start(f"sibling {name}", lambda: siblings.sibling(name))
    if sibling is None:
        findings.lacks(name, f"the store cannot build a sibling that differs in {name} alone")
        return None
    return sibling, {"tenant": TENANT}, ("sibling", name)


def _identities(
    base: PrefixServing, other: PrefixServing, options: dict[str, Any]
) -> tuple[CacheIdentity, CacheIdentity] | None:
    """The identities both stores report for the base request and the variant, where both report one."""
    base_report, other_report = offered(base, PrefixIdentityReport), offered(other, PrefixIdentityReport)
    if base_report is None or other_report is None:
        return None
    base_id = base_report.identity_for(tenant=TENANT)
    return base_id, other_report.identity_for(adapter=options.get("adapter"), tenant=options.get("tenant"))


def _probe_tokens(p: Probing, name: str) -> FieldProbe:
    """token-ids: P with one token changed in block 1 (exactly block 0 may be reused); positions: P's
    later blocks at offset 0 (nothing may be reused)."""
    bs = p.worker.block_size
    tokens = p.prompt[bs:]
    if name == "token-ids":
        at = bs + bs // 2
        tokens = list(p.prompt)
        tokens[at] = seeded_ids(p.ctx.candidate.vocab_size, 1, p.ctx.seed + 11, avoid=[p.prompt[at]])[0]
    served = p.log.issue(p.worker, name, tokens, BASE_KEY, recompute_oracle(p.worker), tenant=TENANT)
    return FieldProbe(name, served, served.row())


def _probe_variant(p: Probing, name: str, run: PrefixRun) -> FieldProbe | None:
    """P under another adapter, tenant or sibling, twice (None: the store cannot express it)."""
    variant = _variant(p.worker, name, run.findings, run.pool)
    if variant is None:
        return None
    other, options, key = variant
    oracle = recompute_oracle(other, options.get("adapter"))
    first = p.log.issue(other, name, p.prompt, key, oracle, **options)
    if first.reused:  # a control stops here: the violation it makes needs nothing more
        p.log.fail_now(f"{name}: a request that differs only in {name} reused {first.reused} tokens")
    repeat = p.log.issue(other, f"{name} repeated", p.prompt, key, oracle, **options)
    difference = float((oracle(p.prompt) - p.own().to(p.ref_rows.device)).abs().max())
    row = {**first.row(), "repeat_reused": repeat.reused, "computation_differs_by": difference}
    return FieldProbe(name, first, row, repeat, options, _identities(p.worker, other, options))


def _probe_fields(p: Probing, fields: list[str], run: PrefixRun) -> None:
    """Probe every field in order, P served again before each."""
    base_oracle = memoized(recompute_oracle(p.worker))  # P comes back before every field
    p.base("base", base_oracle)
    # a control probes its likeliest field at once: reuse beyond entitlement is a failure whether or
    # not the cache is on (only a miss needs it shown on), so P's repeat comes after that probe
    if not p.ctx.stop_at_first_failure:
        p.cache_on(base_oracle)
    for name in fields:
        # serve P again first: under a tight byte budget its blocks may have been evicted, and a
        # probe against an absent entry would prove nothing (a control's first probe follows P)
        if name != fields[0] and p.again is None:
            p.cache_on(base_oracle)
        elif p.again is not None:
            p.base(f"base before {name}", base_oracle)
        probe = _probe_tokens(p, name) if name in ("token-ids", "positions") else _probe_variant(p, name, run)
        if probe is None:
            continue
        p.table[name] = probe.row
        p.record(probe)
        if p.problems:  # a control stops here (fail_now: a no-op in a positive run)
            p.log.fail_now(p.problems[-1])
    if p.again is None:  # a control that probed a single field and found nothing
        p.cache_on(base_oracle)
    p.own()


@dataclass(frozen=True)
class Observations:
    """The probes on the base worker (in order) and the identity example's second request."""

    worker: PrefixServing
    log: RequestLog
    fields: list[str]
    events: list[Event]
    table: dict[str, dict[str, Any]]
    again: Served
    example_a: list[int]
    example_b: Served
    reports: bool
    """Whether the store reports its identity (PrefixIdentityReport)."""


def _identity_example(
    ctx: CheckContext, params: CacheIdentityParams, run: PrefixRun, tol: Tolerance
) -> tuple[list[int], RequestLog]:
    """Background, cache identity, exactly: A then B on a worker of the example's block size."""
    small = run.pool.shared(
        ("block size", params.seed_example_block_size),
        lambda: run.candidate.fresh(block_size=params.seed_example_block_size),
    )
    vocab = ctx.candidate.vocab_size
    a, b = [t % vocab for t in IDENTITY_EXAMPLE_A], [t % vocab for t in IDENTITY_EXAMPLE_B]
    example_log = RequestLog(ReuseTally(small.block_size), tol)
    example_log.issue(small, "identity example A", a, BASE_KEY, recompute_oracle(small), tenant=TENANT)
    example_log.issue(small, "identity example B", b, BASE_KEY, recompute_oracle(small), tenant=TENANT)
    return a, example_log


def measure(ctx: CheckContext, params: CacheIdentityParams, run: PrefixRun) -> Observations:
    """Every declared field probed in the order of `probe_order`, then the identity example."""
    worker = run.pool.shared(("base",), run.candidate.fresh)
    bs, vocab = worker.block_size, ctx.candidate.vocab_size
    declared = [f.value for f in (params.fields or ctx.manifest.identity)] or list(WHY)
    fields = probe_order(declared, ctx.control)
    tol = tolerance_for(ctx)
    # a control stops at the first wrong output, or at the first field with a violation (fail_now)
    log = RequestLog(ReuseTally(bs), tol, stop=stop_rule(ctx, excess=False))
    prompt = seeded_ids(vocab, params.prompt_blocks * bs + 2, ctx.seed * 1000 + 3)
    reports = run.findings.needs(worker, PrefixIdentityReport, "identity report against keying") is not None
    p = Probing(ctx, worker, log, prompt, reference_oracle(ctx)(prompt), tol)
    if not ctx.stop_at_first_failure:  # a control checks it where it first needs it, or at the end
        p.own()
    _probe_fields(p, fields, run)
    assert p.again is not None
    a, example_log = _identity_example(ctx, params, run, tol)
    log.served.extend(example_log.served)
    return Observations(worker, log, fields, p.events, p.table, p.again, a, example_log.served[-1], reports)


# --- judge and explain ----------------------------------------------------------------------------


def judge(obs: Observations) -> list[str]:
    """The violations in the order observed, then the identity example's and the wrong outputs' (pure)."""
    bs = obs.worker.block_size
    problems = [p for event in obs.events for p in event_problems(event, bs)]
    example_b = obs.example_b
    if example_b.reply.stats.reused_spans != [(0, 2)]:
        problems.append(
            f"cache-identity example: after {obs.example_a}, {example_b.tokens} must reuse exactly positions 0 and 1 "
            f"and never the later equal ids: it {describe_excess(example_b)}"
        )
    wrong = obs.log.wrong_outputs()
    if wrong:
        worst = max(s.max_abs_delta or 0.0 for s in wrong)
        problems.append(
            f"outputs differ from the uncached computation (max |Δ| {worst:.3g}) in: "
            + ", ".join(s.label for s in wrong)
        )
    return problems


def explain(obs: Observations, params: CacheIdentityParams, run: PrefixRun) -> Outcome:
    """The Outcome of the findings, built once: a field left unverified is reported as the params say."""
    findings = run.findings
    unverified = [f for f in obs.fields if f in findings.lacking]
    log = obs.log
    metrics = {
        "fields_probed": len(obs.fields) - len(unverified),
        "fields_unverified": len(unverified),
        "violations": len(findings.problems),
        "identity_example_reused": obs.example_b.reused,
        "requests": len(log.served),
        "reused_tokens": sum(s.reused for s in log.served),
        "store_starts": run.store_starts,
    }
    evidence = CacheIdentityEvidence.model_validate(
        {
            "fields": obs.table,
            "identity_example": obs.example_b.row(),
            "unverified": unverified,
            "identity_report_checked": obs.reports,
            "requests": log.table(),
        }
    ).dump()
    passed = (
        f"identical requests hit ({obs.again.reused} tokens reused); a request differing only in each of "
        f"{', '.join(f for f in obs.fields if f not in unverified)} reused nothing it was not entitled to"
        + ("; the identity the store reports matches what it keys on" if obs.reports else "")
        + "; the cache-identity example shares exactly positions 0-1"
    )
    return findings.outcome(
        passed,
        metrics=metrics,
        evidence=evidence,
        exercise=log.exercise(obs.worker),
        observation=log.observation(),
        relabel={"unproven": params.unverifiable} if unverified else None,
    )


@check("cache-identity", params=CacheIdentityParams)
@until_first_failure
def cache_identity(ctx: CheckContext, params: CacheIdentityParams) -> Outcome:
    """Requests differing in a declared identity field miss; identical ones hit; the cache-identity example holds."""
    run = prefix_run(ctx)
    obs = measure(ctx, params, run)
    run.findings.problems.extend(judge(obs))
    return explain(obs, params, run)
