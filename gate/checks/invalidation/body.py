"""invalidation's body: measure the updates and the restart, judge what stale state was used, explain."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gate.checks._compare import Tolerance, tolerance_for
from gate.checks._prefix_oracle import recompute_oracle
from gate.checks._prefix_store import NotPrefixCaching, StorePool
from gate.checks._prefix_support import (
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
from gate.checks.invalidation import InvalidationParams
from gate.checks.invalidation.evidence import InvalidationEvidence, RestartProbe, RestoredStore, UpdateProbe
from gate.core.check import CheckContext, Outcome, check
from gate.core.evidence import ServedRequest
from gate.core.hazards import HazardFinding
from gate.prefix.cache import RestoreReport
from gate.protocols import PrefixServing, PrefixSnapshots, PrefixWeightUpdates, offered


@dataclass(frozen=True)
class Update:
    """One prompt served twice, the `target`'s weights updated, then served twice more."""

    target: str
    changed: float
    """Largest |Δlogit| the update made to the prompt's uncached computation."""
    warm: Served
    stale: Served
    again: Served


@dataclass(frozen=True)
class Restart:
    """A saved cache restored by a store restarted on another checkpoint, then on the same one."""

    written: int
    foreign: RestoreReport
    kept: RestoreReport
    consumed: list[Served]
    """The other checkpoint's requests (they must reuse nothing restored)."""
    revived: int
    """Tokens the same checkpoint's requests reused."""


@dataclass(frozen=True)
class Observations:
    """Every update and the restart (None where the store offers no snapshots), with their logs."""

    logs: list[RequestLog]
    updates: list[Update]
    restart: Restart | None
    updated: PrefixServing | None
    """The store whose weights were updated (None: no weight updates)."""
    source: PrefixServing
    """The shared store the restart saved."""


def _new_log(ctx: CheckContext, tol: Tolerance, block_size: int) -> RequestLog:
    # a control stops at the first wrong output, or at the first stale entry consumed (fail_now)
    return RequestLog(ReuseTally(block_size), tol, stop=stop_rule(ctx, excess=False))


def _update(
    ctx: CheckContext,
    params: InvalidationParams,
    log: RequestLog,
    worker: PrefixServing,
    updates: PrefixWeightUpdates,
    target: tuple[str, str | None],
) -> Update:
    """Serve a prompt twice, update the weights of `target` (its name, its adapter), serve it twice more."""
    name, adapter = target
    prompt = seeded_ids(ctx.candidate.vocab_size, params.prompt_blocks * worker.block_size + 1, ctx.seed * 1000 + 41)
    oracle = recompute_oracle(worker, adapter)
    before = worker.recompute(prompt, adapter=adapter).logits
    log.issue(worker, f"{name}: before", prompt, (name, 0), oracle, adapter=adapter)
    warm = log.issue(worker, f"{name}: before, repeated", prompt, (name, 0), oracle, adapter=adapter)
    updates.update_weights(adapter or "model", seed=params.update_seed)
    after = worker.recompute(prompt, adapter=adapter).logits
    changed = float((after - before).abs().max())
    stale = log.issue(worker, f"{name}: after update", prompt, (name, 1), oracle, adapter=adapter)
    again = log.issue(worker, f"{name}: after update, repeated", prompt, (name, 1), oracle, adapter=adapter)
    probe = Update(name, changed, warm, stale, again)
    if problem := _stale_after_update(probe):
        log.fail_now(problem)
    return probe


def measure_updates(
    ctx: CheckContext, params: InvalidationParams, run: PrefixRun, tol: Tolerance
) -> tuple[PrefixServing | None, list[Update], list[RequestLog]]:
    """The weight and (where served) adapter updates on a store of their own, with one log per update."""
    candidate, findings = run.candidate, run.findings
    assertion = "no stale entry after a weight update"
    if findings.needs(candidate, PrefixWeightUpdates, assertion) is None:
        return None, [], []
    # its weights change: a store of its own, not the shared one
    worker = run.pool.start("weight update", candidate.fresh)
    updates: PrefixWeightUpdates | None = findings.needs(worker, PrefixWeightUpdates, assertion)
    targets: list[tuple[str, str | None]] = [("model", None)]
    if worker.adapters():
        targets.append(("adapter", worker.adapters()[0]))
    else:
        findings.lacks("no stale entry after an adapter update", "the store serves no adapters")
    if updates is None:
        return worker, [], []
    logs = [_new_log(ctx, tol, worker.block_size) for _ in targets]
    return worker, [_update(ctx, params, log, worker, updates, t) for log, t in zip(logs, targets, strict=True)], logs


def measure_restart(
    ctx: CheckContext,
    params: InvalidationParams,
    pool: StorePool,
    source: PrefixServing,
    snapshots: PrefixSnapshots,
    log: RequestLog,
) -> Restart:
    """Save the source's cache, restore it into stores restarted on another and the same checkpoint, serve it."""
    vocab, bs = ctx.candidate.vocab_size, source.block_size
    prompts = [seeded_ids(vocab, params.prompt_blocks * bs + 1, ctx.seed * 1000 + 53 + i) for i in range(2)]
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
    if problem := _foreign_admitted(written, foreign):
        log.fail_now(problem)
    revived = 0
    for i, prompt in enumerate(prompts):
        log.ledger.record(prompt, "same")  # what the file holds for the same checkpoint
        revived += log.issue(same, f"restart: same checkpoint p{i}", prompt, "same", recompute_oracle(same)).reused
    return Restart(written, foreign, kept, consumed, revived)


def _restore(store: PrefixServing, file: Path) -> RestoreReport:
    """Restore `file` into a restarted store (which offers restore: it was restarted by one)."""
    snapshots = offered(store, PrefixSnapshots)
    assert snapshots is not None
    return snapshots.restore_cache(file)


def measure(ctx: CheckContext, params: InvalidationParams, run: PrefixRun) -> Observations:
    """The updates (stores with weight updates), then the restart (stores with snapshots)."""
    tol = tolerance_for(ctx)
    updated, updates, logs = measure_updates(ctx, params, run, tol)
    source = run.pool.shared(("base",), run.candidate.fresh)
    snapshots: PrefixSnapshots | None = run.findings.needs(source, PrefixSnapshots, "no stale entry after a restart")
    restart = None
    if snapshots is not None:
        logs.append(_new_log(ctx, tol, source.block_size))
        restart = measure_restart(ctx, params, run.pool, source, snapshots, logs[-1])
    return Observations(logs, updates, restart, updated, source)


def _stale_after_update(probe: Update) -> str | None:
    """The stale entries the first request after an update consumed, in words, or None."""
    stale, target = probe.stale, probe.target
    if not stale.reused:
        return None
    return (
        f"{target} update: the first request after the {target} weights changed consumed "
        f"{stale.reused} tokens of entries computed by the old weights ({describe_excess(stale)}"
        "): an update must invalidate the cache or change the identity it is keyed on"
    )


def _foreign_admitted(written: int, foreign: RestoreReport) -> str | None:
    """The blocks a store restarted on another checkpoint admitted, in words, or None."""
    if not foreign.restored:
        return None
    return (
        f"restart: a store restarted on another checkpoint under the same revision label admitted "
        f"{foreign.restored} of {written} saved blocks (it should admit none: they were computed by "
        "other weights)"
    )


def _update_problems(probe: Update) -> list[str]:
    target = probe.target
    problems = []
    if probe.warm.reused == 0:
        problems.append(
            f"{target} update: the repeated request before the update did not hit, so a miss after it proves nothing"
        )
    if stale := _stale_after_update(probe):
        problems.append(stale)
    if probe.changed == 0.0:
        problems.append(f"{target} update: the update did not change the computation, so it tests nothing")
    return problems


def _restart_problems(r: Restart) -> list[str]:
    problems = []
    if foreign := _foreign_admitted(r.written, r.foreign):
        problems.append(foreign)
    stale_tokens = sum(s.reused for s in r.consumed)
    if stale_tokens:
        problems.append(
            f"restart: the store restarted on another checkpoint consumed {stale_tokens} tokens of the "
            f"restored cache over {sum(1 for s in r.consumed if s.reused)} requests (first: "
            f"{describe_excess(next(s for s in r.consumed if s.reused))}); entries of other weights must "
            "not be revived, whatever the revision label says"
        )
    if r.kept.restored < r.written:
        problems.append(
            f"restart: a store restarted on the same checkpoint admitted {r.kept.restored} of the {r.written} "
            f"blocks it wrote (refused: {r.kept.dropped})"
        )
    if r.revived == 0:
        problems.append(
            f"restart: a store restarted on the same checkpoint restored {r.kept.restored} of {r.written} blocks "
            "and reused none of them (restore is not exercised)"
        )
    return problems


def judge(obs: Observations) -> list[str]:
    """Stale entries consumed, probes that prove nothing, outputs unlike their uncached computation (pure)."""
    problems = [p for probe in obs.updates for p in _update_problems(probe)]
    if obs.restart is not None:
        problems.extend(_restart_problems(obs.restart))
    wrong = [s for log in obs.logs for s in log.wrong_outputs()]
    if wrong:
        problems.append("outputs differ from the uncached computation in: " + ", ".join(s.label for s in wrong))
    return problems


def hazard(obs: Observations) -> HazardFinding | None:
    """`restart-admits-same-revision` where a store restarted on other weights admitted saved blocks (pure)."""
    r = obs.restart
    if r is None or not r.foreign.restored:
        return None
    consumed = sum(s.reused for s in r.consumed)
    shown = (
        f"a store restarted on another checkpoint under the same revision label admitted {r.foreign.restored} "
        f"of {r.written} saved blocks and served {consumed} tokens of them"
    )
    return HazardFinding.of("restart-admits-same-revision", "invalidation", shown)


def _evidence(obs: Observations, requests: list[dict[str, Any]]) -> InvalidationEvidence:
    updates = {
        u.target: UpdateProbe(
            computation_changed_by=u.changed,
            hit_before=u.warm.reused,
            reused_after=u.stale.reused,
            hit_after=u.again.reused,
        )
        for u in obs.updates
    }
    restart = None
    if (r := obs.restart) is not None:
        restart = RestartProbe(
            blocks_saved=r.written,
            other_checkpoint=RestoredStore(
                admitted=r.foreign.restored, dropped=r.foreign.dropped, consumed=sum(s.reused for s in r.consumed)
            ),
            same_checkpoint=RestoredStore(admitted=r.kept.restored, dropped=r.kept.dropped, reused_tokens=r.revived),
        )
    rows = [ServedRequest.model_validate(row) for row in requests]
    return InvalidationEvidence(updates=updates, restart=restart, requests=rows)


def _passed(obs: Observations) -> str:
    """What a pass asserted, part by part."""
    done = [f"after a {u.target} update" for u in obs.updates]
    if (r := obs.restart) is not None:
        done.append(
            f"a restart on another checkpoint under the same label admitted {r.foreign.restored} blocks and "
            f"served none; a restart on the same checkpoint admitted {r.kept.restored} of {r.written} blocks "
            f"and reused {r.revived} tokens, exact"
        )
    return "no stale entry consumed: " + "; ".join(done)


def explain(obs: Observations, run: PrefixRun) -> Outcome:
    """The Outcome of the findings, built once (unproven as a whole where nothing could be served)."""
    findings, store_starts = run.findings, run.store_starts
    served = [s for log in obs.logs for s in log.served]
    if not served:
        evidence = _evidence(obs, []).dump()
        return findings.outcome("nothing could be asserted", evidence=evidence, metrics={"store_starts": store_starts})
    merged = RequestLog(ReuseTally(obs.logs[0].ledger.block_size), obs.logs[0].tol, served)
    metrics: dict[str, Any] = {}
    if (r := obs.restart) is not None:
        metrics.update(
            blocks_saved=r.written,
            restored_other_checkpoint=r.foreign.restored,
            restored_same_checkpoint=r.kept.restored,
            reused_after_restore=r.revived,
        )
    metrics.update(requests=len(served), problems=len(findings.problems), store_starts=store_starts)
    return findings.outcome(
        _passed(obs),
        metrics=metrics,
        evidence=_evidence(obs, merged.table()).dump(),
        exercise=merged.exercise(obs.updated or obs.source),
        observation=merged.observation(),
    )


@check("invalidation", params=InvalidationParams)
@until_first_failure
def invalidation(ctx: CheckContext, params: InvalidationParams) -> Outcome:
    """After a weight or adapter update, or a restart on another checkpoint, no stale entry is used."""
    try:
        run = prefix_run(ctx)
    except NotPrefixCaching as err:
        # a session cache holds nothing past its request: there is no entry to invalidate. A policy
        # rule with `not_applicable: {without: cross-request-cache}` makes that not-applicable;
        # without one, a required deny check that cannot run is unproven, never a pass
        return Outcome(
            "skip",
            f"{ctx.candidate.name} keeps no entries across requests: nothing to invalidate ({err})",
            absent="cross-request-cache",
        )
    obs = measure(ctx, params, run)
    run.findings.problems.extend(judge(obs))
    run.findings.hazard = hazard(obs)
    return explain(obs, run)
