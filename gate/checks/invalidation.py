"""invalidation: after an update or a restart, no entry of an incompatible computation is consumed.

Release-gate step 8 (background: isolation; vLLM resets its prefix cache when weights change). Every
request is compared with the store's own uncached computation at that moment:

1. weight update (`PrefixWeightUpdates`): a prompt is served twice (the repeat must hit), the weights
   change, and the next request must reuse nothing; a repeat after that must hit again (the cache
   still works);
2. adapter update: the same for one adapter's weights (stores that serve adapters);
3. restart (`PrefixSnapshots`): a store's cache is saved; the store restarted on another checkpoint
   under an unchanged revision label restores it, and must admit none of it and serve none of it;
   restarted on the same checkpoint it must admit every block it wrote and reuse them, exactly.

A part whose capability the store lacks is `unproven`, named; a store with neither is unproven as a whole.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from gate.checks._compare import tolerance_for
from gate.checks._params import InvalidationParams
from gate.checks._prefix_support import (
    Findings,
    NotPrefixCaching,
    RequestLog,
    ReuseTally,
    describe_excess,
    prefix_candidate,
    recompute_oracle,
    seeded_ids,
    stop_rule,
    store_pool,
    until_first_failure,
)
from gate.core.check import CheckContext, Outcome, check
from gate.core.evidence import InvalidationEvidence, RestartProbe, RestoredStore, ServedRequest, UpdateProbe
from gate.protocols import PrefixServing, PrefixSnapshots, PrefixWeightUpdates


@check("invalidation", params=InvalidationParams)
@until_first_failure
def invalidation(ctx: CheckContext, params: InvalidationParams) -> Outcome:
    """After a weight or adapter update, or a restart on another checkpoint, no stale entry is used."""
    try:
        candidate = prefix_candidate(ctx)
    except NotPrefixCaching as err:
        # a session cache holds nothing past its request: there is no entry to invalidate (a required
        # deny check that cannot run is unproven, never a pass; a policy may make that a warning)
        return Outcome("skip", f"{ctx.candidate.name} keeps no entries across requests: nothing to invalidate ({err})")
    pool = store_pool(ctx, candidate)
    starts = len(pool.starts)
    vocab = ctx.candidate.vocab_size
    findings = Findings(pool=pool)
    problems = findings.problems
    evidence = InvalidationEvidence()
    logs: list[RequestLog] = []
    tol = tolerance_for(ctx)
    metrics: dict[str, Any] = {}
    done: list[str] = []

    def new_log(block_size: int) -> RequestLog:
        # a control stops at the first wrong output, or at the first stale entry consumed (fail_now)
        logs.append(RequestLog(ReuseTally(block_size), tol, stop=stop_rule(ctx, excess=False)))
        return logs[-1]

    # 1 and 2: updates -------------------------------------------------------------------------
    worker: PrefixServing | None = None
    if findings.needs(candidate, PrefixWeightUpdates, "no stale entry after a weight update") is not None:
        # its weights change: a store of its own, not the shared one
        worker = pool.start("weight update", candidate.fresh)
        updates: PrefixWeightUpdates | None = findings.needs(
            worker, PrefixWeightUpdates, "no stale entry after a weight update"
        )
        targets: list[tuple[str, str | None]] = [("model", None)]
        if worker.adapters():
            targets.append(("adapter", worker.adapters()[0]))
        else:
            findings.lacks("no stale entry after an adapter update", "the store serves no adapters")
        for target, adapter in targets:
            if updates is None:
                break
            log = new_log(worker.block_size)
            prompt = seeded_ids(vocab, params.prompt_blocks * worker.block_size + 1, ctx.seed * 1000 + 41)
            oracle = recompute_oracle(worker, adapter)
            before = worker.recompute(prompt, adapter=adapter).logits
            log.issue(worker, f"{target}: before", prompt, (target, 0), oracle, adapter=adapter)
            warm = log.issue(worker, f"{target}: before, repeated", prompt, (target, 0), oracle, adapter=adapter)
            updates.update_weights(adapter or "model", seed=params.update_seed)
            after = worker.recompute(prompt, adapter=adapter).logits
            changed = float((after - before).abs().max())
            stale = log.issue(worker, f"{target}: after update", prompt, (target, 1), oracle, adapter=adapter)
            again = log.issue(worker, f"{target}: after update, repeated", prompt, (target, 1), oracle, adapter=adapter)
            evidence.updates[target] = UpdateProbe(
                computation_changed_by=changed,
                hit_before=warm.reused,
                reused_after=stale.reused,
                hit_after=again.reused,
            )
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
                log.fail_now(problems[-1])
            if changed == 0.0:
                problems.append(f"{target} update: the update did not change the computation, so it tests nothing")
            done.append(f"after a {target} update")

    # 3: restart ------------------------------------------------------------------------------
    source = pool.shared(("base",), candidate.fresh)
    snapshots: PrefixSnapshots | None = findings.needs(source, PrefixSnapshots, "no stale entry after a restart")
    if snapshots is not None:
        bs = source.block_size
        prompts = [seeded_ids(vocab, params.prompt_blocks * bs + 1, ctx.seed * 1000 + 53 + i) for i in range(2)]
        log = new_log(bs)
        for i, prompt in enumerate(prompts):
            log.issue(source, f"restart: saved p{i}", prompt, "saved", recompute_oracle(source))
        with tempfile.TemporaryDirectory(prefix="gate-prefix-") as tmp:
            file = Path(tmp) / "prefix-cache.snapshot"  # the store picks its own format
            written = snapshots.save_cache(file)
            other = pool.start(
                "restart on another checkpoint",
                lambda: snapshots.restarted(checkpoint_seed=params.update_seed + 1),
            )
            foreign = _restore(other, file)
            same = pool.start("restart on the same checkpoint", snapshots.restarted)
            kept = _restore(same, file)
        log.ledger.forget("saved")  # the restarted stores are new: entitlement comes from the file
        consumed = [
            log.issue(other, f"restart: other checkpoint p{i}", prompt, "other", recompute_oracle(other))
            for i, prompt in enumerate(prompts)
        ]
        stale_tokens = sum(s.reused for s in consumed)
        if foreign.restored:
            problems.append(
                f"restart: a store restarted on another checkpoint under the same revision label admitted "
                f"{foreign.restored} of {written} saved blocks (it should admit none: they were computed by "
                "other weights)"
            )
            log.fail_now(problems[-1])
        if stale_tokens:
            problems.append(
                f"restart: the store restarted on another checkpoint consumed {stale_tokens} tokens of the "
                f"restored cache over {sum(1 for s in consumed if s.reused)} requests (first: "
                f"{describe_excess(next(s for s in consumed if s.reused))}); entries of other weights must "
                "not be revived, whatever the revision label says"
            )
        revived = 0
        for i, prompt in enumerate(prompts):
            log.ledger.record(prompt, "same")  # what the file holds for the same checkpoint
            served = log.issue(same, f"restart: same checkpoint p{i}", prompt, "same", recompute_oracle(same))
            revived += served.reused
        if kept.restored < written:
            problems.append(
                f"restart: a store restarted on the same checkpoint admitted {kept.restored} of the {written} "
                f"blocks it wrote (refused: {kept.dropped})"
            )
        if revived == 0:
            problems.append(
                f"restart: a store restarted on the same checkpoint restored {kept.restored} of {written} blocks "
                "and reused none of them (restore is not exercised)"
            )
        evidence.restart = RestartProbe(
            blocks_saved=written,
            other_checkpoint=RestoredStore(admitted=foreign.restored, dropped=foreign.dropped, consumed=stale_tokens),
            same_checkpoint=RestoredStore(admitted=kept.restored, dropped=kept.dropped, reused_tokens=revived),
        )
        metrics.update(
            blocks_saved=written,
            restored_other_checkpoint=foreign.restored,
            restored_same_checkpoint=kept.restored,
            reused_after_restore=revived,
        )
        done.append(
            f"a restart on another checkpoint under the same label admitted {foreign.restored} blocks and "
            f"served none; a restart on the same checkpoint admitted {kept.restored} of {written} blocks "
            f"and reused {revived} tokens, exact"
        )

    served_all = [s for log_ in logs for s in log_.served]
    if not served_all:
        outcome = Outcome("unproven", "", {"store_starts": len(pool.starts) - starts}, evidence.dump())
        return findings.settle(outcome, "nothing could be asserted")
    wrong = [s for log_ in logs for s in log_.wrong_outputs()]
    if wrong:
        problems.append("outputs differ from the uncached computation in: " + ", ".join(s.label for s in wrong))
    merged = RequestLog(ReuseTally(logs[0].ledger.block_size), tol, served_all)
    metrics.update(requests=len(served_all), problems=len(problems), store_starts=len(pool.starts) - starts)
    evidence.requests = [ServedRequest.model_validate(row) for row in merged.table()]
    outcome = Outcome(
        "pass", "", metrics, evidence.dump(), merged.exercise(worker or source), observation=merged.observation()
    )
    return findings.settle(outcome, "no stale entry consumed: " + "; ".join(done))


def _restore(store: PrefixServing, file: Path) -> Any:
    """Restore `file` into a restarted store (which offers restore: it was restarted by one)."""
    assert isinstance(store, PrefixSnapshots)
    return store.restore_cache(file)
