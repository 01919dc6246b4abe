"""schedule-fuzz's body: measure a probe schedule and the searches (a failure shrunk), judge the coverage, explain."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from gate.checks._compare import DENY_ALLOWANCE, Tolerance, bounds_logits, tolerance_for
from gate.checks._diagnosis import diagnose_reproducer, explanation
from gate.checks._schedule import Op, ScheduleResult, ScheduleRunner, describe, failure_words
from gate.checks._sweep import layout_edges
from gate.checks.schedule_fuzz import ScheduleFuzzParams
from gate.checks.schedule_fuzz.evidence import ScheduleFuzzEvidence, ScheduleReproducer
from gate.checks.schedule_fuzz.search import Search, alphabets
from gate.core.check import CheckContext, Outcome, check
from gate.core.evidence import ToleranceRecord
from gate.protocols import DecodePath

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


@dataclass(frozen=True)
class Failure:
    """The minimal failing schedule's run, whether it fails again alone, and its diagnosed class."""

    result: ScheduleResult
    reproduces: bool
    diagnosed: dict[str, Any]


@dataclass(frozen=True)
class Observations:
    """The probe schedule's run, what the searches drew and covered, and their failure (if any)."""

    probe: ScheduleResult
    stats: dict[str, Any]
    kinds: Counter[str]
    touched: dict[str, set[int]]
    edges: dict[str, Any]
    within_reach: dict[str, Any]
    """The candidate's layout edges, and those a schedule can reach, per kind."""
    searches: int
    seconds: float
    failure: Failure | None
    bounded: bool
    max_tokens: int
    """The longest request a schedule builds (the params' clipped to the paths' context)."""


def measure(ctx: CheckContext, params: ScheduleFuzzParams, tol: Tolerance) -> Observations:
    """The probe schedule, then the searches; a failure is replayed alone and diagnosed."""
    reference, candidate = ctx.reference, ctx.candidate
    edges = layout_edges(candidate)
    max_tokens = min(params.max_tokens, reference.max_len, candidate.max_len)
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
    search = Search(runner, params, ctx.stop_at_first_failure)  # a control does not shrink
    searches = alphabets(params, runner.continuous is not None)
    minimal = search.minimal(ctx, searches)
    seconds = time.perf_counter() - search.started
    failure: Failure | None = None
    if minimal is not None:
        found = search.failing[tuple(minimal)]
        assert found.failure is not None
        # a path whose state outlives its sessions (a cross-request prefix store) may not fail again
        # on the same schedule alone: the reproducer says so rather than claiming it replays
        reproduces = search.control or runner.run(found.steps).failure is not None
        diagnosed = diagnose_reproducer(reference, candidate, found.steps, found.failure, tol, ctx.seed)
        failure = Failure(found, reproduces, diagnosed)
    drawn = (search.stats, search.kinds, search.touched, edges, runner.edges, len(searches), seconds)
    return Observations(probe, *drawn, failure, runner.bounded, max_tokens)


@dataclass(frozen=True)
class Judgement:
    """The coverage and metrics of the searches, and the failing schedule in words (None: none failed)."""

    coverage: dict[str, Any]
    metrics: dict[str, Any]
    text: str | None


def judge(obs: Observations, params: ScheduleFuzzParams) -> Judgement:
    """What the searches covered and found (pure)."""
    stats = obs.stats
    coverage = {
        "schedules": stats["schedules"],
        "operations": stats["operations"],
        "operations_by_kind": dict(sorted(obs.kinds.items())),
        "longest_request": stats["longest"],
        "searches": obs.searches,
        "continuous_batching": obs.searches > 1,
        "layout_edges": {
            kind: {"within_reach": len(obs.within_reach.get(kind, ())), "touched": len(obs.touched.get(kind, set()))}
            for kind in obs.edges
        },
    }
    metrics: dict[str, Any] = {
        "schedules": stats["schedules"],
        "operations": stats["operations"],
        "seconds": round(obs.seconds, 3),
        "max_examples": params.max_examples,
        "max_seconds": params.max_seconds,
        "budget_spent": bool(stats.get("out_of_time")),
        "first_failure_at_schedule": stats["first_failure_at"],
        "shrink_runs": stats["shrinks"],
    }
    if obs.failure is None:
        return Judgement(coverage, metrics, None)
    found = obs.failure.result
    assert found.failure is not None
    metrics["reproducer_steps"] = len(found.steps)
    return Judgement(coverage, metrics, f"{describe(found.steps)} → {failure_words(found.failure)}")


def explain(ctx: CheckContext, params: ScheduleFuzzParams, tol: Tolerance, obs: Observations, j: Judgement) -> Outcome:
    """The Outcome of the judgement, built once: the failing schedule as a reproducer, else a pass."""
    exercise = {**obs.probe.exercise, "schedules_run": obs.stats["schedules"], "probe_steps": len(obs.probe.steps)}
    observation = torch.cat(obs.probe.logits) if obs.probe.logits else None
    record = ScheduleFuzzEvidence(
        coverage=j.coverage,
        tolerance=ToleranceRecord(**tol.as_dict()),
        seed=ctx.seed,
        reproducer=_reproducer(ctx, params, tol, obs, j) if obs.failure is not None else None,
    )
    seen: dict[str, Any] = {"metrics": j.metrics, "evidence": record.dump(), "exercise": exercise}
    seen["observation"] = observation
    if record.reproducer is not None and obs.failure is not None:
        return _failed(ctx.stop_at_first_failure, obs.failure, record.reproducer, **seen)
    spent = " (the time budget ran out first)" if obs.stats.get("out_of_time") else ""
    kinds_text = ", ".join(f"{k} {v}" for k, v in sorted(obs.kinds.items()))
    edge_text = "; ".join(
        f"{k} edges touched {c['touched']}/{c['within_reach']}" for k, c in j.coverage["layout_edges"].items()
    )
    return Outcome(
        status="pass",
        message=f"{obs.stats['schedules']} random schedules ({obs.stats['operations']} operations: {kinds_text}) "
        f"matched a full pass at every step{spent}" + (f"; {edge_text}" if edge_text else ""),
        tolerated_change=None
        if observation is None
        else float(tol.row(observation).max()) * (DENY_ALLOWANCE if obs.bounded else 1.0),
        **seen,
    )


def _reproducer(
    ctx: CheckContext, params: ScheduleFuzzParams, tol: Tolerance, obs: Observations, j: Judgement
) -> ScheduleReproducer:
    """The failing schedule as evidence: its steps, what failed, a snippet that replays it."""
    assert obs.failure is not None and obs.failure.result.failure is not None and j.text is not None
    steps = obs.failure.result.steps
    return ScheduleReproducer(
        schedule=[describe([s]) for s in steps],
        steps=len(steps),
        failure=failure_words(obs.failure.result.failure),
        text=j.text,
        snippet=_snippet(ctx, steps, params, tol, obs.max_tokens),
        found_after_schedules=obs.stats["first_failure_at"],
        reproduces_on_replay=obs.failure.reproduces,
    )


def _failed(control: bool, failure: Failure, reproducer: ScheduleReproducer, **seen: Any) -> Outcome:
    """A failing schedule: the reproducer in the message, and the class the experiments support."""
    assert failure.result.failure is not None
    text, steps = reproducer.text, reproducer.steps
    shrunk = "not shrunk: a control stops at its first failure" if control else f"shrunk to {steps} step(s)"
    diagnosis = {**failure.diagnosed, "explanation": explanation(failure.diagnosed), "reproducer": text}
    return Outcome(
        status="fail",
        message=f"{'failing' if control else 'minimal'} schedule: {text} (found after "
        f"{reproducer.found_after_schedules} schedule(s), {shrunk})"
        + ("" if failure.reproduces else "; it does not fail again on replay alone: state outlived the sessions"),
        diagnosis=diagnosis,
        detected_at=failure.result.failure["step"],
        **seen,
    )


@check("schedule-fuzz", params=ScheduleFuzzParams)
def schedule_fuzz(ctx: CheckContext, params: ScheduleFuzzParams) -> Outcome:
    """Random cache schedules, every step against a full pass; a failure shrinks to a reproducer."""
    tol = tolerance_for(ctx, params.atol, params.rtol)
    obs = measure(ctx, params, tol)
    return explain(ctx, params, tol, obs, judge(obs, params))
