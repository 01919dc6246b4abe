"""short-prompt's body: measure short prompts and their continuations, judge what eviction kept, explain."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from gate.checks._compare import Tolerance, compare_rows, random_tokens, tolerance_for
from gate.checks._diagnosis import BUG_CLASSES
from gate.checks.short_prompt import ShortPromptParams
from gate.core.check import CheckContext, Outcome, check
from gate.errors import SubjectCrash
from gate.protocols import CacheCropping, Session, offered


@dataclass(frozen=True)
class PromptRun:
    """One prompt through a fresh session: the pairs its cache held after the prefill and the last
    append (None: not exposed), the appended tokens' logits [B, steps, V] and the full forward's."""

    length: int
    kept: int | None
    kept_at_end: int | None
    got: torch.Tensor
    want: torch.Tensor
    exercise: dict[str, Any]


@dataclass(frozen=True)
class Verdict:
    """What one prompt shows: judged against the full forward where a correct eviction kept
    everything (a 1-token prompt, or a cache that held every pair it saw)."""

    length: int
    kept: int | None
    kept_at_end: int | None
    must_match: bool
    max_abs_delta: float
    over_tolerance: int
    non_finite: int

    @property
    def dropped_whole(self) -> bool:
        return self.kept == 0

    @property
    def bad(self) -> bool:
        return self.non_finite > 0 or self.dropped_whole or (self.must_match and self.over_tolerance > 0)

    def record(self) -> dict[str, Any]:
        return {
            "length": self.length,
            "kept_pairs": self.kept,
            "kept_pairs_at_end": self.kept_at_end,
            "judged_against_full_forward": self.must_match,
            "max_abs_delta": self.max_abs_delta,
            "rows_over_tolerance": self.over_tolerance,
            "non_finite_logits": self.non_finite,
        }


@dataclass(frozen=True)
class Crash:
    """A prompt on which the subject raised: a finding about that prompt; the others still run."""

    length: int
    diagnosis: dict[str, Any]
    """SubjectCrash.diagnosis of the crash (class `crash`, exception, call, traceback)."""

    def record(self) -> dict[str, Any]:
        """The crash as the per-prompt evidence keeps it: the exception and call, the traceback's last line."""
        d = self.diagnosis
        return {
            "length": self.length,
            "crashed": d["exception"],
            "call": d["call"],
            "traceback_tail": d["traceback"].strip().splitlines()[-3:],
        }


@dataclass(frozen=True)
class Observations:
    runs: list[PromptRun]
    stopped: bool
    """A control returned at its first failing prompt."""
    crashes: list[Crash]
    """Prompts on which the subject crashed (each in its own fresh session; the rest ran on)."""


@dataclass(frozen=True)
class Judgement:
    verdicts: list[Verdict]
    bad: list[Verdict | Crash]
    """Every failing prompt, crashed or judged bad, shortest first."""


def _cache_length(session: Session) -> int | None:
    cropping = offered(session, CacheCropping)
    return None if cropping is None else int(cropping.cache_length())


def _run_prompt(ctx: CheckContext, params: ShortPromptParams, length: int) -> PromptRun:
    """Prefill `length` tokens in a fresh session, append `steps` one at a time; the full forward beside it."""
    tokens = random_tokens(ctx.candidate.vocab_size, params.batch, length + params.steps, ctx.seed * 1000 + length)
    session = ctx.candidate.new_session(params.batch)
    session.prefill(tokens[:, :length])
    kept = _cache_length(session)
    got = torch.cat([session.append(tokens[:, i : i + 1]).float().cpu() for i in range(length, tokens.shape[1])], 1)
    want = ctx.reference.full_logits(tokens).float().cpu()[:, length:]
    return PromptRun(length, kept, _cache_length(session), got, want, dict(session.exercise()))


def verdict(run: PromptRun, steps: int, tol: Tolerance) -> Verdict:
    """One prompt's judgement (pure): an empty cache after a non-empty prefill is a context dropped
    whole; a 1-token prompt, or one whose cache held every pair, must match the full forward."""
    must_match = run.length == 1 or run.kept_at_end == run.length + steps
    cmp = compare_rows(run.want, run.got, tol)
    non_finite = int((~torch.isfinite(run.got)).sum()) + int((~torch.isfinite(run.want)).sum())
    delta = float((run.got - run.want).abs().nan_to_num(float("inf")).max())
    return Verdict(run.length, run.kept, run.kept_at_end, must_match, delta, int(cmp.over_tolerance.sum()), non_finite)


def measure(ctx: CheckContext, params: ShortPromptParams, tol: Tolerance) -> Observations:
    """Each prompt length, shortest first, in its own fresh session (a control: up to its first failing prompt)."""
    runs: list[PromptRun] = []
    crashes: list[Crash] = []
    for length in params.lengths:
        try:
            runs.append(_run_prompt(ctx, params, length))
        except SubjectCrash as crash:  # a finding about this prompt: the other prompts still run
            if ctx.stop_at_first_failure:
                raise  # a control stops at its first failure: the engine counts the crash (detected)
            crashes.append(Crash(length, crash.diagnosis()))
            ctx.log(f"  short-prompt: the subject crashed on a {length}-token prompt ({crash}); the others run on")
            continue
        if ctx.stop_at_first_failure and verdict(runs[-1], params.steps, tol).bad:
            break
    return Observations(runs, stopped=len(runs) + len(crashes) < len(params.lengths), crashes=crashes)


def judge(obs: Observations, params: ShortPromptParams, tol: Tolerance) -> Judgement:
    """Every prompt's verdict, the crashed prompts, and the failing ones shortest first (pure)."""
    verdicts = [verdict(run, params.steps, tol) for run in obs.runs]
    bad: list[Verdict | Crash] = sorted([*(v for v in verdicts if v.bad), *obs.crashes], key=lambda b: b.length)
    return Judgement(verdicts, bad)


def _kept(v: Verdict) -> str:
    return f"keeps {v.kept} of {v.length} K/V pairs" if v.kept is not None else "(cache length not exposed)"


def _failure(v: Verdict | Crash, tol: Tolerance) -> tuple[str, str, str]:
    """(message, bug class, explanation) of a failing prompt."""
    if isinstance(v, Crash):
        return (
            f"the subject crashed on a {v.length}-token prompt in {v.diagnosis['call']}: {v.diagnosis['exception']}",
            "crash",
            v.diagnosis["explanation"],
        )
    if v.non_finite:
        return (
            f"{v.non_finite} non-finite logits after a {v.length}-token prompt",
            "non-finite-output",
            BUG_CLASSES["non-finite-output"],
        )
    if v.dropped_whole:
        return (
            f"a {v.length}-token prompt {_kept(v)}: the context was dropped whole, so the next token attends "
            f"over itself alone (max |Δ| {v.max_abs_delta:.3g} against the full forward)",
            "kv-truncation",
            "an eviction kept no pair of a non-empty context: the cache was emptied with no error",
        )
    return (
        f"the continuation of a {v.length}-token prompt {_kept(v)} differs from the full forward: max |Δ| "
        f"{v.max_abs_delta:.3g}, {v.over_tolerance} rows over the tolerance (atol {tol.atol:g}, rtol {tol.rtol:g}); "
        "a correct eviction keeps a 1-token prompt's one pair, and a cache holding every pair matches",
        "uncertain",
        "a short context that had to be kept whole computes differently from the full forward: a pair "
        "dropped or altered, or the appended tokens placed wrongly (see the per-prompt evidence)",
    )


def explain(params: ShortPromptParams, tol: Tolerance, obs: Observations, j: Judgement) -> Outcome:
    """The Outcome of the judgement, built once: the first failing prompt, or a pass."""
    by_length = {str(v.length): v.record() for v in j.verdicts} | {str(c.length): c.record() for c in obs.crashes}
    one = next((v for v in j.verdicts if v.length == 1), None)
    seen: dict[str, Any] = {
        "metrics": {
            "lengths": [v.length for v in j.verdicts],
            "kept_pairs": {str(v.length): v.kept for v in j.verdicts},
            "one_token_kept": None if one is None else one.kept,
            "one_token_max_abs_delta": None if one is None else one.max_abs_delta,
            "dropped_whole": [v.length for v in j.verdicts if v.dropped_whole],
            "crashed": [c.length for c in obs.crashes],
        },
        "evidence": {
            "prompts": dict(sorted(by_length.items(), key=lambda kv: int(kv[0]))),
            "steps": params.steps,
            "tolerance": tol.as_dict(),
        },
        "exercise": {
            "prompts": {str(run.length): run.exercise for run in obs.runs},
            **({"stopped_at_first_failure": {"length": obs.runs[-1].length}} if obs.stopped else {}),
        },
        "observation": torch.cat([(run.got - run.want).transpose(0, 1).flatten() for run in obs.runs])
        if obs.runs
        else torch.zeros(0),
        "observation_in_run_order": True,
    }
    if j.bad:
        first = j.bad[0]
        message, bug_class, explanation = _failure(first, tol)
        others = [f"{b.length}: {_failure(b, tol)[1]}" for b in j.bad[1:]]
        if others:
            message += f"; also failing, by prompt length: {', '.join(others)}"
        ran_on = [v.length for v in j.verdicts if not v.bad]
        if obs.crashes and ran_on:
            message += f"; prompts of {', '.join(map(str, ran_on))} tokens ran and held"
        crash = first.diagnosis if isinstance(first, Crash) else {}
        return Outcome(
            status="fail",
            message=message,
            diagnosis={
                **crash,
                "bug_class": bug_class,
                "explanation": explanation,
                "length": first.length,
                "failing_lengths": {str(b.length): _failure(b, tol)[1] for b in j.bad},
            },
            detected_at=first.length,
            **seen,
        )
    assert one is not None  # a pass ran every prompt, 1 among them (ShortPromptParams)
    judged = [v.length for v in j.verdicts if v.must_match]
    return Outcome(
        status="pass",
        message=f"prompts of {', '.join(str(v.length) for v in j.verdicts)} tokens keep a non-empty context; "
        f"a 1-token prompt {_kept(one)} and the continuations of lengths {judged} match the full forward "
        f"(max |Δ| {max(v.max_abs_delta for v in j.verdicts if v.must_match):.3g})",
        **seen,
    )


@check("short-prompt", params=ShortPromptParams)
def short_prompt(ctx: CheckContext, params: ShortPromptParams) -> Outcome:
    """A non-empty context is never dropped whole: a 1-token prompt keeps its one pair."""
    tol = tolerance_for(ctx)
    obs = measure(ctx, params, tol)
    return explain(params, tol, obs, judge(obs, params, tol))
