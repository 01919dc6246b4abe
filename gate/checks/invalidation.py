"""invalidation: after an update or a restart, no entry of an incompatible computation is consumed.

Release-gate step 8 (background: isolation; vLLM resets its prefix cache when weights change). Each scenario
runs on fresh workers, and every request is compared with the worker's own uncached computation
at that moment:

1. weight update: a prompt is served twice (the repeat must hit), the weights change, and the
   next request must reuse nothing; a repeat after that must hit again (the cache still works);
2. adapter update: the same for one adapter's weights;
3. restart: a worker's cache is saved; a worker at another model revision restores it and must
   revive nothing it then serves; a worker at the same revision restores it and must reuse the
   entries and stay exact.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from gate.checks._compare import tolerance_for
from gate.checks._params import InvalidationParams
from gate.checks._prefix_support import (
    RequestLog,
    ReuseTally,
    describe_excess,
    prefix_candidate,
    recompute_oracle,
    seeded_ids,
)
from gate.core.check import CheckContext, Outcome, check


@check("invalidation", params=InvalidationParams)
def invalidation(ctx: CheckContext, params: InvalidationParams) -> Outcome:
    """After a weight or adapter update, or a restore into another revision, no stale entry is used."""
    candidate = prefix_candidate(ctx)
    vocab = ctx.candidate.vocab_size
    problems: list[str] = []
    evidence: dict[str, Any] = {}
    logs: list[RequestLog] = []
    tol = tolerance_for(ctx)

    def new_log(block_size: int) -> RequestLog:
        logs.append(RequestLog(ReuseTally(block_size), tol))
        return logs[-1]

    # 1 and 2: updates -------------------------------------------------------------------------
    for target in ("model", "adapter"):
        worker = candidate.fresh()
        adapter = worker.adapters()[0] if target == "adapter" and worker.adapters() else None
        if target == "adapter" and adapter is None:
            evidence["adapter update"] = "candidate serves no adapters: not exercised"
            continue
        log = new_log(worker.block_size)
        prompt = seeded_ids(vocab, params.prompt_blocks * worker.block_size + 1, ctx.seed * 1000 + 41)
        before = worker.recompute(prompt, adapter=adapter).logits
        log.issue(worker, f"{target}: before", prompt, "v0", recompute_oracle(worker, adapter), adapter=adapter)
        warm = log.issue(
            worker, f"{target}: before, repeated", prompt, "v0", recompute_oracle(worker, adapter), adapter=adapter
        )
        identity_before = worker.identity_for(adapter=adapter)
        worker.update_weights(adapter or "model", seed=params.update_seed)
        after = worker.recompute(prompt, adapter=adapter).logits
        changed = float((after - before).abs().max())
        stale = log.issue(
            worker, f"{target}: after update", prompt, "v1", recompute_oracle(worker, adapter), adapter=adapter
        )
        again = log.issue(
            worker,
            f"{target}: after update, repeated",
            prompt,
            "v1",
            recompute_oracle(worker, adapter),
            adapter=adapter,
        )
        evidence[f"{target} update"] = {
            "computation_changed_by": changed,
            "hit_before": warm.reused,
            "reused_after": stale.reused,
            "hit_after": again.reused,
            "identity_before": identity_before.as_dict(),
            "identity_after": worker.identity_for(adapter=adapter).as_dict(),
        }
        if warm.reused == 0:
            problems.append(
                f"{target} update: the repeated request before the update did not hit, so a miss after "
                "it proves nothing"
            )
        if stale.reused:
            problems.append(
                f"{target} update: the first request after the {target} weights changed consumed "
                f"{stale.reused} tokens of entries computed by the old weights ({describe_excess(stale)}"
                "): an update must invalidate the cache or change the identity it is keyed on"
            )
        if changed == 0.0:
            problems.append(f"{target} update: the update did not change the computation, so it tests nothing")

    # 3: restart ------------------------------------------------------------------------------
    source = candidate.fresh()
    bs = source.block_size
    prompts = [seeded_ids(vocab, params.prompt_blocks * bs + 1, ctx.seed * 1000 + 53 + i) for i in range(2)]
    log = new_log(bs)
    for i, prompt in enumerate(prompts):
        log.issue(source, f"restart: saved p{i}", prompt, "saved", recompute_oracle(source))
    with tempfile.TemporaryDirectory(prefix="gate-prefix-") as tmp:
        file = Path(tmp) / "prefix-cache.safetensors"
        written = source.save_cache(file)
        other = candidate.fresh()
        other.update_weights("model", seed=params.update_seed + 1)
        foreign = other.restore_cache(file)
        same = candidate.fresh()
        kept = same.restore_cache(file)
    log.ledger.forget("saved")  # the restoring workers are new: entitlement comes from the file
    consumed = [
        log.issue(other, f"restart: other revision p{i}", prompt, "other", recompute_oracle(other))
        for i, prompt in enumerate(prompts)
    ]
    stale_tokens = sum(s.reused for s in consumed)
    if stale_tokens:
        problems.append(
            f"restart: a worker at another model revision restored the saved cache and consumed {stale_tokens} "
            f"tokens of it over {sum(1 for s in consumed if s.reused)} requests (first: "
            f"{describe_excess(next(s for s in consumed if s.reused))}); entries of an incompatible revision "
            "must not be revived"
        )
    revived = 0
    for i, prompt in enumerate(prompts):
        log.ledger.record(prompt, "same")  # what the file holds for the same revision
        served = log.issue(same, f"restart: same revision p{i}", prompt, "same", recompute_oracle(same))
        revived += served.reused
    if revived == 0:
        problems.append(
            f"restart: a worker at the same revision restored {kept.restored} of {written} blocks and "
            "reused none of them (restore is not exercised)"
        )
    evidence["restart"] = {
        "blocks_saved": written,
        "other_revision": {"restored": foreign.restored, "dropped": foreign.dropped},
        "same_revision": {"restored": kept.restored, "dropped": kept.dropped, "reused_tokens": revived},
    }

    served_all = [s for log_ in logs for s in log_.served]
    wrong = [s for log_ in logs for s in log_.wrong_outputs()]
    if wrong:
        problems.append("outputs differ from the uncached computation in: " + ", ".join(s.label for s in wrong))
    merged = RequestLog(ReuseTally(bs), tol, served_all)
    metrics = {
        "requests": len(served_all),
        "problems": len(problems),
        "blocks_saved": written,
        "restored_other_revision": foreign.restored,
        "restored_same_revision": kept.restored,
        "reused_after_restore": revived,
    }
    evidence["requests"] = merged.table()
    outcome = Outcome("pass", "", metrics, evidence, merged.exercise(same), observation=merged.observation())
    if problems:
        outcome.status, outcome.message = "fail", "; ".join(problems)
        outcome.diagnosis = {"problems": problems}
        return outcome
    outcome.message = (
        f"no stale entry consumed after a weight update or an adapter update; a restore into "
        f"another revision revived {foreign.restored} blocks and served none; a restore into the "
        f"same revision revived {kept.restored} blocks, reused {revived} tokens, exact"
    )
    return outcome
