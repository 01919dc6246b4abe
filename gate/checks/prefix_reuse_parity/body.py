"""prefix-reuse-parity's body: measure the request families and the budget contract, judge, explain."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gate.checks._compare import tolerance_for
from gate.checks._prefix_oracle import Oracle, reference_oracle
from gate.checks._prefix_store import BudgetNotTaken
from gate.checks._prefix_support import (
    PrefixRun,
    RequestLog,
    ReuseTally,
    Served,
    broken_rules,
    describe_excess,
    prefix_run,
    seeded_ids,
    stop_rule,
    until_first_failure,
)
from gate.checks.prefix_reuse_parity import PrefixReuseParityParams
from gate.checks.prefix_reuse_parity.evidence import PrefixReuseEvidence
from gate.core.check import CheckContext, Outcome, check
from gate.core.evidence import ServedRequest, ToleranceRecord
from gate.core.manifest import GreedyTokensClaim
from gate.protocols import PrefixBudget, PrefixServing


def _boundary_lengths(block_size: int, limit: int) -> list[int]:
    edges = {e + d for e in range(block_size, limit + 1, block_size) for d in (-1, 0, 1)}
    return sorted(n for n in {0, 1, limit} | edges if 0 <= n <= limit)


@dataclass
class Observations:
    """Every request served on one worker against the reference path, and where each probed."""

    worker: PrefixServing
    log: RequestLog
    oracle: Oracle
    new_tokens: int
    base_len: int
    shared: dict[int, int] = field(default_factory=dict)
    """Index in log.served -> shared-prefix length (for detected_at)."""
    held: list[tuple[str, int, int]] = field(default_factory=list)
    """After each request, where the store declares a byte budget: (request, bytes held, budget declared)."""
    budget: BudgetRun | None = None
    """The budget contract as served (None: the store has no byte budget)."""

    def serve(self, label: str, tokens: list[int], share: int) -> Served:
        self.log.at = share  # before serving: a control may stop inside `issue`, and reports where
        served = self.log.issue(self.worker, label, tokens, "base", self.oracle, new_tokens=self.new_tokens)
        self.shared[len(self.log.served) - 1] = share
        state = self.worker.cache_state()
        if state.get("byte_budget") is not None and state.get("bytes_held") is not None:
            self.held.append((label, int(state["bytes_held"]), int(state["byte_budget"])))
        return served

    def moved(self, seq: int, base: list[int]) -> None:
        """The base's later blocks at offset 0: nothing may be reused (K/V carry their position)."""
        bs = self.worker.block_size
        for shift in (bs, 2 * bs):
            if shift < self.base_len - 1:
                self.serve(f"s{seq} refresh", base, self.base_len)  # S present again, whatever was evicted
                self.serve(f"s{seq} moved from {shift} to 0", base[shift:], 0)

    def sequence(self, ctx: CheckContext, params: PrefixReuseParityParams, seq: int) -> None:
        """One base sequence S and its family: shared prefixes of many lengths, a full-prompt hit, S
        again, S changed mid-way, S's later blocks moved (first, for a control)."""
        bs, vocab, base_len = self.worker.block_size, ctx.candidate.vocab_size, self.base_len
        seed = ctx.seed * 1000 + seq * 97
        base = seeded_ids(vocab, base_len, seed)
        ctx.log(f"  sequence {seq}: {base_len} tokens, block size {bs}")
        self.serve(f"s{seq} warm", base, 0)
        if ctx.stop_at_first_failure:  # a control: the probe of a block served elsewhere first
            self.moved(seq, base)
        lengths = params.lengths or _boundary_lengths(bs, base_len - 1)
        for n, length in enumerate(sorted({min(max(x, 0), base_len - 1) for x in lengths})):
            suffix = seeded_ids(vocab, params.suffix_len, seed + 1 + n, avoid=[base[length]])
            self.serve(f"s{seq} prefix {length}", base[:length] + suffix, length)
        self.serve(f"s{seq} full-prompt hit", base[: params.base_blocks * bs], params.base_blocks * bs)
        self.serve(f"s{seq} repeat", base, base_len)
        for p in sorted({bs, bs + 1, 2 * bs - 1} & set(range(1, base_len - 1))):
            self.serve(f"s{seq} refresh", base, base_len)
            mutated = list(base)
            mutated[p] = seeded_ids(vocab, 1, seed + 500 + p, avoid=[base[p]])[0]
            self.serve(f"s{seq} changed at {p}", mutated, p)
        if not ctx.stop_at_first_failure:
            self.moved(seq, base)


@dataclass(frozen=True)
class BudgetRun:
    """The budget contract as served: the budget asked for and declared, bytes held after each request."""

    budget: int
    per_block: int
    stored: int
    """Bytes of distinct blocks served."""
    declared: int
    held: list[int]
    evicted: int
    last: Served
    """The latest prompt served again."""

    def record(self) -> dict[str, Any]:
        return {
            "byte_budget": self.budget,
            "bytes_per_block": self.per_block,
            "bytes_served": self.stored,
            "max_bytes_held": max(self.held),
            "bytes_held_after_each_request": self.held,
            "evicted": self.evicted,
            "latest_prompt_reused": self.last.reused,
        }


def measure_budget(
    ctx: CheckContext, run: PrefixRun, worker: PrefixServing, log: RequestLog, blocks: int, length: int
) -> BudgetRun | None:
    """A store whose budget holds `blocks` blocks serves 2 x `blocks` distinct blocks and more, its
    bytes held read after every request, then its latest prompt again (None: no byte budget)."""
    assertion = "bytes held within the declared budget"
    budgeted: PrefixBudget | None = run.findings.needs(run.candidate, PrefixBudget, assertion)
    if budgeted is None:
        return None
    state = worker.cache_state()
    per_block = int(state.get("bytes_held") or 0) // max(int(state.get("blocks") or 0), 1)
    if not per_block:
        run.findings.lacks(assertion, "the store reports no bytes held per block (cache_state: bytes_held, blocks)")
        return None
    budget = blocks * per_block
    store = _budgeted(run, budgeted, budget, assertion)
    if store is None:
        return None
    oracle = reference_oracle(ctx)
    bs, vocab = store.block_size, ctx.candidate.vocab_size
    prompt_blocks = max(1, min(blocks, (length - 1) // bs))
    prompts = [
        seeded_ids(vocab, prompt_blocks * bs + 1, ctx.seed * 1000 + 7777 + n)
        for n in range(2 * blocks // prompt_blocks + 1)
    ]
    held: list[int] = []
    declared = budget
    for n, prompt in enumerate(prompts):
        log.issue(store, f"budget p{n}", prompt, ("budget", n), oracle)
        state = store.cache_state()
        declared = int(state.get("byte_budget", budget))
        held.append(int(state.get("bytes_held", 0)))
    evicted = int(store.cache_state().get("evicted", 0))
    last = log.issue(store, "budget latest again", prompts[-1], ("budget", len(prompts) - 1), oracle)
    return BudgetRun(budget, per_block, len(prompts) * prompt_blocks * per_block, declared, held, evicted, last)


def _budgeted(run: PrefixRun, budgeted: PrefixBudget, budget: int, assertion: str) -> PrefixServing | None:
    """The shared store under `budget` bytes (None, recorded as lacking: the store refused it)."""
    try:
        return run.pool.shared(("budget", budget), lambda: budgeted.with_budget(budget))
    except BudgetNotTaken as err:
        run.findings.lacks(assertion, str(err))
        return None


def measure(ctx: CheckContext, params: PrefixReuseParityParams, run: PrefixRun) -> Observations:
    """Every base sequence's family of requests (on a budgeted worker where `byte_budget` is set and
    the store offers one), then the budget contract."""
    worker: PrefixServing = run.pool.shared(("base",), run.candidate.fresh)
    if params.byte_budget is not None:
        assertion = f"parity within a budget of {params.byte_budget} bytes"
        budgeted: PrefixBudget | None = run.findings.needs(run.candidate, PrefixBudget, assertion)
        store = None if budgeted is None else _budgeted(run, budgeted, params.byte_budget, assertion)
        worker = worker if store is None else store
    bs = worker.block_size
    claim = ctx.manifest.claim
    claim_tokens = claim.tokens if isinstance(claim, GreedyTokensClaim) else None
    new_tokens = params.new_tokens or (max(claim_tokens) if params.compare == "greedy" and claim_tokens else 4)
    base_len = params.base_blocks * bs + 1
    new_tokens = max(1, min(new_tokens, ctx.candidate.max_len - base_len - params.suffix_len))
    tol = tolerance_for(ctx, params.atol, params.rtol)
    # a control stops at the first request that fails: reuse beyond entitlement, an argmax flip, or
    # (compare: logits) a row over the tolerance
    log = RequestLog(ReuseTally(bs), tol, stop=stop_rule(ctx, logits=params.compare == "logits"))
    work = Observations(worker, log, reference_oracle(ctx), new_tokens, base_len)
    for seq in range(params.sequences):
        work.sequence(ctx, params, seq)
    work.budget = measure_budget(ctx, run, worker, work.log, params.budget_blocks, work.base_len)
    return work


@dataclass(frozen=True)
class Judgement:
    """The requests that fail the check (judged: wrong by `compare`; excess: reuse beyond
    entitlement), those only over the logit tolerance, and the problems in words."""

    judged: list[Served]
    excess: list[Served]
    over: list[Served]
    rules: list[str]
    detected_at: int | None
    problems: list[str]


def _budget_problems(b: BudgetRun) -> list[str]:
    """Bytes held beyond the declared budget, no eviction shown, the latest prompt not hit (pure)."""
    problems = []
    if b.declared != b.budget:
        problems.append(f"budget: asked for a budget of {b.budget} bytes, the store declares {b.declared}")
    if max(b.held) > b.budget:
        over = next(i for i, h in enumerate(b.held) if h > b.budget)
        problems.append(
            f"budget: the store held {max(b.held)} bytes under a declared budget of {b.budget} (first over it "
            f"after request {over}: {b.held[over]} bytes; {b.stored} bytes of distinct blocks were served)"
        )
    elif b.evicted == 0:
        problems.append(
            f"budget: {b.stored} bytes of distinct blocks passed through a {b.budget}-byte budget without one "
            "eviction reported: the store's byte accounting or its eviction is not shown"
        )
    if b.last.reused == 0:
        problems.append("budget: the latest prompt did not hit again under the budget: the cache is not exercised")
    return problems


def judge(params: PrefixReuseParityParams, obs: Observations) -> Judgement:
    """Requests unlike a full recompute or reusing beyond entitlement (the first described), the
    budget contract's problems, and a run that reused nothing (pure)."""
    log = obs.log
    wrong = log.wrong_outputs()
    excess = [s for s in log.served if s.excess]
    judged = [s for s in wrong if s.argmax_flips or params.compare == "logits"]
    judged_ids = {id(s) for s in judged}
    problems = [] if obs.budget is None else _budget_problems(obs.budget)
    if beyond := [(label, held, budget) for label, held, budget in obs.held if held > budget]:
        label, held, budget = beyond[0]
        problems.append(
            f"budget: the store declares a budget of {budget} bytes and held {held} after {label} "
            f"({len(beyond)} of {len(obs.held)} requests over it)"
        )
    rules = sorted({r for s in [*judged, *excess] for r in broken_rules(s)})
    bad = {id(s) for s in [*wrong, *excess]}
    failed_at = [obs.shared[i] for i, s in enumerate(log.served) if id(s) in bad and i in obs.shared]
    detected_at = min(failed_at, default=None) if judged or excess else None
    if judged or excess:
        first = (judged or excess)[0]
        what = (
            f"argmax differs on {first.argmax_flips} rows, {first.over_tolerance} rows over tolerance "
            f"(max |Δ| {first.max_abs_delta:.3g})"
            if id(first) in judged_ids
            else "outputs within tolerance"
        )
        problems.insert(
            0,
            f"{len(judged)} of {len(log.served)} requests differ from a full recompute "
            f"and {len(excess)} reused state beyond entitlement; first: {first.label}: {describe_excess(first)}; "
            f"{what}" + (f". Broken rule: {'; '.join(rules)}" if rules else ""),
        )
    if sum(s.reused for s in log.served) == 0:
        problems.append(
            f"no request reused any cached block ({len(log.served)} requests, "
            f"{sum(s.entitled for s in log.served)} tokens were reusable): parity proves nothing about reuse"
        )
    over = [s for s in wrong if id(s) not in judged_ids]
    return Judgement(judged, excess, over, rules, detected_at, problems)


def explain(params: PrefixReuseParityParams, obs: Observations, j: Judgement, run: PrefixRun) -> Outcome:
    """A pass with requests over the logit tolerance (compare: greedy) is a warning."""
    log, budget = obs.log, (None if obs.budget is None else obs.budget.record())
    served = log.served
    metrics: dict[str, Any] = {
        "requests": len(served),
        "reused_tokens": sum(s.reused for s in served),
        "hit_blocks": sum(s.reply.stats.hit_blocks for s in served),
        "entitled_tokens": sum(s.entitled for s in served),
        "max_abs_delta": max((s.max_abs_delta or 0.0) for s in served),
        "argmax_flips": sum(s.argmax_flips for s in served),
        "rows_over_tolerance": sum(s.over_tolerance for s in served),
        "excess_reuse_requests": len(j.excess),
        "below_entitlement_requests": len([s for s in served if s.reused < s.entitled]),
        "new_tokens": obs.new_tokens,
        "block_size": obs.worker.block_size,
        "store_starts": run.store_starts,
        **(
            {"max_bytes_held": max(h for _, h, _ in obs.held), "declared_byte_budget": obs.held[-1][2]}
            if obs.held
            else {}
        ),
    }
    evidence = PrefixReuseEvidence(
        requests=[ServedRequest(**row) for row in log.table()],
        tolerance=ToleranceRecord(**log.tol.as_dict()),
        compare=params.compare,
        below_entitlement=[s.label for s in log.served if s.reused < s.entitled][:16],
        cache=obs.worker.cache_state(),
        budget=budget,
    ).dump()
    failing = [*j.judged, *j.excess]
    diagnosis = {"broken_rules": j.rules, "failing_requests": [s.row() for s in failing[:8]]} if failing else None
    passed = (
        f"{len(log.served)} requests match a full recompute ({params.compare}, max |Δ| "
        f"{metrics['max_abs_delta']:.3g}); {metrics['reused_tokens']} of {metrics['entitled_tokens']} reusable "
        f"tokens reused in {metrics['hit_blocks']} block hits"
        + (f"; {len(j.over)} requests over the logit tolerance" if j.over else "")
        + (
            f"; within a budget of {budget['byte_budget']} bytes the store held at most "
            f"{budget['max_bytes_held']} and evicted {budget['evicted']} blocks"
            if budget
            else ""
        )
    )
    return run.findings.outcome(
        passed,
        metrics=metrics,
        evidence=evidence,
        diagnosis=diagnosis,
        exercise=log.exercise(obs.worker),
        observation=log.observation(),
        detected_at=j.detected_at,
        relabel={"pass": "warn"} if j.over else None,
    )


@check("prefix-reuse-parity", params=PrefixReuseParityParams)
@until_first_failure
def prefix_reuse_parity(ctx: CheckContext, params: PrefixReuseParityParams) -> Outcome:
    """Requests reusing cached prefixes of many lengths match a full recompute, with proof of hits."""
    run = prefix_run(ctx)
    obs = measure(ctx, params, run)
    j = judge(params, obs)
    run.findings.problems.extend(j.problems)
    return explain(params, obs, j, run)
