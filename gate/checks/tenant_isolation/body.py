"""tenant-isolation's body: measure both rounds of tenants, judge leaks and reuse, explain."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gate.checks._compare import tolerance_for
from gate.checks._prefix_oracle import recompute_oracle
from gate.checks._prefix_store import StorePool, prefix_candidate, store_pool
from gate.checks._prefix_support import (
    Findings,
    RequestLog,
    ReuseTally,
    Served,
    beyond_any_identity,
    describe_excess,
    seeded_ids,
    stop_rule,
    until_first_failure,
)
from gate.checks.tenant_isolation import TenantIsolationParams
from gate.checks.tenant_isolation.evidence import TenantIsolationEvidence
from gate.core.check import CheckContext, Outcome, check
from gate.core.hazards import HazardFinding, weak_hash_hazard
from gate.prefix.cache import weak_hash
from gate.protocols import PrefixHashing, PrefixServing


@dataclass(frozen=True)
class Observations:
    """Every request served, split into those that must hit and those that must not reuse."""

    worker: PrefixServing
    log: RequestLog
    same: list[Served]
    cross: list[Served]
    weak_cross: list[Served]
    weak_round: bool
    """The store's hash could be replaced, so the weak-hash round ran."""
    weak_served: list[Served]
    """Every request of the weak-hash round."""
    bits: int


@dataclass(frozen=True)
class Judgement:
    """What broke (leaks, reuse that did not happen, wrong outputs) and the numbers it rests on."""

    leaks: list[Served]
    no_reuse: list[Served]
    wrong: list[Served]
    weak_collisions: int
    problems: list[str]
    hazard: HazardFinding | None = None
    """The design hazard the leaks show: they happened under the weak hash alone."""


def _tenants(
    worker: PrefixServing, log: RequestLog, prompts: list[list[int]], tails: list[list[int]], tag: str
) -> tuple[list[Served], list[Served]]:
    """Serve every prompt to each tenant; (requests that must hit, requests that must not reuse)."""
    bs = worker.block_size
    oracle = recompute_oracle(worker)
    same: list[Served] = []  # requests that must hit (same tenant, repeated)
    cross: list[Served] = []  # requests that must not reuse another tenant's entries

    def serve(label: str, tokens: list[int], tenant: str | None) -> Served:
        return log.issue(worker, label, tokens, tenant, oracle, tenant=tenant)

    def serve_cross(label: str, tokens: list[int], tenant: str) -> None:
        """Control mode: a cross-tenant request that reused another tenant's state fails the check."""
        cross.append(served := serve(label, tokens, tenant))
        if served.excess:
            log.fail_now(f"{served.label}: {describe_excess(served)}: another tenant's or salt's entries were reused")

    for n, (prompt, other_tail) in enumerate(zip(prompts, tails, strict=True)):
        label = f"{tag}p{n}"
        serve(f"{label} tenant-a", prompt, "tenant-a")
        same.append(serve(f"{label} tenant-a again", prompt, "tenant-a"))
        serve_cross(f"{label} tenant-b", prompt, "tenant-b")
        same.append(serve(f"{label} tenant-b again", prompt, "tenant-b"))
        serve(f"{label} unsalted", prompt, None)
        same.append(serve(f"{label} unsalted again", prompt, None))
        serve_cross(f"{label} salt-x", prompt, "salt-x")
        serve_cross(f"{label} tenant-c shares a prefix", prompt[: 2 * bs] + other_tail, "tenant-c")
    return same, cross


def measure(
    ctx: CheckContext, params: TenantIsolationParams, candidate: PrefixServing, pool: StorePool, findings: Findings
) -> Observations:
    """Serve every prompt to each tenant, on the store and (where its hash can be replaced) under a weak hash."""
    worker = pool.shared(("base",), candidate.fresh)
    bs, vocab = worker.block_size, ctx.candidate.vocab_size

    def workload(count: int, seed: int) -> tuple[list[list[int]], list[list[int]]]:
        prompts = [seeded_ids(vocab, params.prompt_blocks * bs + 1, seed + 31 * n) for n in range(count)]
        tails = [seeded_ids(vocab, bs + 1, seed + 31 * n + 7, avoid=[p[bs]]) for n, p in enumerate(prompts)]
        return prompts, tails

    # a control stops at the first wrong output or cross-tenant leak (_tenants), and runs the
    # weak-hash round first: a store that trusts the hash to keep tenants apart leaks only there,
    # one that ignores the tenant in either round
    log = RequestLog(ReuseTally(bs), tolerance_for(ctx), stop=stop_rule(ctx, excess=False))
    hashing: PrefixHashing | None = findings.needs(candidate, PrefixHashing, "isolation under a weak hash")
    weak_first = ctx.stop_at_first_failure and hashing is not None
    same: list[Served] = []
    cross: list[Served] = []
    if not weak_first:
        same, cross = _tenants(worker, log, *workload(params.prompts, ctx.seed * 1000), "")
    weak_cross: list[Served] = []
    weak_served: list[Served] = []
    if hashing is not None:
        bits = params.weak_hash_bits
        weak = pool.shared(("hash", bits), lambda: hashing.with_hash(weak_hash(bits)))
        weak_log = RequestLog(ReuseTally(bs), log.tol, stop=log.stop)
        weak_same, weak_cross = _tenants(
            weak, weak_log, *workload(params.weak_hash_prompts, ctx.seed * 1000 + 500), f"{bits}-bit hash "
        )
        same, cross = same + weak_same, cross + weak_cross
        weak_served = weak_log.served
        log.served.extend(weak_log.served)
    if weak_first:
        first_same, first_cross = _tenants(worker, log, *workload(params.prompts, ctx.seed * 1000), "")
        same, cross = first_same + same, first_cross + cross
    return Observations(worker, log, same, cross, weak_cross, hashing is not None, weak_served, params.weak_hash_bits)


def hazard(obs: Observations, leaks: list[Served]) -> HazardFinding | None:
    """The design hazard the leaks show, where every one came under the weak hash and the round under
    the store's own hash was clean (pure)."""
    weak = {id(s) for s in obs.weak_served}
    own = [s for s in obs.log.served if id(s) not in weak]
    if not leaks or not own or any(s.excess or s.argmax_flips or s.over_tolerance for s in own):
        return None
    if not all(id(s) in weak for s in leaks):
        return None
    other_context = beyond_any_identity(obs.weak_served, obs.worker.block_size)
    return weak_hash_hazard(
        "tenant-isolation",
        bits=obs.bits,
        served=f"{len(leaks)} requests were served another tenant's or salt's entries",
        other_context=f", {len(other_context)} requests the entries of other tokens" if other_context else "",
        own=f"under the store's own hash none of {len(own)} requests was",
    )


def judge(obs: Observations) -> Judgement:
    """Leaks across tenants, same-tenant repeats that did not hit, outputs unlike their recompute (pure)."""
    leaks = [s for s in obs.cross if s.excess]
    no_reuse = [s for s in obs.same if s.reused == 0 and s.entitled]
    wrong = obs.log.wrong_outputs()
    weak_collisions = sum(s.reply.stats.collisions_detected for s in obs.weak_cross)
    problems = []
    if leaks:
        weak_leaks = sum(1 for s in leaks if any(s is w for w in obs.weak_cross))
        problems.append(
            f"{len(leaks)} requests reused another tenant's or salt's entries ({weak_leaks} of them under the weak "
            f"hash); first: {leaks[0].label}: {describe_excess(leaks[0])}: the tenant or salt must partition the "
            "cache namespace, whatever the hash says (computational sameness does not grant permission to share state)"
        )
    if no_reuse:
        problems.append(
            f"same-tenant reuse did not happen in {len(no_reuse)} repeated requests (first: {no_reuse[0].label}, "
            f"0 of {no_reuse[0].entitled} reusable tokens): with the cache off, 'no cross-tenant reuse' proves nothing"
        )
    if obs.weak_round and not weak_collisions and not leaks:
        problems.append(
            "under the weak hash no cross-tenant request met another tenant's block in its bucket: "
            "isolation under collisions was not exercised"
        )
    if wrong:
        problems.append("outputs differ from the uncached computation in: " + ", ".join(s.label for s in wrong))
    return Judgement(leaks, no_reuse, wrong, weak_collisions, problems, hazard(obs, leaks))


def explain(obs: Observations, j: Judgement, findings: Findings, store_starts: int) -> Outcome:
    same, cross = obs.same, obs.cross
    metrics = {
        "cross_tenant_requests": len(cross),
        "cross_tenant_reused_tokens": sum(s.reused for s in cross),
        "same_tenant_requests": len(same),
        "same_tenant_reused_tokens": sum(s.reused for s in same),
        "weak_hash_cross_tenant_collisions": j.weak_collisions,
        "leaks": len(j.leaks),
        "wrong_outputs": len(j.wrong),
        "store_starts": store_starts,
    }
    findings.problems.extend(j.problems)
    findings.hazard = j.hazard
    diagnosis: dict[str, Any] | None = None
    if findings.problems:
        diagnosis = {"leaks": [s.row() for s in j.leaks[:8]], "no_reuse": [s.label for s in j.no_reuse]}
    passed = (
        f"{len(cross)} cross-tenant requests reused nothing of another tenant"
        + (f" ({j.weak_collisions} cross-tenant hash collisions refused)" if obs.weak_round else "")
        + f"; {len(same)} same-tenant repeats reused {metrics['same_tenant_reused_tokens']} tokens"
    )
    return findings.outcome(
        passed,
        metrics=metrics,
        evidence=TenantIsolationEvidence.model_validate({"requests": obs.log.table()}).dump(),
        exercise=obs.log.exercise(obs.worker),
        observation=obs.log.observation(),
        diagnosis=diagnosis,
    )


@check("tenant-isolation", params=TenantIsolationParams)
@until_first_failure
def tenant_isolation(ctx: CheckContext, params: TenantIsolationParams) -> Outcome:
    """Different tenants or salts never share entries, also under a weak hash; the same tenant does reuse its own."""
    candidate = prefix_candidate(ctx)
    pool = store_pool(ctx, candidate)
    starts = len(pool.starts)
    findings = Findings(pool=pool)
    obs = measure(ctx, params, candidate, pool, findings)
    return explain(obs, judge(obs), findings, len(pool.starts) - starts)
