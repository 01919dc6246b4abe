"""cache-identity: a request that differs from a cached one in any identity field must not reuse it.

On a fresh worker a base prompt P is served, then served again: it must hit (else the cache is off
and no miss below proves anything). Then, for every identity field the manifest declares (the
policy makes it declare the required ones), P is served once more differing only in that field:

* token-ids: one token changed in block 1: exactly block 0 is reused, nothing after it;
* positions: P's later blocks at offset 0: nothing is reused;
* adapter, tenant: the same worker, another adapter or tenant;
* model-revision, tokenizer, rope-scaling, attention-window, attention-mask, kv-dtype: a sibling
  worker sharing the cache store that differs in that field alone (`PrefixCaching.sibling`).

Each such request must reuse nothing (or be refused), must still match its own uncached
computation, and must hit when repeated (the variant is cacheable, so its miss was a decision).
The cache-identity example (background) holds exactly on a block-size-1 worker: after [11, 24, 31, 42, 57], the request
[11, 24, 99, 42, 57] reuses positions 0 and 1 and never the later equal ids.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from gate.checks._compare import compare_rows, tolerance_for
from gate.checks._params import CacheIdentityParams
from gate.checks._prefix_support import (
    IDENTITY_EXAMPLE_A,
    IDENTITY_EXAMPLE_B,
    WHY,
    RequestLog,
    ReuseTally,
    describe_excess,
    prefix_candidate,
    recompute_oracle,
    reference_oracle,
    seeded_ids,
)
from gate.core.check import CheckContext, Outcome, check
from gate.protocols import PrefixCaching

TENANT = "tenant-a"


def _variant(worker: PrefixCaching, field: str) -> tuple[PrefixCaching, dict[str, Any], Hashable] | None:
    """(worker, request options, ledger key) for a request differing from the base only in `field`."""
    if field == "adapter":
        names = worker.adapters()
        return (worker, {"adapter": names[0], "tenant": TENANT}, ("adapter", names[0])) if names else None
    if field == "tenant":
        return worker, {"tenant": "tenant-b"}, ("tenant", "tenant-b")
    sibling = worker.sibling(field)
    return (sibling, {"tenant": TENANT}, ("sibling", field)) if sibling is not None else None


@check("cache-identity", params=CacheIdentityParams)
def cache_identity(ctx: CheckContext, params: CacheIdentityParams) -> Outcome:
    """Requests differing in a declared identity field miss; identical ones hit; the cache-identity example holds."""
    candidate = prefix_candidate(ctx)
    worker = candidate.fresh()
    bs, vocab = worker.block_size, ctx.candidate.vocab_size
    fields = [f.value for f in (params.fields or ctx.manifest.identity)] or list(WHY)
    tol = tolerance_for(ctx)
    log = RequestLog(ReuseTally(bs), tol)
    prompt = seeded_ids(vocab, params.prompt_blocks * bs + 2, ctx.seed * 1000 + 3)
    base_key: Hashable = ("base",)
    violations: list[str] = []
    unverified: list[str] = []
    table: dict[str, dict[str, Any]] = {}

    # the uncached oracle must be the reference model, or its verdicts mean nothing
    ref_rows = reference_oracle(ctx)(prompt)
    own = worker.recompute(prompt).logits
    if bool(compare_rows(ref_rows, own.to(ref_rows.device), tol).over_tolerance.any()):
        violations.append("the candidate's uncached pass differs from the reference path: no oracle to judge by")

    log.issue(worker, "base", prompt, base_key, recompute_oracle(worker), tenant=TENANT)
    again = log.issue(worker, "base repeated", prompt, base_key, recompute_oracle(worker), tenant=TENANT)
    if again.reused == 0:
        violations.append(
            f"an identical request reused 0 of {again.entitled} reusable tokens: the cache is off "
            "or its keys are unstable, so no miss below proves anything"
        )

    for field in fields:
        # serve P again first: under a tight byte budget its blocks may have been evicted, and a
        # probe against an absent entry would prove nothing
        log.issue(worker, f"base before {field}", prompt, base_key, recompute_oracle(worker), tenant=TENANT)
        if field == "token-ids":
            changed = list(prompt)
            changed[bs + bs // 2] = seeded_ids(vocab, 1, ctx.seed + 11, avoid=[prompt[bs + bs // 2]])[0]
            served = log.issue(worker, "token-ids", changed, base_key, recompute_oracle(worker), tenant=TENANT)
            if served.reused != served.entitled or served.reply.stats.reused_spans not in ([(0, bs)], []):
                violations.append(
                    f"token-ids: with one token changed at position {bs + bs // 2}, {describe_excess(served)} "
                    f"(exactly the first {bs} positions may be reused; {WHY['token-ids']})"
                )
            table[field] = served.row()
            continue
        if field == "positions":
            moved = prompt[bs:]
            served = log.issue(worker, "positions", moved, base_key, recompute_oracle(worker), tenant=TENANT)
            if served.excess:
                violations.append(
                    f"positions: with P's later blocks moved to offset 0, {describe_excess(served)} "
                    f"({WHY['positions']})"
                )
            table[field] = served.row()
            continue
        variant = _variant(worker, field)
        if variant is None:
            unverified.append(field)
            continue
        other, options, key = variant
        adapter = options.get("adapter")
        oracle = recompute_oracle(other, adapter)
        first = log.issue(other, field, prompt, key, oracle, **options)
        repeat = log.issue(other, f"{field} repeated", prompt, key, oracle, **options)
        difference = float((oracle(prompt) - own.to(ref_rows.device)).abs().max())
        table[field] = {**first.row(), "repeat_reused": repeat.reused, "computation_differs_by": difference}
        if first.reused:
            base_id = worker.identity_for(tenant=TENANT)
            other_id = other.identity_for(adapter=adapter, tenant=options.get("tenant"))
            values = [
                f"{k}={v!r} vs {getattr(base_id, k)!r}"
                for k, v in other_id.as_dict().items()
                if getattr(base_id, k) != v
            ]
            violations.append(
                f"{field}: a request that differs only in {field} ({', '.join(values)}) reused "
                f"{first.reused} tokens {first.reply.stats.reused_spans} cached under the other value; "
                f"the cache key must include {field} ({WHY.get(field, '')})"
            )
        elif repeat.reused == 0 and repeat.entitled:
            violations.append(f"{field}: the variant request did not hit when repeated, so its miss proves nothing")

    # background: cache identity, exactly
    small = candidate.fresh(block_size=params.seed_example_block_size)
    a, b = [t % vocab for t in IDENTITY_EXAMPLE_A], [t % vocab for t in IDENTITY_EXAMPLE_B]
    example_log = RequestLog(ReuseTally(small.block_size), tol)
    example_log.issue(small, "identity example A", a, base_key, recompute_oracle(small), tenant=TENANT)
    example_b = example_log.issue(small, "identity example B", b, base_key, recompute_oracle(small), tenant=TENANT)
    if example_b.reply.stats.reused_spans != [(0, 2)]:
        violations.append(
            f"cache-identity example: after {a}, {b} must reuse exactly positions 0 and 1 and never the later "
            f"equal ids: it {describe_excess(example_b)}"
        )
    log.served.extend(example_log.served)

    wrong = log.wrong_outputs()
    if wrong:
        worst = max(s.max_abs_delta or 0.0 for s in wrong)
        violations.append(
            f"outputs differ from the uncached computation (max |Δ| {worst:.3g}) in: "
            + ", ".join(s.label for s in wrong)
        )

    metrics = {
        "fields_probed": len(fields) - len(unverified),
        "fields_unverified": len(unverified),
        "violations": len(violations),
        "identity_example_reused": example_b.reused,
        "requests": len(log.served),
        "reused_tokens": sum(s.reused for s in log.served),
    }
    evidence = {"fields": table, "identity_example": example_b.row(), "unverified": unverified, "requests": log.table()}
    outcome = Outcome("pass", "", metrics, evidence, log.exercise(worker), observation=log.observation())
    if violations:
        outcome.status, outcome.message = "fail", "; ".join(violations)
        outcome.diagnosis = {"violations": violations}
    elif unverified:
        outcome.status = params.unverifiable
        outcome.message = (
            f"declared identity fields the candidate cannot vary, so they are unverified: {', '.join(unverified)}"
        )
    else:
        outcome.message = (
            f"identical requests hit ({again.reused} tokens reused); a request differing only in "
            f"each of {', '.join(fields)} reused nothing it was not entitled to; the cache-identity example "
            f"shares exactly positions 0-1"
        )
    return outcome
