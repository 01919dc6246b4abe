"""batch-invariance's body: measure the requests alone and in each batched setting, judge every row, explain."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch

from gate.checks._compare import (
    DENY_ALLOWANCE,
    RowComparison,
    Tolerance,
    bounds_logits,
    compare_rows,
    tolerance_for,
    top_k_rows,
)
from gate.checks._diagnosis import BUG_CLASSES
from gate.checks.batch_invariance import BatchInvarianceParams
from gate.checks.batch_invariance.settings import (
    Plan,
    Request,
    alone,
    continuous_batch,
    equal_batch,
    padded_batch,
    prepare,
    probe_order,
)
from gate.core.check import CheckContext, Outcome, check
from gate.protocols import DecodePath


@dataclass(frozen=True)
class Bar:
    """What every row is held to: the tolerance, whether the claim bounds the logits (then a |Δ|
    beyond the deny allowance fails too), and how many logits a failure keeps per row."""

    tol: Tolerance
    bounded: bool
    top_k: int

    def bad(self, cmp: RowComparison) -> torch.Tensor:
        """The rows that fail: an argmax flip outside the tie band, or beyond the allowance when bounded."""
        return (cmp.failed | cmp.beyond_allowance) if self.bounded else cmp.failed

    def first_bad(self, request: Request, rows: torch.Tensor) -> int | None:
        """The first of a request's rows that fails against the reference's (None: every row holds)."""
        bad = self.bad(compare_rows(request.rows[: rows.shape[0]], rows, self.tol))
        return int(bad.nonzero()[0]) if bool(bad.any()) else None


class _Watch:
    """A control's early stop inside a setting: each forward's rows are judged against the
    reference's, and the setting stops at the first forward in which one fails."""

    def __init__(self, requests: list[Request], bar: Bar) -> None:
        self.requests, self.bar = requests, bar
        self.seen = [0] * len(requests)

    def __call__(self, fed: dict[int, torch.Tensor]) -> bool:
        failed = False
        for slot, rows in fed.items():
            start = self.seen[slot]
            self.seen[slot] += int(rows.shape[0])
            cmp = compare_rows(self.requests[slot].rows[start : start + rows.shape[0]], rows, self.bar.tol)
            failed = failed or bool(self.bar.bad(cmp).any())
        return failed


@dataclass(frozen=True)
class AloneRun:
    """A request run alone: its index in `Plan.everyone` and its rows."""

    request: int
    rows: torch.Tensor


@dataclass(frozen=True)
class BatchRun:
    """A batched setting run: its index in `Plan.settings` and each slot's rows (empty: not reached)."""

    setting: int
    rows: list[torch.Tensor]


@dataclass(frozen=True)
class Observations:
    """What the run sent and what came back, in the order it ran, and the sessions' exercise."""

    plan: Plan
    runs: list[AloneRun | BatchRun]
    exercise: dict[str, Any]


class _Walk:
    """The runs of one check, in order; a control's stops at its first failing forward (`_Watch`)."""

    def __init__(self, candidate: DecodePath, plan: Plan, bar: Bar, control: bool) -> None:
        self.candidate, self.plan, self.bar, self.control = candidate, plan, bar, control
        self.runs: list[AloneRun | BatchRun] = []
        self.alone_bad: dict[int, int | None] = {}
        self.alone_exercise: dict[str, Any] | None = None
        self.batches: dict[str, Any] = {}

    def run_alone(self, index: int, rows_wanted: int | None = None) -> int | None:
        """Request `index` alone (no further than `rows_wanted` rows): its first failing row, or None."""
        req = self.plan.everyone[index]
        rows, ex = alone(self.candidate, req, _Watch([req], self.bar) if self.control else None, rows_wanted)
        self.runs.append(AloneRun(index, rows))
        self.alone_exercise = ex if self.alone_exercise is None else self.alone_exercise
        self.alone_bad[index] = self.bar.first_bad(req, rows)
        return self.alone_bad[index]

    def run_every_alone(self) -> None:
        """Every request alone, in order (a control: up to the first that fails, none run twice)."""
        for index in range(len(self.plan.everyone)):
            bad = self.alone_bad.get(index)
            if bad is None:
                bad = self.run_alone(index)
            if bad is not None and self.control:
                break

    def run_setting(self, k: int) -> tuple[int, int] | None:
        """Setting k: the request (its index in `everyone`) and row of its first failure, or None."""
        group, offset = self.plan.group(k)
        name, side, order = self.plan.settings[k]
        watch = _Watch(group, self.bar) if self.control else None
        if side == "none":
            rows, ex = equal_batch(self.candidate, group, watch)
        elif side == "continuous":
            assert self.plan.continuous is not None
            rows, ex = continuous_batch(self.plan.continuous, group, watch)
        else:
            assert self.plan.batched is not None
            rows, ex = padded_batch(self.plan.batched, group, side, watch)
        self.runs.append(BatchRun(k, rows))
        self.batches[name] = ex
        for slot, (i, got) in enumerate(zip(order, rows, strict=True)):
            if self.control and not got.shape[0]:
                continue  # the setting stopped before this request ran
            bad = self.bar.first_bad(group[slot], got)
            if bad is not None:
                return offset + i, bad
        return None

    def exercise(self) -> dict[str, Any]:
        requests = len(self.plan.everyone)
        exercise = {"padding_sides": list(self.plan.sides), "requests": requests, "batches": self.batches}
        return exercise if self.alone_exercise is None else {**exercise, "alone": self.alone_exercise}


def measure(ctx: CheckContext, plan: Plan, bar: Bar) -> Observations:
    """A positive run: every request alone, then every setting. A control: the settings in
    `probe_order` up to the first that fails, then that request alone up to the failing row (wrong
    alone too, or no batch failed: every request alone, as a positive run reports it)."""
    control = ctx.stop_at_first_failure
    walk = _Walk(ctx.candidate, plan, bar, control)
    if not control:
        walk.run_every_alone()
        for k in range(len(plan.settings)):
            walk.run_setting(k)
        return Observations(plan, walk.runs, walk.exercise())
    failed: tuple[int, int] | None = None
    for k in probe_order([side for _, side, _ in plan.settings], ctx.control):
        failed = walk.run_setting(k)
        if failed is not None:
            break
    if failed is None or walk.run_alone(failed[0], rows_wanted=failed[1] + 1) is not None:
        walk.run_every_alone()
    return Observations(plan, walk.runs, walk.exercise())


def _max_delta(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max()) if a.numel() else 0.0


def _entry(
    setting: str, index: int, req: Request, rows: torch.Tensor, own: torch.Tensor | None, bar: Bar
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """One request's rows in one setting against the reference's (and, given `own`, its rows alone):
    the result entry, and its first failure (None: every row holds)."""
    ref = req.rows[: rows.shape[0]]
    cmp = compare_rows(ref, rows, bar.tol)
    bad = bar.bad(cmp)
    entry: dict[str, Any] = {
        "setting": setting,
        "request": index,
        "prompt_len": int(req.prompt.shape[0]),
        "rows": int(rows.shape[0]),
        "max_abs_delta_vs_reference": _max_delta(ref, rows),
        "rows_over_tolerance": int(cmp.over_tolerance.sum()),
        "ties": int(cmp.tie.sum()),
        "ok": not bool(bad.any()),
    }
    if own is not None:
        entry["max_abs_delta_vs_alone"] = _max_delta(own[: rows.shape[0]], rows)
        entry["argmax_same_as_alone"] = bool((own[: rows.shape[0]].argmax(-1) == rows.argmax(-1)).all())
    if entry["ok"]:
        return entry, None
    row = int(bad.nonzero()[0])
    return entry, {
        "setting": setting,
        "request": index,
        "prompt_len": entry["prompt_len"],
        "position": row,
        "reference_token": int(cmp.ref_top[row]),
        "candidate_token": int(cmp.cand_top[row]),
        "argmax_flip": not bool(cmp.agree[row]),
        "reference_margin": float(cmp.margin[row]),
        "tie_band": float(cmp.tolerance[row]),
        "max_abs_delta": float(cmp.max_abs_delta[row]),
        "reference_top_k": top_k_rows(ref[row][None], bar.top_k)[0],
        "candidate_top_k": top_k_rows(rows[row][None], bar.top_k)[0],
    }


@dataclass(frozen=True)
class Judgement:
    """Every request's entry per setting, in the order they ran; the failure reported; the observation."""

    results: list[dict[str, Any]]
    failure: dict[str, Any] | None
    observation: torch.Tensor | None


def judge(obs: Observations, bar: Bar, control: bool) -> Judgement:
    """Every run's rows against the reference's (pure). The failure reported is the first request
    that fails alone (then the bug is not in batching), else the first batched failure."""
    plan, results = obs.plan, []
    alone_rows: dict[int, torch.Tensor] = {}
    alone_failures: dict[int, dict[str, Any]] = {}
    batched: dict[str, Any] | None = None
    observed: dict[tuple[int, int], torch.Tensor] = {}
    for run in obs.runs:
        if isinstance(run, AloneRun):
            entry, found = _entry("alone", run.request, plan.everyone[run.request], run.rows, None, bar)
            alone_rows[run.request], observed[(0, run.request)] = run.rows, run.rows.flatten()
            results.append(entry)
            if found is not None:
                alone_failures.setdefault(run.request, found)
            continue
        name, side, rows_order = plan.settings[run.setting]
        group, offset = plan.group(run.setting)
        for slot, (i, rows) in enumerate(zip(rows_order, run.rows, strict=True)):
            if control and not rows.shape[0]:
                continue  # the setting stopped before this request ran
            observed[(1 + run.setting, slot)] = rows.flatten()
            where = f"joined {slot + 1} of {len(group)}" if side == "continuous" else f"row {slot}"
            own = alone_rows.get(offset + i)
            entry, found = _entry(f"{name} ({where})", offset + i, group[slot], rows, own, bar)
            results.append(entry)
            batched = batched or found
    failure = alone_failures[min(alone_failures)] if alone_failures else batched
    if control and failure is batched and batched is not None:
        failure = {**batched, "alone_holds_through": batched["position"]}
    # the observation is laid out in the positive run's order (alone, then each setting's rows), so a
    # control that walks the whole schedule in another order is compared with it piece by piece; a
    # control that stopped holds only the pieces it ran (a shorter observation)
    observation = torch.cat([observed[key] for key in sorted(observed)]) if observed else None
    return Judgement(results, failure, observation)


def _metrics(plan: Plan, params: BatchInvarianceParams, results: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "requests": len(plan.everyone),
        "lengths": plan.lengths,
        "equal_length": plan.equal,
        "steps": params.steps,
        "settings": [s for s, _, _ in plan.settings],
        "padding_sides": list(plan.sides),
        "max_abs_delta_vs_reference": max((r["max_abs_delta_vs_reference"] for r in results), default=0.0),
        "max_abs_delta_batched_vs_alone": max((r.get("max_abs_delta_vs_alone", 0.0) for r in results), default=0.0),
    }


def _evidence(candidate: DecodePath, plan: Plan, j: Judgement, bar: Bar) -> dict[str, Any]:
    evidence: dict[str, Any] = {"results": j.results, "tolerance": bar.tol.as_dict(), "bounded_claim": bar.bounded}
    if plan.continuous is None:
        evidence["continuous"] = (
            f"{candidate.name} does not batch continuously (gate.protocols.ContinuousBatching): "
            "no request joined or left a running batch"
        )
    if not plan.sides:
        evidence["padding"] = (
            f"{candidate.name} does not pad a batch of requests of different lengths "
            "(gate.protocols.BatchedSessions): judged on equal-length batches only"
        )
    if j.failure is not None:
        evidence["first_failure"] = j.failure
    return evidence


def explain(ctx: CheckContext, params: BatchInvarianceParams, bar: Bar, obs: Observations, j: Judgement) -> Outcome:
    """The Outcome of the judgement, built once."""
    metrics = _metrics(obs.plan, params, j.results)
    seen: dict[str, Any] = {
        "evidence": _evidence(ctx.candidate, obs.plan, j, bar),
        "exercise": obs.exercise,
        "observation": j.observation,
    }
    if j.failure is not None:
        return _failed(j.failure, metrics=metrics, **seen)
    over = sum(r["rows_over_tolerance"] for r in j.results)
    ties = sum(r["ties"] for r in j.results)
    sides, continuous = obs.plan.sides, obs.plan.continuous is not None
    coverage = ", ".join(["alone", *metrics["settings"]])
    message = (
        f"{len(obs.plan.everyone)} requests give the reference's greedy tokens alone and in every batch ({coverage})"
        + (f"; {over} row(s) beyond tolerance, {ties} tie(s)" if over or ties else ", logits within tolerance")
        + ("" if sides or continuous else "; this path does not pad, so only equal-length batches ran")
        + ("; this path does not pad" if continuous and not sides else "")
        + ("; it does not batch continuously" if sides and not continuous else "")
    )
    status: Literal["pass", "warn"] = "warn" if over or ties else "pass"
    metrics = {**metrics, "rows_over_tolerance": over, "ties": ties}
    return Outcome(status, message, metrics=metrics, tolerated_change=_tolerated_change(obs.plan, bar), **seen)


def _tolerated_change(plan: Plan, bar: Bar) -> float | None:
    """How far a correct path may move a row: its dtype's band x the deny allowance under a claim that
    bounds the logits, else inf (any move that keeps each greedy token passes)."""
    widest = max((float(bar.tol.row(r.rows).max()) for r in plan.everyone if r.rows.numel()), default=None)
    return None if widest is None else (widest * DENY_ALLOWANCE if bar.bounded else float("inf"))


BUG_BY_SETTING = (("alone", "uncertain"), ("equal-length", "batch-crosstalk"), ("continuous", "continuous-batching"))


def _failed(failure: dict[str, Any], **seen: Any) -> Outcome:
    bug = next((bug for prefix, bug in BUG_BY_SETTING if failure["setting"].startswith(prefix)), "padding")
    what = (
        "argmax"
        if failure["argmax_flip"]
        else f"|Δlogit| {failure['max_abs_delta']:.3g} (beyond {DENY_ALLOWANCE}x tolerance)"
    )
    alone_too = " (it fails alone too, so the bug is not in batching; greedy-parity and prefix-sweep localise it)"
    return Outcome(
        status="fail",
        message=f"request {failure['request']} (prompt {failure['prompt_len']}) {failure['setting']}: {what} "
        f"differs from the reference alone at position {failure['position']} (reference "
        f"{failure['reference_token']}, candidate {failure['candidate_token']}) ({bug})"
        + (alone_too if failure["setting"] == "alone" else ""),
        diagnosis={"bug_class": bug, "explanation": BUG_CLASSES[bug], "setting": failure["setting"]},
        detected_at=failure["position"],
        **seen,
    )


@check("batch-invariance", params=BatchInvarianceParams)
def batch_invariance(ctx: CheckContext, params: BatchInvarianceParams) -> Outcome:
    """The same requests alone, in an equal-length batch and in left- and right-padded batches give the same logits."""
    bar = Bar(tolerance_for(ctx, params.atol, params.rtol), bounds_logits(ctx), params.top_k)
    obs = measure(ctx, prepare(ctx, params), bar)
    return explain(ctx, params, bar, obs, judge(obs, bar, ctx.stop_at_first_failure))
