"""tenant-isolation: tenants (or cache salts) never share entries, and same-tenant reuse happens.

Computational sameness does not grant permission to share state (background: isolation). On a fresh
worker, for each prompt: tenant A serves it twice (the second must hit: same-tenant reuse is the
control that makes the rest meaningful; a cache that is off would pass "no reuse" otherwise), then
tenant B serves the identical prompt (must reuse nothing) and repeats it (must hit its own entry),
then an unsalted request and a salted one, and a third tenant shares only a prefix. Every
cross-tenant request must also match its own uncached computation.
"""

from __future__ import annotations

from gate.checks._compare import tolerance_for
from gate.checks._params import TenantIsolationParams
from gate.checks._prefix_support import (
    RequestLog,
    ReuseTally,
    Served,
    describe_excess,
    prefix_candidate,
    recompute_oracle,
    seeded_ids,
)
from gate.core.check import CheckContext, Outcome, check


@check("tenant-isolation", params=TenantIsolationParams)
def tenant_isolation(ctx: CheckContext, params: TenantIsolationParams) -> Outcome:
    """Different tenants or salts never share entries; the same tenant does reuse its own."""
    candidate = prefix_candidate(ctx)
    worker = candidate.fresh()
    bs, vocab = worker.block_size, ctx.candidate.vocab_size
    log = RequestLog(ReuseTally(bs), tolerance_for(ctx))
    oracle = recompute_oracle(worker)
    same: list[Served] = []  # requests that must hit (same tenant, repeated)
    cross: list[Served] = []  # requests that must not reuse another tenant's entries
    for n in range(params.prompts):
        prompt = seeded_ids(vocab, params.prompt_blocks * bs + 1, ctx.seed * 1000 + 31 * n)
        other_tail = seeded_ids(vocab, bs + 1, ctx.seed * 1000 + 31 * n + 7, avoid=[prompt[bs]])
        log.issue(worker, f"p{n} tenant-a", prompt, "tenant-a", oracle, tenant="tenant-a")
        same.append(log.issue(worker, f"p{n} tenant-a again", prompt, "tenant-a", oracle, tenant="tenant-a"))
        cross.append(log.issue(worker, f"p{n} tenant-b", prompt, "tenant-b", oracle, tenant="tenant-b"))
        same.append(log.issue(worker, f"p{n} tenant-b again", prompt, "tenant-b", oracle, tenant="tenant-b"))
        log.issue(worker, f"p{n} unsalted", prompt, None, oracle, tenant=None)
        same.append(log.issue(worker, f"p{n} unsalted again", prompt, None, oracle, tenant=None))
        cross.append(log.issue(worker, f"p{n} salt-x", prompt, "salt-x", oracle, tenant="salt-x"))
        cross.append(
            log.issue(
                worker,
                f"p{n} tenant-c shares a prefix",
                prompt[: 2 * bs] + other_tail,
                "tenant-c",
                oracle,
                tenant="tenant-c",
            )
        )

    leaks = [s for s in cross if s.excess]
    no_reuse = [s for s in same if s.reused == 0 and s.entitled]
    wrong = log.wrong_outputs()
    metrics = {
        "cross_tenant_requests": len(cross),
        "cross_tenant_reused_tokens": sum(s.reused for s in cross),
        "same_tenant_requests": len(same),
        "same_tenant_reused_tokens": sum(s.reused for s in same),
        "leaks": len(leaks),
        "wrong_outputs": len(wrong),
    }
    outcome = Outcome(
        "pass", "", metrics, {"requests": log.table()}, log.exercise(worker), observation=log.observation()
    )
    problems = []
    if leaks:
        problems.append(
            f"{len(leaks)} requests reused another tenant's or salt's entries; first: "
            f"{leaks[0].label}: {describe_excess(leaks[0])}: the tenant or salt must partition the cache namespace "
            "(computational sameness does not grant permission to share state)"
        )
    if no_reuse:
        problems.append(
            f"same-tenant reuse did not happen in {len(no_reuse)} repeated requests (first: "
            f"{no_reuse[0].label}, 0 of {no_reuse[0].entitled} reusable tokens): with the cache off, "
            "'no cross-tenant reuse' proves nothing"
        )
    if wrong:
        problems.append("outputs differ from the uncached computation in: " + ", ".join(s.label for s in wrong))
    if problems:
        outcome.status, outcome.message = "fail", "; ".join(problems)
        outcome.diagnosis = {"leaks": [s.row() for s in leaks[:8]], "no_reuse": [s.label for s in no_reuse]}
        return outcome
    outcome.message = (
        f"{len(cross)} cross-tenant requests reused nothing of another tenant; "
        f"{len(same)} same-tenant repeats reused {metrics['same_tenant_reused_tokens']} tokens"
    )
    return outcome
