"""prefix-sweep's body: measure the planned lengths on both sides, judge each length, explain."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch

from gate.checks._compare import (
    DENY_ALLOWANCE,
    RowComparison,
    Tolerance,
    bits_equal,
    bounds_logits,
    compare_rows,
    random_tokens,
    thin,
    tolerance_for,
)
from gate.checks._coverage import prefix_sweep_coverage
from gate.checks._diagnosis import diagnose
from gate.checks._sweep import SweepPlan, cached_sweep, layout_edges, plan_sweep
from gate.checks.prefix_sweep import PrefixSweepParams
from gate.checks.prefix_sweep.evidence import Bitwise, Boundaries, SweepCoverage, SweepEvidence, SweepRow, SweepSeries
from gate.core.check import CheckContext, Outcome, check
from gate.core.evidence import ToleranceRecord
from gate.protocols import DecodePath

Status = Literal["pass", "fail", "warn", "unproven"]


@dataclass(frozen=True)
class Observations:
    """What the sweep planned and what each side computed at the lengths it reached."""

    plan: SweepPlan
    coverage: SweepCoverage
    """The prefix lengths the policy wants and those the paths cannot reach."""
    bounds: list[int]
    """Every layout edge the candidate reports, sorted."""
    reachable: int
    longest: int
    tokens: torch.Tensor
    reference_name: str
    full: torch.Tensor
    """The full pass's rows at the lengths reached: [n, B, V]."""
    ref_cached: torch.Tensor | None
    """The reference's own cached schedule at those lengths (compare: cached), else None."""
    got: torch.Tensor
    """The candidate's rows: [n, B, V]."""
    exercise: dict[str, Any]

    @property
    def lengths(self) -> list[int]:
        """The lengths swept (a prefix of the plan's where a control stopped)."""
        return self.plan.lengths[: self.got.shape[0]]


@dataclass(frozen=True)
class Judgement:
    """Per length swept: the comparison with the full pass and what fails, ties or drifts."""

    cmp: RowComparison
    bitwise: Bitwise | None
    bit_fail: torch.Tensor
    """[n]: bits differ from the cached reference (compare: cached)."""
    argmax_failed: torch.Tensor
    beyond: torch.Tensor
    """[n]: |Δlogit| beyond the deny allowance under a claim that bounds the logits."""
    tie: torch.Tensor
    over: torch.Tensor
    delta: torch.Tensor
    """[n]: the largest |Δ| against the full pass over the batch."""

    @property
    def failed(self) -> torch.Tensor:
        return self.argmax_failed | self.bit_fail | self.beyond

    def detected_at(self, lengths: list[int]) -> int | None:
        """The first failing length, if any."""
        failed = self.failed
        return lengths[int(failed.nonzero()[0])] if bool(failed.any()) else None


def measure(ctx: CheckContext, params: PrefixSweepParams, tol: Tolerance, bounded: bool) -> Observations:
    """The full pass's rows (once per run, shared with the controls), the cached reference's (compare:
    cached) and the candidate's growing session over the planned lengths."""
    reference, candidate = ctx.reference, ctx.candidate
    reachable = min(reference.max_len - 1, candidate.max_len - 1)
    longest = min(params.longest or 1 << 30, reachable)
    # the same rule `gate plan` states before a run (gate.checks._coverage)
    coverage = SweepCoverage.model_validate(prefix_sweep_coverage(params.lengths, params.longest, reachable).as_dict())
    edges = layout_edges(candidate) if params.boundaries else {}
    plan = plan_sweep(
        longest,
        edges=edges,
        seed_lengths=params.lengths,
        log_count=params.log_spaced,
        first_edges=params.first_edges,
        sampled_edges=params.sampled_edges,
        cap=params.max_lengths,
        seed=ctx.seed,
        exhaustive=params.exhaustive,
        every_up_to=params.every_length_up_to,
        reach=params.reach,
    )
    bounds = sorted({b for kind in edges.values() for b in kind})
    planned = plan.lengths
    vocab = min(reference.vocab_size, candidate.vocab_size)
    tokens = ctx.cache.get(
        ("random-tokens", vocab, params.batch, longest + 1, ctx.seed),
        lambda: random_tokens(vocab, params.batch, longest + 1, ctx.seed),
    )
    ctx.log(
        f"  {len(planned)} lengths ({plan.summary()}), batch {params.batch}, compare {params.compare}"
        + (", stop at first failure" if ctx.stop_at_first_failure else "")
    )
    full = ctx.cache.get(("full-rows", reference, tokens, planned), lambda: _full_rows(reference, tokens, planned))
    ref_cached: torch.Tensor | None = None
    if params.compare == "cached":
        ref_cached = ctx.cache.get(
            ("cached-rows", reference, tokens, planned),
            lambda: cached_sweep(reference, tokens, planned, ctx.progress)[0],
        )

    def fails(i: int, row: torch.Tensor) -> bool:
        one = compare_rows(full[i : i + 1], row[None], tol)
        if bool(one.failed.any()) or (bounded and bool(one.beyond_allowance.any())):
            return True
        return ref_cached is not None and not bool(bits_equal(ref_cached[i : i + 1], row[None]).all())

    until = fails if ctx.stop_at_first_failure else None
    got, exercise = cached_sweep(candidate, tokens, planned, ctx.progress, until=until)
    n = got.shape[0]
    cached = ref_cached[:n] if ref_cached is not None else None
    return Observations(
        plan, coverage, bounds, reachable, longest, tokens, reference.name, full[:n], cached, got, exercise
    )


def judge(obs: Observations, tol: Tolerance, bounded: bool) -> Judgement:
    """Each length swept against the full pass and against the cached reference's bits (pure)."""
    cmp = compare_rows(obs.full, obs.got, tol)
    bitwise: Bitwise | None = None
    bit_fail = torch.zeros(len(obs.lengths), dtype=torch.bool)
    if obs.ref_cached is not None:
        equal = bits_equal(obs.ref_cached, obs.got).all(dim=1)  # [N]
        bit_fail = ~equal
        bitwise = Bitwise(
            reference_path=obs.reference_name,
            lengths_bit_identical=int(equal.sum()),
            lengths=len(obs.lengths),
            max_abs_delta_vs_cached=float((obs.ref_cached - obs.got).abs().nan_to_num(float("inf")).max()),
        )
    argmax_failed = cmp.failed.any(dim=1)
    beyond = cmp.beyond_allowance.any(dim=1) if bounded else torch.zeros_like(argmax_failed)
    tie, over = cmp.tie.any(dim=1), cmp.over_tolerance.any(dim=1)
    return Judgement(cmp, bitwise, bit_fail, argmax_failed, beyond, tie, over, cmp.max_abs_delta.amax(dim=1))


def _diagnose(ctx: CheckContext, obs: Observations, j: Judgement, tol: Tolerance) -> dict[str, Any]:
    """The bug class of a failing sweep: rounding only (bits differ, every length within tolerance),
    else gate.checks._diagnosis.diagnose's."""
    if j.bitwise is not None and not bool(j.argmax_failed.any()) and not bool(j.over.any()):
        return {
            "bug_class": "rounding-only",
            "profile": "bitwise",
            "explanation": "bits differ from the cached reference while every length agrees with "
            "the full pass within tolerance: consistent with different reduction shapes (claim "
            "tolerance), not with a cache bug that moves logits",
        }
    return diagnose(
        obs.lengths,
        (j.argmax_failed | j.over).tolist(),
        j.delta.tolist(),
        reference=ctx.reference,
        candidate=ctx.candidate,
        tokens=obs.tokens,
        dtype=ctx.dtype,
        flips=j.argmax_failed.tolist(),
        progressive=True,  # cached_sweep's one growing session: its chunks can be replayed
        tol=tol,
        seed=ctx.seed,
    )


def _metrics(params: PrefixSweepParams, obs: Observations, j: Judgement, tol: Tolerance) -> dict[str, Any]:
    metrics: dict[str, Any] = {
        "compare": params.compare,
        "lengths": len(obs.lengths),
        "lengths_planned": len(obs.plan.lengths),
        "longest": obs.plan.lengths[-1],
        "context": obs.longest,
        "batch": params.batch,
        "argmax_agreement": round(float(j.cmp.agree.float().mean()), 6),
        "argmax_failures": int(j.argmax_failed.sum()),
        "ties": int(j.tie.sum()),
        "over_tolerance": int(j.over.sum()),
        "beyond_allowance": int(j.beyond.sum()),
        "deny_allowance": DENY_ALLOWANCE,
        "max_abs_delta": float(j.delta.max()),
        "atol": tol.atol,
        "rtol": tol.rtol,
    }
    if j.bitwise is not None:
        metrics["bit_identical"] = bool(not j.bit_fail.any())
    return metrics


def _evidence(params: PrefixSweepParams, obs: Observations, j: Judgement, tol: Tolerance) -> dict[str, Any]:
    lengths, plan, bounds = obs.lengths, obs.plan, obs.bounds
    sweep_plan = plan.as_dict()
    if len(lengths) < len(plan.lengths):
        sweep_plan["stopped_at"] = lengths[-1]
    series, failures, ties = _rows(lengths, j.cmp, j.delta, j.failed, j.tie, params.evidence_rows)
    return SweepEvidence(
        per_length=series,
        rows_total=len(lengths),
        rows_shown=len(series.length),
        failures=failures,
        ties=ties,
        tolerance=ToleranceRecord(**tol.as_dict()),
        boundaries=Boundaries(count=len(bounds), first=list(bounds[:8]), lengths=list(bounds[:512])),
        coverage=obs.coverage,
        boundary_coverage=plan.coverage,  # per kind: edges up to the context, edges visited ±1
        sweep_plan=sweep_plan,
        bitwise=j.bitwise,
    ).dump()


def _failure_message(obs: Observations, j: Judgement, tol: Tolerance, detected_at: int, bug_class: str) -> str:
    n = len(obs.lengths)
    why = []
    if bool(j.argmax_failed.any()):
        why.append(f"argmax differs at {int(j.argmax_failed.sum())} of {n} lengths")
    if bool(j.beyond.any()):
        why.append(
            f"|Δlogit| beyond {DENY_ALLOWANCE:g}x the {tol.source} tolerance at {int(j.beyond.sum())} of "
            f"{n} lengths (max {float(j.delta.max()):.3g}; the claim bounds the logits)"
        )
    if bool(j.bit_fail.any()):
        why.append(f"bits differ from {obs.reference_name} at {int(j.bit_fail.sum())} lengths")
    return f"{'; '.join(why)}, first at prefix length {detected_at} ({bug_class})"


def _agreement(obs: Observations, j: Judgement) -> tuple[Status, str]:
    """A sweep without a failure: a warning for ties or lengths over tolerance, else a pass."""
    lengths, delta = obs.lengths, float(j.delta.max())
    if bool(j.tie.any()) or bool(j.over.any()):
        return "warn", (
            f"argmax agrees at all {len(lengths)} lengths except {int(j.tie.sum())} tie(s); "
            f"{int(j.over.sum())} length(s) over tolerance, max |Δ| against the full pass {delta:.3g}"
        )
    message = (
        f"argmax agrees at all {len(lengths)} lengths up to {lengths[-1]} ({obs.plan.summary()} visited); "
        f"max |Δ| against the full pass {delta:.3g}"
    )
    if j.bitwise is not None:
        message += f"; bit-identical to {obs.reference_name} running the same cached schedule (|Δ| 0)"
    return "pass", message


def _scoped(obs: Observations, status: Status, message: str) -> tuple[Status, str]:
    """A verdict short of failure is unproven where the policy wants lengths the paths cannot reach."""
    if status == "fail" or not obs.coverage.unreachable:
        return status, message
    return "unproven", (
        f"the policy wants prefix lengths {obs.coverage.unreachable} but the paths reach only "
        f"{obs.reachable} (max_len); up to {obs.longest}: {message}. Scope the claim with `longest`, or use a "
        "path that reaches them"
    )


def explain(
    params: PrefixSweepParams,
    tol: Tolerance,
    bounded: bool,
    obs: Observations,
    j: Judgement,
    diagnosis: dict[str, Any] | None,
) -> Outcome:
    """The Outcome of the judgement, built once."""
    detected_at = j.detected_at(obs.lengths)
    if detected_at is not None and diagnosis is not None:
        verdict: tuple[Status, str] = ("fail", _failure_message(obs, j, tol, detected_at, diagnosis["bug_class"]))
    else:
        verdict = _agreement(obs, j)
    status, message = _scoped(obs, *verdict)
    return Outcome(
        status=status,
        message=message,
        metrics=_metrics(params, obs, j, tol),
        evidence=_evidence(params, obs, j, tol),
        exercise=obs.exercise,
        diagnosis=diagnosis,
        detected_at=detected_at,
        observation=obs.got,
        # against a full pass, a correct path may move by its dtype's band (x the deny allowance under a
        # claim that bounds the logits); against the old cached layout every bit counts
        tolerated_change=float(j.cmp.tolerance.max()) * (DENY_ALLOWANCE if bounded else 1.0)
        if obs.ref_cached is None and j.cmp.tolerance.numel()
        else None,
    )


@check("prefix-sweep", params=PrefixSweepParams)
def prefix_sweep(ctx: CheckContext, params: PrefixSweepParams) -> Outcome:
    """Cached-versus-full logits of the appended token over many prefix lengths."""
    if params.compare == "cached" and not ctx.reference.uses_cache:
        raise ValueError(
            f"compare: cached needs a cached reference path running the same shapes; {ctx.reference.name} is a "
            "full pass, and bit identity against a full pass is not an honest claim (background: parity): claim "
            "`tolerance` against it, or make the reference the old cached path"
        )
    tol, bounded = tolerance_for(ctx, params.atol, params.rtol), bounds_logits(ctx)
    obs = measure(ctx, params, tol, bounded)
    j = judge(obs, tol, bounded)
    diagnosis = _diagnose(ctx, obs, j, tol) if j.detected_at(obs.lengths) is not None else None
    return explain(params, tol, bounded, obs, j, diagnosis)


def _full_rows(reference: DecodePath, tokens: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    """Row L of one full pass over the longest swept sequence, for each L: [N, B, V] float32."""
    with torch.no_grad():
        logits = reference.full_logits(tokens[:, : lengths[-1] + 1])
        return logits[:, torch.tensor(lengths)].transpose(0, 1).float().cpu()


def _rows(
    lengths: list[int], cmp: Any, delta: torch.Tensor, failed: torch.Tensor, tie: torch.Tensor, keep: int
) -> tuple[SweepSeries, list[SweepRow], list[SweepRow]]:
    """Per-length series (failures and ties first, then evenly spaced), the first failing rows and the first ties."""
    flagged = [i for i in range(len(lengths)) if bool(failed[i]) or bool(tie[i])]
    chosen = sorted(
        set(flagged[: keep // 2]) | set(thin(list(range(len(lengths))), keep - min(len(flagged), keep // 2)))
    )
    failures = [
        SweepRow(
            length=lengths[n],
            row=b,
            reference_token=int(cmp.ref_top[n, b]),
            candidate_token=int(cmp.cand_top[n, b]),
            margin=float(cmp.margin[n, b]),
            max_abs_delta=float(cmp.max_abs_delta[n, b]),
        )
        for n in [i for i in range(len(lengths)) if bool(failed[i])][:16]
        for b in range(cmp.agree.shape[1])
        if bool(cmp.failed[n, b]) or not bool(cmp.agree[n, b])
    ]
    ties = [
        SweepRow(length=lengths[n], row=b, margin=float(cmp.margin[n, b]), tolerance=float(cmp.tolerance[n, b]))
        for n, b in cmp.tie.nonzero().tolist()[:16]
    ]
    series = SweepSeries(
        length=[lengths[i] for i in chosen],
        max_abs_delta=[float(delta[i]) for i in chosen],
        argmax_agree=[bool(cmp.agree[i].all()) for i in chosen],
        tie=[bool(tie[i]) for i in chosen],
        min_margin=[float(cmp.margin[i].min()) for i in chosen],
    )
    return series, failures, ties
