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

Where the store reports the identity it keys on (`PrefixIdentityReport`), the report is held against
the keying observed: a perturbed field the report says nothing about must not separate entries,
and one it names must (and a sibling must report exactly the field it varies). A field the store
cannot vary (no siblings, no adapters) is `unproven`, with the capability named.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from gate.checks._compare import compare_rows, tolerance_for
from gate.checks._params import CacheIdentityParams
from gate.checks._prefix_support import (
    IDENTITY_EXAMPLE_A,
    IDENTITY_EXAMPLE_B,
    WHY,
    Findings,
    RequestLog,
    ReuseTally,
    Served,
    StorePool,
    describe_excess,
    memoized,
    prefix_candidate,
    recompute_oracle,
    reference_oracle,
    seeded_ids,
    stop_rule,
    store_pool,
    until_first_failure,
)
from gate.checks._probe import probe_order as shared_probe_order
from gate.core.check import CheckContext, Outcome, check
from gate.core.evidence import CacheIdentityEvidence
from gate.prefix.cache import IDENTITY_ATTRS, CacheIdentity
from gate.protocols import PrefixIdentityReport, PrefixServing, PrefixSiblings

if TYPE_CHECKING:
    import torch

TENANT = "tenant-a"


def _variant(
    worker: PrefixServing, field: str, findings: Findings, pool: StorePool
) -> tuple[PrefixServing, dict[str, Any], Hashable] | None:
    """(store, request options, ledger key) for a request differing from the base only in `field`,
    or None (recorded as unproven) where the store cannot express it."""
    if field == "adapter":
        names = worker.adapters()
        if not names:
            findings.lacks(field, "the store serves no adapters, so no request can differ in adapter alone")
            return None
        return worker, {"adapter": names[0], "tenant": TENANT}, ("adapter", names[0])
    if field == "tenant":
        return worker, {"tenant": "tenant-b"}, ("tenant", "tenant-b")
    siblings: PrefixSiblings | None = findings.needs(worker, PrefixSiblings, field)
    if siblings is None:
        return None
    sibling = pool.start(f"sibling {field}", lambda: siblings.sibling(field))
    if sibling is None:
        findings.lacks(field, f"the store cannot build a sibling that differs in {field} alone")
        return None
    return sibling, {"tenant": TENANT}, ("sibling", field)


def _report_contract(
    field: str,
    base: PrefixServing,
    other: PrefixServing,
    options: dict[str, Any],
    first: Served,
    repeat: Served,
) -> str | None:
    """The reported identity against the keying observed when `field` was perturbed, or None."""
    if not isinstance(base, PrefixIdentityReport) or not isinstance(other, PrefixIdentityReport):
        return None
    base_id = base.identity_for(tenant=TENANT)
    other_id = other.identity_for(adapter=options.get("adapter"), tenant=options.get("tenant"))
    changed = sorted(k for k, v in other_id.as_dict().items() if getattr(base_id, k) != v)
    attr = IDENTITY_ATTRS.get(field)
    kept_apart = first.reused == 0 and repeat.reused > 0
    if changed and changed != [attr]:
        return (
            f"{field}: the store reports {changed} changed for a request that differs only in {field} "
            f"(its report must name exactly {attr})"
        )
    if not changed and kept_apart:
        return (
            f"{field}: the store reports the same identity for both requests ({_short(base_id)}) but keys them "
            "apart: its identity report does not say what it keys on"
        )
    return None


def _short(identity: CacheIdentity) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in identity.as_dict().items() if v is not None)


def probe_order(fields: list[str], control: str | None) -> list[str]:
    """The fields in the order a run probes them (gate.checks._probe): a control probes first the
    field its fault's name points at (key-ignores-tenant: tenant), where its failure is likely.
    Every field is still probed until the first failure; a positive run probes them all."""
    return [fields[i] for i in shared_probe_order(fields, control, points_at)]


def points_at(fault: str, field: str) -> bool:
    """Whether a fault's name points at an identity field (key-ignores-revision: model-revision)."""
    words = [w for w in fault.split("-") if w not in ("key", "ignores")]
    return any(part.startswith(word) for word in words for part in field.split("-"))


@check("cache-identity", params=CacheIdentityParams)
@until_first_failure
def cache_identity(ctx: CheckContext, params: CacheIdentityParams) -> Outcome:
    """Requests differing in a declared identity field miss; identical ones hit; the cache-identity example holds."""
    candidate = prefix_candidate(ctx)
    pool = store_pool(ctx, candidate)
    starts = len(pool.starts)
    worker = pool.shared(("base",), candidate.fresh)
    bs, vocab = worker.block_size, ctx.candidate.vocab_size
    declared = [f.value for f in (params.fields or ctx.manifest.identity)] or list(WHY)
    fields = probe_order(declared, ctx.control)
    tol = tolerance_for(ctx)
    # a control stops at the first wrong output, or at the first field with a violation (fail_now)
    log = RequestLog(ReuseTally(bs), tol, stop=stop_rule(ctx, excess=False))
    prompt = seeded_ids(vocab, params.prompt_blocks * bs + 2, ctx.seed * 1000 + 3)
    base_key: Hashable = ("base",)
    findings = Findings(pool=pool)
    violations = findings.problems
    table: dict[str, dict[str, Any]] = {}
    reports = findings.needs(worker, PrefixIdentityReport, "identity report against keying") is not None

    ref_rows = reference_oracle(ctx)(prompt)
    own_rows: list[torch.Tensor] = []

    def own() -> torch.Tensor:
        """The candidate's uncached pass over P, checked once against the reference: the uncached
        oracle must be the reference model, or its verdicts mean nothing."""
        if not own_rows:
            own_rows.append(worker.recompute(prompt).logits)
            if bool(compare_rows(ref_rows, own_rows[0].to(ref_rows.device), tol).over_tolerance.any()):
                violations.append(
                    "the candidate's uncached pass differs from the reference path: no oracle to judge by"
                )
        return own_rows[0]

    if not ctx.stop_at_first_failure:  # a control checks it where it first needs it, or at the end
        own()

    base_oracle = memoized(recompute_oracle(worker))  # P comes back before every field
    log.issue(worker, "base", prompt, base_key, base_oracle, tenant=TENANT)

    def cache_on() -> Served:
        """Serve P again: an identical request must hit, or no miss below proves anything."""
        again = log.issue(worker, "base repeated", prompt, base_key, base_oracle, tenant=TENANT)
        if again.reused == 0:
            violations.append(
                f"an identical request reused 0 of {again.entitled} reusable tokens: the cache is off "
                "or its keys are unstable, so no miss below proves anything"
            )
        return again

    # a control probes its likeliest field at once: reuse beyond entitlement is a failure whether or
    # not the cache is on (only a miss needs it shown on), so P's repeat comes after that probe
    again = None if ctx.stop_at_first_failure else cache_on()
    for field in fields:
        # serve P again first: under a tight byte budget its blocks may have been evicted, and a
        # probe against an absent entry would prove nothing (a control's first probe follows P)
        if field != fields[0] and again is None:
            again = cache_on()
        elif again is not None:
            log.issue(worker, f"base before {field}", prompt, base_key, base_oracle, tenant=TENANT)
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
            if violations:
                log.fail_now(violations[-1])
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
            if violations:
                log.fail_now(violations[-1])
            continue
        variant = _variant(worker, field, findings, pool)
        if variant is None:
            continue
        other, options, key = variant
        adapter = options.get("adapter")
        oracle = recompute_oracle(other, adapter)
        first = log.issue(other, field, prompt, key, oracle, **options)
        if first.reused:  # a control stops here: the violation below needs nothing more
            log.fail_now(f"{field}: a request that differs only in {field} reused {first.reused} tokens")
        repeat = log.issue(other, f"{field} repeated", prompt, key, oracle, **options)
        difference = float((oracle(prompt) - own().to(ref_rows.device)).abs().max())
        table[field] = {**first.row(), "repeat_reused": repeat.reused, "computation_differs_by": difference}
        if first.reused:
            if isinstance(worker, PrefixIdentityReport) and isinstance(other, PrefixIdentityReport):
                base_id = worker.identity_for(tenant=TENANT)
                other_id = other.identity_for(adapter=adapter, tenant=options.get("tenant"))
                values = ", ".join(
                    f"{k}={v!r} vs {getattr(base_id, k)!r}"
                    for k, v in other_id.as_dict().items()
                    if getattr(base_id, k) != v
                )
            else:
                values = ", ".join(f"{k}={v!r}" for k, v in options.items())
            violations.append(
                f"{field}: a request that differs only in {field} ({values}) reused "
                f"{first.reused} tokens {first.reply.stats.reused_spans} cached under the other value; "
                f"the cache key must include {field} ({WHY.get(field, '')})"
            )
        elif repeat.reused == 0 and repeat.entitled:
            violations.append(f"{field}: the variant request did not hit when repeated, so its miss proves nothing")
        mismatch = _report_contract(field, worker, other, options, first, repeat)
        if mismatch:
            violations.append(mismatch)
        if violations:
            log.fail_now(violations[-1])

    if again is None:  # a control that probed a single field and found nothing
        again = cache_on()
    own()

    # background: cache identity, exactly
    small = pool.shared(
        ("block size", params.seed_example_block_size),
        lambda: candidate.fresh(block_size=params.seed_example_block_size),
    )
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

    unverified = [f for f in fields if f in findings.lacking]
    metrics = {
        "fields_probed": len(fields) - len(unverified),
        "fields_unverified": len(unverified),
        "violations": len(violations),
        "identity_example_reused": example_b.reused,
        "requests": len(log.served),
        "reused_tokens": sum(s.reused for s in log.served),
        "store_starts": len(pool.starts) - starts,
    }
    evidence = CacheIdentityEvidence.model_validate(
        {
            "fields": table,
            "identity_example": example_b.row(),
            "unverified": unverified,
            "identity_report_checked": reports,
            "requests": log.table(),
        }
    ).dump()
    outcome = Outcome("pass", "", metrics, evidence, log.exercise(worker), observation=log.observation())
    passed = (
        f"identical requests hit ({again.reused} tokens reused); a request differing only in each of "
        f"{', '.join(f for f in fields if f not in unverified)} reused nothing it was not entitled to"
        + ("; the identity the store reports matches what it keys on" if reports else "")
        + "; the cache-identity example shares exactly positions 0-1"
    )
    findings.settle(outcome, passed)
    if outcome.status == "unproven" and params.unverifiable != "unproven" and unverified:
        outcome.status = params.unverifiable
    return outcome
