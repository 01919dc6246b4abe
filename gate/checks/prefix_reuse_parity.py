"""prefix-reuse-parity: requests that reuse cached prefixes give what a full recompute gives.

On a fresh worker, each base sequence S (`base_blocks` full blocks plus one token) is served once;
then requests that share prefixes of S of many lengths (0, 1, every block boundary ±1), S itself
and S cut at a block boundary (a full-prompt hit: every block hits, the last token is computed),
S with one token changed mid-way (the equal tail must not be reused), and S's later blocks moved
to offset 0 (the same ids at other positions must not be reused). Every computed prompt row and
every greedy continuation row is compared with one full pass of the reference path.

Proof of reuse: per request, hit blocks and reused tokens against the tokens a correct cache was
entitled to reuse. A run in which nothing was reused fails: parity would prove nothing.

Budget contract (`PrefixBudget`): a store whose declared budget holds `budget_blocks` blocks serves
twice as many distinct blocks; after every request the bytes it holds must be within the budget it
declares, it must show evictions, its latest prompt must still hit, and every output stays exact. A
store without a byte budget leaves this `unproven`, named.
"""

from __future__ import annotations

from typing import Any

from gate.checks._compare import tolerance_for
from gate.checks._params import PrefixReuseParityParams
from gate.checks._prefix_support import (
    Findings,
    RequestLog,
    ReuseTally,
    Served,
    StorePool,
    broken_rules,
    describe_excess,
    prefix_candidate,
    reference_oracle,
    seeded_ids,
    stop_rule,
    store_pool,
    until_first_failure,
)
from gate.core.check import CheckContext, Outcome, check
from gate.core.evidence import PrefixReuseEvidence, ServedRequest, ToleranceRecord
from gate.core.manifest import GreedyTokensClaim
from gate.protocols import PrefixBudget, PrefixServing


def _boundary_lengths(block_size: int, limit: int) -> list[int]:
    wanted = {0, 1, limit}
    for edge in range(block_size, limit + 1, block_size):
        wanted |= {edge - 1, edge, edge + 1}
    return sorted(n for n in wanted if 0 <= n <= limit)


@check("prefix-reuse-parity", params=PrefixReuseParityParams)
@until_first_failure
def prefix_reuse_parity(ctx: CheckContext, params: PrefixReuseParityParams) -> Outcome:
    """Requests reusing cached prefixes of many lengths match a full recompute, with proof of hits."""
    candidate = prefix_candidate(ctx)
    pool = store_pool(ctx, candidate)
    starts = len(pool.starts)
    findings = Findings(pool=pool)
    worker: PrefixServing = pool.shared(("base",), candidate.fresh)
    if params.byte_budget is not None:
        budgeted: PrefixBudget | None = findings.needs(
            candidate, PrefixBudget, f"parity within a budget of {params.byte_budget} bytes"
        )
        if budgeted is not None:
            budget = params.byte_budget
            worker = pool.shared(("budget", budget), lambda: budgeted.with_budget(budget))
    bs, vocab = worker.block_size, ctx.candidate.vocab_size
    claim_tokens = ctx.manifest.claim.tokens if isinstance(ctx.manifest.claim, GreedyTokensClaim) else None
    new_tokens = params.new_tokens or (max(claim_tokens) if params.compare == "greedy" and claim_tokens else 4)
    base_len = params.base_blocks * bs + 1
    new_tokens = max(1, min(new_tokens, ctx.candidate.max_len - base_len - params.suffix_len))
    tol = tolerance_for(ctx, params.atol, params.rtol)
    # a control stops at the first request that fails: reuse beyond entitlement, an argmax flip, or
    # (compare: logits) a row over the tolerance
    log = RequestLog(ReuseTally(bs), tol, stop=stop_rule(ctx, logits=params.compare == "logits"))
    oracle = reference_oracle(ctx)
    shared: dict[int, int] = {}  # index in log.served -> shared-prefix length (for detected_at)

    def serve(label: str, tokens: list[int], share: int) -> Served:
        log.at = share  # before serving: a control may stop inside `issue`, and reports where
        served = log.issue(worker, label, tokens, "base", oracle, new_tokens=new_tokens)
        shared[len(log.served) - 1] = share
        return served

    def moved(seq: int, base: list[int]) -> None:
        """The base's later blocks at offset 0: nothing may be reused (K/V carry their position)."""
        for shift in (bs, 2 * bs):
            if shift < base_len - 1:
                serve(f"s{seq} refresh", base, base_len)  # S present again, whatever was evicted
                serve(f"s{seq} moved from {shift} to 0", base[shift:], 0)

    for seq in range(params.sequences):
        seed = ctx.seed * 1000 + seq * 97
        base = seeded_ids(vocab, base_len, seed)
        ctx.log(f"  sequence {seq}: {base_len} tokens, block size {bs}")
        serve(f"s{seq} warm", base, 0)
        if ctx.stop_at_first_failure:  # a control: the probe of a block served elsewhere first
            moved(seq, base)
        lengths = params.lengths or _boundary_lengths(bs, base_len - 1)
        for n, length in enumerate(sorted({min(max(x, 0), base_len - 1) for x in lengths})):
            suffix = seeded_ids(vocab, params.suffix_len, seed + 1 + n, avoid=[base[length]])
            serve(f"s{seq} prefix {length}", base[:length] + suffix, length)
        serve(f"s{seq} full-prompt hit", base[: params.base_blocks * bs], params.base_blocks * bs)
        serve(f"s{seq} repeat", base, base_len)
        for p in sorted({bs, bs + 1, 2 * bs - 1} & set(range(1, base_len - 1))):
            serve(f"s{seq} refresh", base, base_len)
            mutated = list(base)
            mutated[p] = seeded_ids(vocab, 1, seed + 500 + p, avoid=[base[p]])[0]
            serve(f"s{seq} changed at {p}", mutated, p)
        if not ctx.stop_at_first_failure:
            moved(seq, base)

    budget_evidence = _budget_contract(ctx, candidate, worker, pool, log, findings, params.budget_blocks, base_len)
    wrong = log.wrong_outputs()
    excess = [s for s in log.served if s.excess]
    reused = sum(s.reused for s in log.served)
    under = [s.label for s in log.served if s.reused < s.entitled]
    bad = {id(s) for s in [*wrong, *excess]}
    failed_at = [shared[i] for i, s in enumerate(log.served) if id(s) in bad and i in shared]
    metrics = {
        "requests": len(log.served),
        "reused_tokens": reused,
        "hit_blocks": sum(s.reply.stats.hit_blocks for s in log.served),
        "entitled_tokens": sum(s.entitled for s in log.served),
        "max_abs_delta": max((s.max_abs_delta or 0.0) for s in log.served),
        "argmax_flips": sum(s.argmax_flips for s in log.served),
        "rows_over_tolerance": sum(s.over_tolerance for s in log.served),
        "excess_reuse_requests": len(excess),
        "below_entitlement_requests": len(under),
        "new_tokens": new_tokens,
        "block_size": bs,
        "store_starts": len(pool.starts) - starts,
    }
    evidence = PrefixReuseEvidence(
        requests=[ServedRequest(**row) for row in log.table()],
        tolerance=ToleranceRecord(**tol.as_dict()),
        compare=params.compare,
        below_entitlement=under[:16],
        cache=worker.cache_state(),
        budget=budget_evidence or None,
    ).dump()
    outcome = Outcome("pass", "", metrics, evidence, log.exercise(worker), observation=log.observation())
    judged = [s for s in wrong if s.argmax_flips or params.compare == "logits"]
    judged_ids = {id(s) for s in judged}
    if judged or excess:
        first = (judged or excess)[0]
        what = (
            f"argmax differs on {first.argmax_flips} rows, {first.over_tolerance} rows over tolerance "
            f"(max |Δ| {first.max_abs_delta:.3g})"
            if id(first) in judged_ids
            else "outputs within tolerance"
        )
        rules = sorted({r for s in [*judged, *excess] for r in broken_rules(s)})
        findings.problems.insert(
            0,
            f"{len(judged)} of {len(log.served)} requests differ from a full recompute "
            f"and {len(excess)} reused state beyond entitlement; first: {first.label}: {describe_excess(first)}; "
            f"{what}" + (f". Broken rule: {'; '.join(rules)}" if rules else ""),
        )
        outcome.detected_at = min(failed_at) if failed_at else None
        outcome.diagnosis = {"broken_rules": rules, "failing_requests": [s.row() for s in [*judged, *excess][:8]]}
    if reused == 0:
        findings.problems.append(
            f"no request reused any cached block ({len(log.served)} requests, "
            f"{metrics['entitled_tokens']} tokens were reusable): parity proves nothing about reuse"
        )
    over = [s for s in wrong if id(s) not in judged_ids]
    passed = (
        f"{len(log.served)} requests match a full recompute ({params.compare}, max |Δ| "
        f"{metrics['max_abs_delta']:.3g}); {reused} of {metrics['entitled_tokens']} reusable "
        f"tokens reused in {metrics['hit_blocks']} block hits"
        + (f"; {len(over)} requests over the logit tolerance" if over else "")
        + (
            f"; within a budget of {budget_evidence['byte_budget']} bytes the store held at most "
            f"{budget_evidence['max_bytes_held']} and evicted {budget_evidence['evicted']} blocks"
            if budget_evidence
            else ""
        )
    )
    findings.settle(outcome, passed)
    if outcome.status == "pass" and over:
        outcome.status = "warn"
    return outcome


def _budget_contract(
    ctx: CheckContext,
    candidate: PrefixServing,
    worker: PrefixServing,
    pool: StorePool,
    log: RequestLog,
    findings: Findings,
    blocks: int,
    length: int,
) -> dict[str, Any]:
    """A store whose budget holds `blocks` blocks serves 2 x `blocks` distinct blocks and more: bytes held
    within the declared budget after every request, evictions shown, the latest prompt still hit."""
    budgeted: PrefixBudget | None = findings.needs(candidate, PrefixBudget, "bytes held within the declared budget")
    if budgeted is None:
        return {}
    state = worker.cache_state()
    per_block = int(state.get("bytes_held") or 0) // max(int(state.get("blocks") or 0), 1)
    if not per_block:
        findings.lacks(
            "bytes held within the declared budget",
            "the store reports no bytes held per block (cache_state: bytes_held, blocks)",
        )
        return {}
    budget = blocks * per_block
    store = pool.shared(("budget", budget), lambda: budgeted.with_budget(budget))
    oracle = reference_oracle(ctx)
    bs, vocab = store.block_size, ctx.candidate.vocab_size
    prompt_blocks = max(1, min(blocks, (length - 1) // bs))
    prompts = [
        seeded_ids(vocab, prompt_blocks * bs + 1, ctx.seed * 1000 + 7777 + n)
        for n in range(2 * blocks // prompt_blocks + 1)
    ]
    held: list[int] = []
    declared = budget
    evicted = 0
    for n, prompt in enumerate(prompts):
        log.issue(store, f"budget p{n}", prompt, ("budget", n), oracle)
        state = store.cache_state()
        declared = int(state.get("byte_budget", budget))
        held.append(int(state.get("bytes_held", 0)))
    evicted = int(store.cache_state().get("evicted", 0))
    last = log.issue(store, "budget latest again", prompts[-1], ("budget", len(prompts) - 1), oracle)
    stored = len(prompts) * prompt_blocks * per_block
    if declared != budget:
        findings.problems.append(f"budget: asked for a budget of {budget} bytes, the store declares {declared}")
    if max(held) > budget:
        over = next(i for i, h in enumerate(held) if h > budget)
        findings.problems.append(
            f"budget: the store held {max(held)} bytes under a declared budget of {budget} (first over it "
            f"after request {over}: {held[over]} bytes; {stored} bytes of distinct blocks were served)"
        )
    elif evicted == 0:
        findings.problems.append(
            f"budget: {stored} bytes of distinct blocks passed through a {budget}-byte budget without one eviction "
            "reported: the store's byte accounting or its eviction is not shown"
        )
    if last.reused == 0:
        findings.problems.append(
            "budget: the latest prompt did not hit again under the budget: the cache is not exercised"
        )
    return {
        "byte_budget": budget,
        "bytes_per_block": per_block,
        "bytes_served": stored,
        "max_bytes_held": max(held),
        "bytes_held_after_each_request": held,
        "evicted": evicted,
        "latest_prompt_reused": last.reused,
    }
