"""`schedule-fuzz`: random cache schedules, each step against a full pass, shrunk to a reproducer.

Every other session check follows one fixed schedule (prefill, then appends). Real cache bugs hide
in particular interleavings: a chunk that ends one token before a block edge, a reset between two
chunks, a second request forked from a shared prefix. This check draws schedules with hypothesis
(`hypothesis.find`, seeded by the run's seed, no example database, bounded by `max_examples`
and `max_seconds`): prefills and appends of random sizes (single-token decode steps among them),
resets, forks and switches between two live sessions; then, where the path batches continuously,
a second search of the same budget over requests joining (their prefill in one forward with the
others' decode steps) and leaving one running batch, and its decode steps (gate.checks._schedule). Every step's logits
are compared with the reference's full pass over the same tokens.

On a failure hypothesis shrinks the schedule to a minimal one, which becomes the evidence: a line
such as "prefill 1, append 1 → argmax differs at step 2 (row 1, position 1: ...)" and a Python
snippet that replays it through the adapters (`replay`). The coverage (schedules, operations by
kind, layout edges touched) is evidence too. The observation the control engine compares is a
fixed probe schedule's logits, so a fault that changes nothing there reads as unobservable.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from collections.abc import Sequence
from functools import partial
from typing import Any

import torch
from hypothesis import HealthCheck, Phase, find, settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky, NoSuchExample

from gate.checks._compare import DENY_ALLOWANCE, Tolerance, bounds_logits, tolerance_for
from gate.checks._diagnosis import BUG_CLASSES, diagnose_reproducer
from gate.checks._params import ScheduleFuzzParams
from gate.checks._schedule import Op, ScheduleResult, ScheduleRunner, describe, failure_words, tighten
from gate.checks._sweep import layout_edges
from gate.core.check import CheckContext, Outcome, check
from gate.core.evidence import ScheduleFuzzEvidence, ScheduleReproducer, ToleranceRecord
from gate.protocols import DecodePath

__all__ = ["ScheduleFuzzParams", "replay", "schedule_fuzz"]

PROBE: tuple[Op, ...] = (
    ("feed", 7),
    ("feed", 1),
    ("feed", 5),
    ("reset",),
    ("feed", 3),
    ("feed", 1),
    ("fork",),
    ("join", 4),
    ("join", 2),
    ("step",),
    ("leave", 0),
    ("join", 3),
    ("step",),
)
"""The fixed schedule whose logits are the check's observation (same in clean and faulty runs); the
joins and leaves run only where the path batches continuously."""


def replay(
    reference: DecodePath,
    candidate: DecodePath,
    schedule: Sequence[Op],
    *,
    seed: int = 0,
    batch: int = 2,
    max_tokens: int = 96,
    slots: int = 3,
    atol: float = 1e-4,
    rtol: float = 1e-4,
    bounds_logits: bool = False,
) -> str:
    """Run a schedule through `candidate`, every step against `reference`'s full pass: what happened,
    in words ("prefill 1, append 1 → argmax differs at step 2 ...", or "... → every step holds").
    `bounds_logits`: a |Δ| beyond the deny allowance fails too (exact and tolerance claims)."""
    runner = ScheduleRunner(
        reference,
        candidate,
        vocab=min(reference.vocab_size, candidate.vocab_size),
        batch=batch,
        max_tokens=max_tokens,
        seed=seed,
        tol=Tolerance(atol, rtol, "params"),
        bounded=bounds_logits,
        slots=slots,
    )
    result = runner.run(schedule)
    return f"{describe(result.steps)} → " + (failure_words(result.failure) if result.failure else "every step holds")


CONTROL_FIRST_LOOK = 10
"""Schedules a control draws from each search before spending the rest of the budget on either."""


class _BudgetSpent(BaseException):
    """Raised out of the search when its time budget is spent before any failure (hypothesis lets a
    BaseException through at once, without shrinking or drawing further examples)."""


class _FirstFailure(BaseException):
    """Raised out of a control's search at its first failing schedule: a control proves power with
    one failure, so it neither shrinks nor lets hypothesis replay the example."""

    def __init__(self, ops: list[Op]) -> None:
        self.ops = ops


KINDS = ("feed", "feed", "feed", "decode", "decode", "reset", "fork", "switch")
"""What an operation is drawn as: feeds three times and decode steps twice as often as the rest, so
requests grow long enough to cross block edges and windows between resets and forks. Shrinking
moves towards the front (a feed)."""

CONTINUOUS_KINDS = ("join", "join", "leave", "step")
"""The second search, where the path batches continuously: joins (each one forward with the running
requests' decode steps) twice as often as leaves and decode steps of the whole batch."""


def _strategy(params: ScheduleFuzzParams, kinds: tuple[str, ...]) -> Any:
    """The schedules one search draws: lists of operations, each a kind from `kinds` then its size.
    Each kind's operation strategy is built once (the flatmap hands back the same object for the same
    kind), so hypothesis neither validates nor analyses a fresh strategy at every draw; the choices it
    makes, and so the schedules a seed draws, are the same as with a strategy built per draw."""

    def build(kind: str) -> Any:
        if kind in ("feed", "join"):
            return st.tuples(st.just(kind), st.integers(1, params.max_chunk))
        if kind == "leave":
            return st.tuples(st.just("leave"), st.integers(0, params.slots - 1))
        return st.just(("feed", 1) if kind == "decode" else (kind,))

    ops = {kind: build(kind) for kind in dict.fromkeys(kinds)}
    return st.lists(st.sampled_from(kinds).flatmap(ops.__getitem__), min_size=1, max_size=params.max_steps)


def _snippet(
    ctx: CheckContext, steps: Sequence[Op], params: ScheduleFuzzParams, tol: Tolerance, max_tokens: int
) -> str:
    subject = ctx.manifest.subject
    ref, cand = subject.reference, subject.candidate
    fault = f", fault={ctx.control!r}" if ctx.control else ""
    return "\n".join(
        [
            "from gate.checks.schedule_fuzz import replay",
            "from gate.core.registry import load_adapter",
            "",
            "def build(adapter, options, fault=None):",
            "    a = load_adapter(adapter)()",
            f"    path = a.build(a.Options.model_validate(options), device={subject.device!r}, "
            f"dtype={subject.dtype!r}, seed={subject.seed!r})",
            "    return path.with_fault(fault) if fault else path",
            "",
            f"reference = build({ref.adapter!r}, {json.dumps(ref.options)})",
            f"candidate = build({cand.adapter!r}, {json.dumps(cand.options)}{fault})",
            f"schedule = {list(steps)!r}",
            f"print(replay(reference, candidate, schedule, seed={ctx.seed}, batch={params.batch}, "
            f"max_tokens={max_tokens}, slots={params.slots}, atol={tol.atol!r}, rtol={tol.rtol!r}, "
            f"bounds_logits={bounds_logits(ctx)!r}))",
        ]
    )


@check("schedule-fuzz", params=ScheduleFuzzParams)
def schedule_fuzz(ctx: CheckContext, params: ScheduleFuzzParams) -> Outcome:
    """Random cache schedules, every step against a full pass; a failure shrinks to a reproducer."""
    reference, candidate = ctx.reference, ctx.candidate
    tol = tolerance_for(ctx, params.atol, params.rtol)
    max_tokens = min(params.max_tokens, reference.max_len, candidate.max_len)
    edges = layout_edges(candidate)
    runner = ScheduleRunner(
        reference,
        candidate,
        vocab=min(reference.vocab_size, candidate.vocab_size),
        batch=params.batch,
        max_tokens=max_tokens,
        seed=ctx.seed,
        tol=tol,
        bounded=bounds_logits(ctx),
        edges=edges,
        slots=params.slots,
        memo=ctx.cache,
    )
    probe = runner.run(PROBE, keep_logits=True)
    kinds: Counter[str] = Counter()
    touched: dict[str, set[int]] = {}
    stats: dict[str, Any] = {"schedules": 0, "operations": 0, "longest": 0, "first_failure_at": None, "shrinks": 0}
    failing: dict[tuple[Op, ...], ScheduleResult] = {}
    control = ctx.stop_at_first_failure  # one failing schedule proves a control's power: no shrinking
    started = time.perf_counter()

    def fails(ops: list[Op]) -> bool:
        searching = stats["first_failure_at"] is None
        if searching and time.perf_counter() - started > params.max_seconds:
            stats["out_of_time"] = True
            raise _BudgetSpent  # draw nothing more (a failure found in time still shrinks)
        result = runner.run(ops)
        if searching:
            stats["schedules"] += 1
            stats["operations"] += len(result.steps)
            stats["longest"] = max(stats["longest"], result.longest)
            kinds.update(result.kinds)
            for kind, hit in result.edges.items():
                touched.setdefault(kind, set()).update(hit)
            if result.failure is not None:
                stats["first_failure_at"] = stats["schedules"]
        else:
            stats["shrinks"] += 1
        if result.failure is not None:
            failing[tuple(ops)] = result
            if control:
                raise _FirstFailure(list(ops))
        return result.failure is not None

    def budget(examples: int) -> Any:
        return settings(
            max_examples=examples,
            database=None,
            deadline=None,
            phases=[Phase.generate, Phase.shrink],
            suppress_health_check=list(HealthCheck),
        )

    # two searches: the sessions' schedules, then (where the path batches continuously) the running
    # batch's; the two never share state, so interleaving them would only dilute each search
    searches = [KINDS if params.forks else tuple(k for k in KINDS if k not in ("fork", "switch"))]
    if runner.continuous and params.joins:
        searches.append(CONTINUOUS_KINDS)
    # (alphabet, schedules, seed) per pass. A control, which needs one failure, first looks briefly at
    # each search (their first schedules, as the positive run draws them), then runs each in full: a
    # fault only the second search reaches is found without first drawing the whole of the first
    passes = [(alphabet, params.max_examples, ctx.seed) for alphabet in searches]
    if control and len(searches) > 1 and params.max_examples > CONTROL_FIRST_LOOK:
        passes = [(a, CONTROL_FIRST_LOOK, ctx.seed) for a in searches] + [
            (a, params.max_examples, ctx.seed)
            for a in searches  # the same search again, in full
        ]
    minimal: list[Op] | None = None
    for alphabet, examples, seed in passes:
        try:
            strategy = ctx.cache.get(
                ("schedule-fuzz strategy", params.max_chunk, params.slots, params.max_steps, alphabet),
                partial(_strategy, params, alphabet),
            )
            minimal = find(strategy, fails, settings=budget(examples), random=random.Random(seed))
        except NoSuchExample:
            continue
        except _BudgetSpent:
            break
        except _FirstFailure as first:
            minimal = first.ops
        except Flaky:
            # the path's state outlived its sessions (a cross-request store), so a schedule did not fail
            # the same way twice: keep the shortest schedule that failed, unshrunk
            shortest = sorted(failing.keys(), key=len)
            minimal = list(shortest[0]) if shortest else None
        break
    if minimal is not None and not control:
        minimal = tighten(list(minimal), fails)
    seconds = time.perf_counter() - started
    coverage = {
        "schedules": stats["schedules"],
        "operations": stats["operations"],
        "operations_by_kind": dict(sorted(kinds.items())),
        "longest_request": stats["longest"],
        "searches": len(searches),
        "continuous_batching": len(searches) > 1,
        "layout_edges": {
            kind: {"within_reach": len(runner.edges.get(kind, ())), "touched": len(touched.get(kind, set()))}
            for kind in edges
        },
    }
    metrics: dict[str, Any] = {
        "schedules": stats["schedules"],
        "operations": stats["operations"],
        "seconds": round(seconds, 3),
        "max_examples": params.max_examples,
        "max_seconds": params.max_seconds,
        "budget_spent": bool(stats.get("out_of_time")),
        "first_failure_at_schedule": stats["first_failure_at"],
        "shrink_runs": stats["shrinks"],
    }
    record = ScheduleFuzzEvidence(coverage=coverage, tolerance=ToleranceRecord(**tol.as_dict()), seed=ctx.seed)
    exercise = {**probe.exercise, "schedules_run": stats["schedules"], "probe_steps": len(probe.steps)}
    observation = torch.cat(probe.logits) if probe.logits else None
    if minimal is not None:
        found = failing[tuple(minimal)]
        assert found.failure is not None
        steps, failure = found.steps, found.failure
        text = f"{describe(steps)} → {failure_words(failure)}"
        # a path whose state outlives its sessions (a cross-request prefix store) may not fail again
        # on the same schedule alone: the reproducer says so rather than claiming it replays
        reproduces = control or runner.run(steps).failure is not None
        record.reproducer = ScheduleReproducer(
            schedule=[describe([s]) for s in steps],
            steps=len(steps),
            failure=failure_words(failure),
            text=text,
            snippet=_snippet(ctx, steps, params, tol, max_tokens),
            found_after_schedules=stats["first_failure_at"],
            reproduces_on_replay=reproduces,
        )
        metrics["reproducer_steps"] = len(steps)
        shrunk = "not shrunk: a control stops at its first failure" if control else f"shrunk to {len(steps)} step(s)"
        return Outcome(
            status="fail",
            message=f"{'failing' if control else 'minimal'} schedule: {text} (found after "
            f"{stats['first_failure_at']} schedule(s), {shrunk})"
            + ("" if reproduces else "; it does not fail again on replay alone: state outlived the sessions"),
            metrics=metrics,
            evidence=record.dump(),
            exercise=exercise,
            diagnosis=_diagnose(ctx, steps, failure, tol, text),
            detected_at=failure["step"],
            observation=observation,
        )
    spent = " (the time budget ran out first)" if stats.get("out_of_time") else ""
    kinds_text = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
    edge_text = "; ".join(
        f"{k} edges touched {c['touched']}/{c['within_reach']}" for k, c in coverage["layout_edges"].items()
    )
    return Outcome(
        status="pass",
        message=f"{stats['schedules']} random schedules ({stats['operations']} operations: {kinds_text}) "
        f"matched a full pass at every step{spent}" + (f"; {edge_text}" if edge_text else ""),
        metrics=metrics,
        evidence=record.dump(),
        exercise=exercise,
        observation=observation,
        tolerated_change=None
        if observation is None
        else float(tol.row(observation).max()) * (DENY_ALLOWANCE if runner.bounded else 1.0),
    )


def _diagnose(ctx: CheckContext, steps: list[Op], failure: dict[str, Any], tol: Tolerance, text: str) -> dict[str, Any]:
    """The class the failing step and model-level experiments support (gate.checks._diagnosis), with the reproducer."""
    found = diagnose_reproducer(ctx.reference, ctx.candidate, steps, failure, tol, ctx.seed)
    return {**found, "explanation": BUG_CLASSES[found["bug_class"]], "reproducer": text}
