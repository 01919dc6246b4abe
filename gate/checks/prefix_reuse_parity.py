"""prefix-reuse-parity: requests that reuse cached prefixes give what a full recompute gives.

On a fresh worker, each base sequence S (`base_blocks` full blocks plus one token) is served once;
then requests that share prefixes of S of many lengths (0, 1, every block boundary ±1), S itself
and S cut at a block boundary (a full-prompt hit: every block hits, the last token is computed),
S with one token changed mid-way (the equal tail must not be reused), and S's later blocks moved
to offset 0 (the same ids at other positions must not be reused). Every computed prompt row and
every greedy continuation row is compared with one full pass of the reference path.

Proof of reuse: per request, hit blocks and reused tokens against the tokens a correct cache was
entitled to reuse. A run in which nothing was reused fails: parity would prove nothing.
"""

from __future__ import annotations

from gate.checks._compare import tolerance_for
from gate.checks._params import PrefixReuseParityParams
from gate.checks._prefix_support import (
    RequestLog,
    ReuseTally,
    Served,
    broken_rules,
    describe_excess,
    prefix_candidate,
    reference_oracle,
    seeded_ids,
)
from gate.core.check import CheckContext, Outcome, check
from gate.core.evidence import PrefixReuseEvidence, ServedRequest, ToleranceRecord


def _boundary_lengths(block_size: int, limit: int) -> list[int]:
    wanted = {0, 1, limit}
    for edge in range(block_size, limit + 1, block_size):
        wanted |= {edge - 1, edge, edge + 1}
    return sorted(n for n in wanted if 0 <= n <= limit)


@check("prefix-reuse-parity", params=PrefixReuseParityParams)
def prefix_reuse_parity(ctx: CheckContext, params: PrefixReuseParityParams) -> Outcome:
    """Requests reusing cached prefixes of many lengths match a full recompute, with proof of hits."""
    candidate = prefix_candidate(ctx)
    worker = candidate.fresh(byte_budget=params.byte_budget)
    bs, vocab = worker.block_size, ctx.candidate.vocab_size
    claim_tokens = getattr(ctx.manifest.claim, "tokens", None)
    new_tokens = params.new_tokens or (max(claim_tokens) if params.compare == "greedy" and claim_tokens else 4)
    base_len = params.base_blocks * bs + 1
    new_tokens = max(1, min(new_tokens, ctx.candidate.max_len - base_len - params.suffix_len))
    tol = tolerance_for(ctx, params.atol, params.rtol)
    log = RequestLog(ReuseTally(bs), tol)
    oracle = reference_oracle(ctx)
    shared: dict[int, int] = {}  # index in log.served -> shared-prefix length (for detected_at)

    def serve(label: str, tokens: list[int], share: int) -> Served:
        served = log.issue(worker, label, tokens, "base", oracle, new_tokens=new_tokens)
        shared[len(log.served) - 1] = share
        return served

    for seq in range(params.sequences):
        seed = ctx.seed * 1000 + seq * 97
        base = seeded_ids(vocab, base_len, seed)
        ctx.log(f"  sequence {seq}: {base_len} tokens, block size {bs}")
        serve(f"s{seq} warm", base, 0)
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
        for shift in (bs, 2 * bs):
            if shift < base_len - 1:
                serve(f"s{seq} refresh", base, base_len)  # S present again, whatever was evicted
                serve(f"s{seq} moved from {shift} to 0", base[shift:], 0)

    wrong = log.wrong_outputs()
    excess = [s for s in log.served if s.excess]
    reused = sum(s.reused for s in log.served)
    under = [s.label for s in log.served if s.reused < s.entitled]
    bad = {id(s) for s in [*wrong, *excess]}
    failed_at = [shared[i] for i, s in enumerate(log.served) if id(s) in bad]
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
    }
    evidence = PrefixReuseEvidence(
        requests=[ServedRequest(**row) for row in log.table()],
        tolerance=ToleranceRecord(**tol.as_dict()),
        compare=params.compare,
        below_entitlement=under[:16],
        cache=worker.cache_state(),
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
        outcome.status = "fail"
        outcome.message = (
            f"{len(judged)} of {len(log.served)} requests differ from a full recompute "
            f"and {len(excess)} reused state beyond entitlement; first: {first.label}: {describe_excess(first)}; "
            f"{what}" + (f". Broken rule: {'; '.join(rules)}" if rules else "")
        )
        outcome.detected_at = min(failed_at) if failed_at else None
        outcome.diagnosis = {"broken_rules": rules, "failing_requests": [s.row() for s in [*judged, *excess][:8]]}
        return outcome
    if reused == 0:
        outcome.status = "fail"
        outcome.message = (
            f"no request reused any cached block ({len(log.served)} requests, "
            f"{metrics['entitled_tokens']} tokens were reusable): parity proves nothing about reuse"
        )
        return outcome
    over = [s for s in wrong if id(s) not in judged_ids]
    outcome.status = "warn" if over else "pass"
    outcome.message = (
        f"{len(log.served)} requests match a full recompute ({params.compare}, max |Δ| "
        f"{metrics['max_abs_delta']:.3g}); {reused} of {metrics['entitled_tokens']} reusable "
        f"tokens reused in {metrics['hit_blocks']} block hits"
        + (f"; {len(over)} requests over the logit tolerance" if over else "")
    )
    return outcome
