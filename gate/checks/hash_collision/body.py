"""hash-collision's body: measure rounds under a weak hash, judge what was served, explain."""

from __future__ import annotations

import math
from dataclasses import dataclass

from gate.checks._compare import tolerance_for
from gate.checks._prefix_oracle import Oracle, recompute_oracle, reference_oracle
from gate.checks._prefix_store import prefix_candidate, store_pool
from gate.checks._prefix_support import (
    Findings,
    RequestLog,
    ReuseTally,
    Served,
    beyond_any_identity,
    broken_rules,
    describe_excess,
    seeded_ids,
    stop_rule,
    until_first_failure,
)
from gate.checks.hash_collision import HashCollisionParams
from gate.checks.hash_collision.evidence import HashCollisionEvidence
from gate.core.check import CheckContext, Outcome, check
from gate.core.hazards import HazardFinding, weak_hash_hazard
from gate.prefix.cache import weak_hash
from gate.protocols import PrefixHashing, PrefixServing

TENANTS = ("tenant-a", "tenant-b", "tenant-c", "tenant-d")
"""The first serves every prompt twice; each other one serves the same tokens once more."""


@dataclass(frozen=True)
class Observations:
    """Every request served by the weak-hash store; `cross` are those under another identity."""

    worker: PrefixServing
    log: RequestLog
    cross: list[Served]


def measure(ctx: CheckContext, params: HashCollisionParams, worker: PrefixServing, findings: Findings) -> Observations:
    """Two rounds under the first tenant, and the same tokens under the other identities."""
    bs, length = worker.block_size, params.prompt_blocks * worker.block_size + 1
    # every request served beyond entitlement or unlike its uncached computation fails this check:
    # a control stops at the first one
    log = RequestLog(ReuseTally(bs), tolerance_for(ctx), stop=stop_rule(ctx))
    prompts: list[list[int]] = []
    for n in range(params.prompts):
        prompt = seeded_ids(ctx.candidate.vocab_size, length, ctx.seed * 1000 + 71 * n)
        if n % 2 and bs < length - 1:  # share block 0 with the previous prompt, diverge after it
            prompt[:bs] = prompts[-1][:bs]
        prompts.append(prompt)
    base_oracle = reference_oracle(ctx)

    def round_of(round_: int) -> None:
        for n, prompt in enumerate(prompts):
            log.issue(worker, f"p{n} round {round_}", prompt, TENANTS[0], base_oracle, tenant=TENANTS[0], new_tokens=2)

    # a control meets the other identities right after the first round (where a store that trusts a
    # hash match across identities is caught), a positive run after both
    round_of(0)
    if not ctx.stop_at_first_failure:
        round_of(1)
    # the same tokens under other identities: only the identity tells these blocks apart
    cross: list[Served] = []
    adapters = worker.adapters()
    others: list[tuple[str, dict[str, str], Oracle]] = [(t, {"tenant": t}, base_oracle) for t in TENANTS[1:]]
    if adapters:
        adapter_oracle = recompute_oracle(worker, adapters[0])
        others.append((f"adapter {adapters[0]}", {"tenant": TENANTS[0], "adapter": adapters[0]}, adapter_oracle))
    else:
        findings.lacks(
            "collisions across adapters", "the store serves no adapters, so only tenants were collided across"
        )
    for label, options, oracle in others:
        for n, prompt in enumerate(prompts):
            cross.append(log.issue(worker, f"p{n} {label}", prompt, label, oracle, new_tokens=2, **options))
    if ctx.stop_at_first_failure:
        round_of(1)
    return Observations(worker, log, cross)


def judge(params: HashCollisionParams, obs: Observations, earlier: list[str]) -> list[str]:
    """The problems: colliding blocks served, or no collision at all to show anything (pure;
    `earlier`: the problems found before, which a missing collision does not add to)."""
    log, cross = obs.log, obs.cross
    collisions = sum(s.reply.stats.collisions_detected for s in log.served)
    served_wrongly = [s for s in log.served if s.excess]
    wrong = log.wrong_outputs()
    problems = list(earlier)
    if served_wrongly or wrong:
        first = (served_wrongly or wrong)[0]
        across = [s for s in served_wrongly if any(s is c for c in cross)]
        rules = sorted({r for s in served_wrongly for r in broken_rules(s)})
        problems.append(
            f"{len(served_wrongly)} requests were served colliding blocks ({len(across)} of them another "
            f"identity's) and {len(wrong)} differ from their uncached computation; first: {first.label}: "
            f"{describe_excess(first)}: a hash match was trusted without comparing the stored "
            + ("identity (tenant, adapter)" if across and len(across) == len(served_wrongly) else "key material")
            + (f" ({'; '.join(rules)})" if rules else "")
        )
    if collisions == 0 and not problems:
        problems.append(
            f"the {params.bits}-bit hash produced no detected collision over {len(log.served)} requests: "
            "either verification does not report them or the workload never collided; the check proves nothing"
        )
    elif sum(s.reply.stats.collisions_detected for s in cross) == 0 and not problems:
        problems.append(
            f"no request under another identity met a colliding block ({len(cross)} requests): whether the "
            "store compares identities on a hash hit is not shown"
        )
    if sum(s.reused for s in log.served) == 0:
        problems.append("no request reused any block under the weak hash: the cache refused everything")
    return problems[len(earlier) :]


def explain(params: HashCollisionParams, obs: Observations, findings: Findings, store_starts: int) -> Outcome:
    log, worker = obs.log, obs.worker
    collisions = sum(s.reply.stats.collisions_detected for s in log.served)
    cross_collisions = sum(s.reply.stats.collisions_detected for s in obs.cross)
    reused = sum(s.reused for s in log.served)
    metrics = {
        "hash_bits": params.bits,
        "collisions_detected": collisions,
        "cross_identity_collisions_detected": cross_collisions,
        "requests": len(log.served),
        "reused_tokens": reused,
        "served_beyond_entitlement": len([s for s in log.served if s.excess]),
        "wrong_outputs": len(log.wrong_outputs()),
        "store_starts": store_starts,
    }
    passed = (
        f"{collisions} hash collisions under a {params.bits}-bit hash ({cross_collisions} between the same "
        f"tokens under another identity) were detected and refused; {reused} tokens reused, each request "
        "exactly within entitlement and matching its uncached computation"
    )
    return findings.outcome(
        passed,
        metrics=metrics,
        evidence=HashCollisionEvidence.model_validate({"requests": log.table(), "cache": worker.cache_state()}).dump(),
        exercise={**log.exercise(worker), "collisions_detected": collisions, "hash_bits": params.bits},
        observation=log.observation(),
        underpowered=identity_power(params, obs),
    )


POWER = 0.9
"""The chance of a same-token meeting across identities below which verify-ignores-identity is below
the check's power (the declared power of a distribution claim by default)."""


def identity_power(params: HashCollisionParams, obs: Observations) -> dict[str, str]:
    """verify-ignores-identity shows only where a prompt's first block under one identity shares a bucket
    with the same tokens under another (about one pair in 2**bits; deeper blocks are keyed below their
    parent): with too few such pairs, the settings that would show it (`Outcome.underpowered`)."""
    identities = 1 + len({s.label.split(" ", 1)[1] for s in obs.cross})
    per_block = identities * (identities - 1) // 2
    shares = params.prompt_blocks >= 2  # measure: odd prompts share block 0 with the one before
    first_blocks = params.prompts - (params.prompts // 2 if shares else 0)
    pairs = first_blocks * per_block
    chance = 1 - math.exp(-pairs / 2**params.bits)
    if chance >= POWER:
        return {}
    wanted = math.log(1 / (1 - POWER))  # expected meetings that give the chance POWER
    bits = math.floor(math.log2(pairs / wanted)) if pairs > wanted else 0
    ways = [f"lower bits to {bits}"] if bits >= 1 else []
    if per_block:
        needed = math.ceil(wanted * 2**params.bits / per_block)
        prompts = 2 * needed if shares else needed
        if prompts <= HashCollisionParams.model_fields["prompts"].metadata[-1].le:
            ways.append(f"raise prompts to {prompts}")
    return {
        "verify-ignores-identity": f"{pairs} pairs of first blocks of the same tokens under different identities "
        f"share a bucket of the {params.bits}-bit hash with chance {chance:.2f} < {POWER}: "
        + (" or ".join(ways) or "more identities or prompts")
    }


def _clean(served: Served) -> bool:
    return not (served.excess or served.argmax_flips or served.over_tolerance)


def hazard(params: HashCollisionParams, obs: Observations, own_hash: RequestLog) -> HazardFinding | None:
    """The design hazard colliding blocks served under the weak hash show, where the same requests under
    the store's own hash (`own_hash`, the workload replayed) were all served exactly (pure)."""
    bad = [s for s in obs.log.served if not _clean(s)]
    if not any(s.excess for s in bad) or not own_hash.served or not all(_clean(s) for s in own_hash.served):
        return None
    other_context = beyond_any_identity(obs.log.served, obs.worker.block_size)
    return weak_hash_hazard(
        "hash-collision",
        bits=params.bits,
        served=f"{len(bad)} requests were served colliding blocks",
        other_context=f" ({len(other_context)} of them blocks of other tokens)" if other_context else "",
        same_context=" (each another identity's)",
        own=f"the same {len(own_hash.served)} requests under the store's own hash were all served exactly",
    )


@check("hash-collision", params=HashCollisionParams)
@until_first_failure
def hash_collision(ctx: CheckContext, params: HashCollisionParams) -> Outcome:
    """Under a weak injected hash, colliding blocks are verified against stored key material, not served."""
    candidate = prefix_candidate(ctx)
    pool = store_pool(ctx, candidate)
    findings = Findings(pool=pool)
    hashing: PrefixHashing | None = findings.needs(candidate, PrefixHashing, "collisions are verified")
    if hashing is None:
        return findings.outcome("nothing was asserted", evidence={})
    starts = len(pool.starts)
    worker = pool.shared(("hash", params.bits), lambda: hashing.with_hash(weak_hash(params.bits)))
    obs = measure(ctx, params, worker, findings)
    findings.problems.extend(judge(params, obs, findings.problems))
    if findings.problems and not all(_clean(s) for s in obs.log.served):  # hash or key? the same workload, own hash
        own_hash = measure(ctx, params, pool.shared(("base",), candidate.fresh), Findings())
        findings.hazard = hazard(params, obs, own_hash.log)
    return explain(params, obs, findings, len(pool.starts) - starts)
