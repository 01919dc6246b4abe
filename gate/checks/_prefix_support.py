"""Shared by the prefix-reuse checks: capabilities, the entitlement oracle, request records.

The oracle is the check's own model of a correct cache, kept apart from the cache under test: a
request may reuse at most the full blocks it shares, position by position from position 0, with an
earlier request of the same identity (background: cache identity), and never its last prompt token
(its logits are the answer). Reuse beyond that is state the request was not entitled to, however the
logits look. An assertion that needs more than `PrefixServing` asks `Findings.needs` for it; one the
store cannot support is `unproven` with the capability named, never failed and never passed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import torch

from gate.checks._compare import Tolerance, compare_rows
from gate.checks._engine import common_prefix
from gate.checks._prefix_oracle import Oracle
from gate.checks._prefix_store import StorePool, capability_name, prefix_candidate, store_pool
from gate.core.check import CheckContext, Outcome, Params
from gate.core.hazards import HazardFinding
from gate.prefix.cache import PrefixReply
from gate.protocols import PrefixServing, offered

C = TypeVar("C")

Status = Literal["pass", "fail", "warn", "skip", "unproven"]

# docs/background.md, cache identity (keys are chained): after A, B may reuse positions 0-1, never the later equal ids
IDENTITY_EXAMPLE_A = [11, 24, 31, 42, 57]
IDENTITY_EXAMPLE_B = [11, 24, 99, 42, 57]

WHY: dict[str, str] = {
    "token-ids": "cached K/V are products of the token ids in order",
    "positions": "a block reused at another offset carries another position and another preceding context",
    "model-revision": "K/V are products of the weights",
    "adapter": "an adapter changes the projections that produced K/V",
    "tokenizer": "the same ids mean other tokens under another tokenizer revision",
    "rope-scaling": "rope scaling changes the rotation applied to cached keys",
    "attention-window": "state produced under one visibility pattern is not valid under another",
    "attention-mask": "state produced under one mask is not valid under another",
    "kv-dtype": "buffers in another numeric format are another representation",
    "tenant": "computational sameness does not grant permission to share state across tenants",
}
"""Why each identity field must partition the cache (background: cache identity, isolation)."""


@dataclass
class Findings:
    """What a check found: problems (fail), assertions it could not make (unproven), evidence."""

    problems: list[str] = field(default_factory=list)
    lacking: dict[str, str] = field(default_factory=dict)
    """assertion -> why it could not be made (the capability the store lacks)."""
    pool: StorePool | None = None
    hazard: HazardFinding | None = None
    """The design hazard the problems show (gate.core.hazards): named first in a failure's message."""

    def needs(self, store: object, protocol: type[C], assertion: str) -> C | None:
        """`store` typed as `protocol`, or None with `assertion` recorded as unproven for lack of it."""
        if (typed := offered(store, protocol)) is None:
            name = capability_name(protocol)
            self.lacking[assertion] = f"the store offers no {name} (gate.protocols.{protocol.__name__})"
        return typed

    def lacks(self, assertion: str, why: str) -> None:
        self.lacking[assertion] = why

    def outcome(
        self,
        passed: str,
        *,
        evidence: dict[str, Any],
        diagnosis: dict[str, Any] | None = None,
        relabel: Mapping[str, Status] | None = None,
        **seen: Any,
    ) -> Outcome:
        """The Outcome of a prefix check: fail with every problem, else unproven naming what could not be
        asserted, else pass (`passed`: its message); `relabel`: the status reported for a verdict's status
        where its params say otherwise; `seen`: the Outcome's other fields. The evidence gains every store
        started so far in this run and the assertions left unproven."""
        status: Status = "pass"
        message = passed
        if self.problems:
            status, message = "fail", (self.hazard.lead() + ": " if self.hazard else "") + "; ".join(self.problems)
            diagnosis = {**(diagnosis or {}), "problems": self.problems}
            if self.hazard is not None:
                diagnosis["hazard"] = self.hazard.dump()
        elif self.lacking:
            status = "unproven"
            message += "; unproven (the store lacks what they need): " + "; ".join(
                f"{a}: {why}" for a, why in self.lacking.items()
            )
        starts = {} if self.pool is None else {"store_starts_in_run": list(self.pool.starts)}
        evidence = {**evidence, **starts, "unproven_assertions": dict(self.lacking)}
        reported = (relabel or {}).get(status, status)
        return Outcome(reported, message, evidence=evidence, diagnosis=diagnosis, lacking=dict(self.lacking), **seen)


@dataclass(frozen=True)
class PrefixRun:
    """What one prefix check runs with; `starts_before` lets it count its own store starts."""

    candidate: PrefixServing
    pool: StorePool
    findings: Findings
    starts_before: int

    @property
    def store_starts(self) -> int:
        return len(self.pool.starts) - self.starts_before


def prefix_run(ctx: CheckContext) -> PrefixRun:
    """The candidate as a prefix store (NotPrefixCaching where it is none), its pool, empty findings."""
    candidate = prefix_candidate(ctx)
    pool = store_pool(ctx, candidate)
    return PrefixRun(candidate, pool, Findings(pool=pool), len(pool.starts))


def seeded_ids(vocab: int, length: int, seed: int, avoid: Sequence[int] = ()) -> list[int]:
    """`length` seeded token ids, none in `avoid`."""
    gen = torch.Generator().manual_seed(seed)
    out: list[int] = []
    while len(out) < length:
        token = int(torch.randint(0, vocab, (1,), generator=gen))
        if token not in avoid:
            out.append(token)
    return out


class ReuseTally:
    """What a correct cache lets each request reuse, from the requests seen so far."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.seen: list[tuple[tuple[int, ...], Hashable]] = []

    def entitled(self, tokens: Sequence[int], key: Hashable) -> int:
        shared = [common_prefix(prev, tokens) for prev, prev_key in self.seen if prev_key == key]
        best = max((n - n % self.block_size for n in shared), default=0)
        return min(best, max(len(tokens) - 1, 0))

    def record(self, tokens: Sequence[int], key: Hashable) -> None:
        self.seen.append((tuple(tokens), key))

    def forget(self, key: Hashable) -> None:
        self.seen = [(t, k) for t, k in self.seen if k != key]


@dataclass
class Served:
    label: str
    tokens: list[int]
    entitled: int
    reply: PrefixReply
    max_abs_delta: float | None = None
    argmax_flips: int = 0
    over_tolerance: int = 0

    @property
    def reused(self) -> int:
        return self.reply.stats.reused_tokens

    @property
    def excess(self) -> int:
        """Reused tokens beyond entitlement."""
        return max(self.reused - self.entitled, 0)

    def row(self) -> dict[str, Any]:
        s = self.reply.stats
        return {
            "request": self.label,
            "prompt_tokens": s.prompt_tokens,
            "entitled": self.entitled,
            "reused": s.reused_tokens,
            "hit_blocks": s.hit_blocks,
            "spans": [list(x) for x in s.reused_spans],
            "served_at": s.served_at[:16],
            "served_from": s.served_from[:16],
            "computed": s.computed_tokens,
            "collisions_detected": s.collisions_detected,
            "evicted": s.evicted_blocks,
            "max_abs_delta": self.max_abs_delta,
            "argmax_flips": self.argmax_flips,
        }


StopRule = Callable[[Served], "str | None"]
"""Control mode: the problem that makes one served request a failure of the check by itself, or None."""


class FirstFailure(Exception):
    """Raised in control mode at the first request that fails the check: a control needs one failure."""

    def __init__(self, log: RequestLog, worker: PrefixServing, problem: str) -> None:
        super().__init__(problem)
        self.log, self.worker, self.problem = log, worker, problem


def stop_rule(ctx: CheckContext, excess: bool = True, logits: bool = True) -> StopRule | None:
    """The rule a control stops at (None for a positive run, which serves everything): an output
    that differs from its uncached computation (an argmax flip; with `logits`, also a row over the
    tolerance), and, where the check fails every such request (`excess`), state reused beyond
    entitlement."""
    if not ctx.stop_at_first_failure:
        return None

    def rule(served: Served) -> str | None:
        if served.argmax_flips or (logits and served.over_tolerance):
            return f"{served.label}: outputs differ from the uncached computation (max |Δ| {served.max_abs_delta:.3g})"
        if excess and served.excess:
            return f"{served.label}: {describe_excess(served)}"
        return None

    return rule


P = TypeVar("P", bound=Params)


def until_first_failure(fn: Callable[[CheckContext, P], Outcome]) -> Callable[[CheckContext, P], Outcome]:
    """A prefix check that, as a control, returns the failing outcome of its first failing request
    instead of serving the rest of its workload; `detected_at` is RequestLog.at, else the request's index."""

    @functools.wraps(fn)
    def run(ctx: CheckContext, params: P) -> Outcome:
        try:
            return fn(ctx, params)
        except FirstFailure as stop:
            log, index = stop.log, len(stop.log.served) - 1
            return Outcome(
                "fail",
                f"{stop.problem} (request {index + 1}; the control stopped at its first failure)",
                metrics={"requests": len(log.served), "stopped_at_request": index},
                evidence={"requests": log.table()},
                exercise=log.exercise(stop.worker),
                observation=log.observation(),
                detected_at=index if log.at is None else log.at,
            )

    return run


@dataclass
class RequestLog:
    """Requests a check issued, their entitlement and their comparison with an uncached oracle."""

    ledger: ReuseTally
    tol: Tolerance
    served: list[Served] = field(default_factory=list)
    stop: StopRule | None = None
    """Control mode (`stop_rule`): raise FirstFailure at the first request the rule fails."""
    last_store: PrefixServing | None = None
    at: int | None = None
    """Where the next request probes, in the check's own measure: a control stopped there reports it."""

    def issue(
        self,
        worker: PrefixServing,
        label: str,
        tokens: Sequence[int],
        key: Hashable,
        oracle: Oracle | None = None,
        **request: Any,
    ) -> Served:
        """Serve `tokens` and record it for entitlement; with an `oracle`, its uncached logits over the
        prompt and the reply's continuation are compared with the computed rows."""
        entitled = self.ledger.entitled(tokens, key)
        reply = worker.request(tokens, **request)
        served = Served(label, list(tokens), entitled, reply)
        if oracle is not None:
            full = oracle([*tokens, *reply.continuation[:-1]]).float()
            last = len(tokens) - 1
            rows = full[reply.computed_positions + list(range(last + 1, last + len(reply.continuation)))]
            cand = torch.cat([reply.logits, reply.continuation_logits[1:]])
            cmp = compare_rows(rows.to(cand.device), cand, self.tol)
            served.max_abs_delta = float(cmp.max_abs_delta.max())
            served.argmax_flips = int(cmp.failed.sum())
            served.over_tolerance = int(cmp.over_tolerance.sum())
        self.ledger.record(tokens, key)
        self.served.append(served)
        self.last_store = worker
        if self.stop is not None and (problem := self.stop(served)) is not None:
            raise FirstFailure(self, worker, problem)
        return served

    def fail_now(self, problem: str) -> None:
        """Control mode: stop at a problem the check found after a request (no-op in a positive run)."""
        if self.stop is not None and self.last_store is not None:
            raise FirstFailure(self, self.last_store, problem)

    def wrong_outputs(self) -> list[Served]:
        return [s for s in self.served if s.argmax_flips or s.over_tolerance]

    def exercise(self, worker: PrefixServing) -> dict[str, Any]:
        stats = [s.reply.stats for s in self.served]
        state = worker.cache_state()
        return {
            "requests": len(stats),
            "hit_blocks": sum(s.hit_blocks for s in stats),
            "reused_tokens": sum(s.reused_tokens for s in stats),
            "computed_tokens": sum(s.computed_tokens for s in stats),
            "cache_blocks": state.get("blocks"),
            "cache_bytes": state.get("bytes_held"),
            "block_size": worker.block_size,
        }

    def table(self, keep: int = 48) -> list[dict[str, Any]]:
        rows = [s.row() for s in self.served]
        return rows if len(rows) <= keep else rows[: keep // 2] + rows[-keep // 2 :]

    def observation(self) -> torch.Tensor:
        """Reused tokens per request, then every computed logit row: what a fault would change."""
        reuse = torch.tensor([float(s.reused) for s in self.served], dtype=torch.float32)
        return torch.cat([reuse, *(s.reply.logits.float().flatten().cpu() for s in self.served)])


def broken_rules(served: Served) -> list[str]:
    """The cache rules a request's reuse broke, read from what it reused (blind to any fault)."""
    s = served.reply.stats
    rules = []
    if any(at != made for at, made in zip(s.served_at, s.served_from, strict=True)):
        rules.append("position: blocks were served at other offsets than they were computed at")
    if len(s.reused_spans) > 1 or (s.reused_spans and s.reused_spans[0][0] != 0):
        rules.append(
            "order: blocks were reused after an earlier block missed (a block's state depends on "
            "every earlier token, background: cache identity)"
        )
    if served.excess and not rules:
        rules.append(
            "entitlement: state was reused beyond the prefix shared with an earlier request of the same identity"
        )
    return rules


def beyond_any_identity(served: Sequence[Served], block_size: int) -> list[Served]:
    """The requests that reused more than they share with any earlier one under any identity."""
    tally, beyond = ReuseTally(block_size), []
    for s in served:
        if s.reused > tally.entitled(s.tokens, None):
            beyond.append(s)
        tally.record(s.tokens, None)
    return beyond


def describe_excess(served: Served) -> str:
    """One line: what was reused beyond entitlement, and from where."""
    s = served.reply.stats
    moved = [(at, made) for at, made in zip(s.served_at, s.served_from, strict=True) if at != made]
    where = f"; blocks computed at positions {[m for _, m in moved]} served at {[a for a, _ in moved]}" if moved else ""
    return f"reused {served.reused} tokens {s.reused_spans}, entitled to {served.entitled}{where}"
