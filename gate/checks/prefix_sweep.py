"""`prefix-sweep`: cached-versus-full logits for the appended token over many prefix lengths.

Reference logits for every length come from ONE full pass over the longest sequence (causality
makes row L the answer for prefix L), computed once per run (ctx.cache) and shared with every
control. The candidate grows one session (gate.checks._sweep), so neither side redoes quadratic
work. Lengths (gate.checks._sweep.plan_sweep): the eight standard lengths (clipped), the first
edges ±1 and the last edge ±1 of every kind of layout boundary the candidate reports (block,
chunk, window, page), log-spaced lengths and a seeded sample of further edges, within
`max_lengths` in all; `exhaustive: true` visits every boundary ±1 (nightly). The evidence states
the coverage: edges visited per kind out of how many exist (`boundary_coverage`), and the plan
(`sweep_plan`). A control (ctx.stop_at_first_failure) stops at the first failing length.

`compare: full`: argmax agreement is load-bearing, flips within the reference's top-2 margin are
ties. Under a claim that bounds the logits (tolerance, exact) a length whose |Δlogit| exceeds the
documented allowance times its tolerance (gate.checks._compare.DENY_ALLOWANCE) fails too: the claim
said the logits stay within tolerance. Over tolerance but within the allowance, or under a
greedy-tokens claim, it is a warning.
`compare: cached` (exact claims): additionally the candidate's logits must be bit-identical to
the reference path running the *same* cached schedule. Exact against a full pass is never
claimed: a cached step and a full pass differ in the last bits on any correct engine (background: parity).
"""

from __future__ import annotations

from typing import Any, Literal

import torch

from gate.checks._compare import (
    DENY_ALLOWANCE,
    bits_equal,
    bounds_logits,
    compare_rows,
    random_tokens,
    thin,
    tolerance_for,
)
from gate.checks._coverage import prefix_sweep_coverage
from gate.checks._diagnosis import diagnose
from gate.checks._params import PrefixSweepParams
from gate.checks._sweep import cached_sweep, layout_edges, plan_sweep
from gate.core.check import CheckContext, Outcome, check
from gate.core.evidence import (
    Bitwise,
    Boundaries,
    SweepCoverage,
    SweepEvidence,
    SweepRow,
    SweepSeries,
    ToleranceRecord,
)
from gate.protocols import DecodePath


@check("prefix-sweep", params=PrefixSweepParams)
def prefix_sweep(ctx: CheckContext, params: PrefixSweepParams) -> Outcome:
    """Cached-versus-full logits of the appended token over many prefix lengths."""
    reference, candidate = ctx.reference, ctx.candidate
    if params.compare == "cached" and not reference.uses_cache:
        raise ValueError(
            f"compare: cached needs a cached reference path running the same shapes; {reference.name} is a "
            "full pass, and bit identity against a full pass is not an honest claim (background: parity): claim "
            "`tolerance` against it, or make the reference the old cached path"
        )
    reachable = min(reference.max_len - 1, candidate.max_len - 1)
    longest = min(params.longest or 1 << 30, reachable)
    # the same rule `gate plan` states before a run (gate.checks._coverage)
    coverage = SweepCoverage.model_validate(prefix_sweep_coverage(params.lengths, params.longest, reachable).as_dict())
    edges = layout_edges(candidate) if params.boundaries else {}
    bounds = sorted({b for kind in edges.values() for b in kind})
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
    planned = plan.lengths
    vocab = min(reference.vocab_size, candidate.vocab_size)
    tokens = ctx.cache.get(
        ("random-tokens", vocab, params.batch, longest + 1, ctx.seed),
        lambda: random_tokens(vocab, params.batch, longest + 1, ctx.seed),
    )
    tol = tolerance_for(ctx, params.atol, params.rtol)
    bounded = bounds_logits(ctx)
    ctx.log(
        f"  {len(planned)} lengths ({plan.summary()}), batch {params.batch}, compare {params.compare}"
        + (", stop at first failure" if ctx.stop_at_first_failure else "")
    )

    full_all = ctx.cache.get(("full-rows", reference, tokens, planned), lambda: _full_rows(reference, tokens, planned))
    ref_cached_all: torch.Tensor | None = None
    if params.compare == "cached":
        ref_cached_all = ctx.cache.get(
            ("cached-rows", reference, tokens, planned),
            lambda: cached_sweep(reference, tokens, planned, ctx.progress)[0],
        )

    def fails(i: int, row: torch.Tensor) -> bool:
        one = compare_rows(full_all[i : i + 1], row[None], tol)
        if bool(one.failed.any()) or (bounded and bool(one.beyond_allowance.any())):
            return True
        return ref_cached_all is not None and not bool(bits_equal(ref_cached_all[i : i + 1], row[None]).all())

    got, exercise = cached_sweep(
        candidate, tokens, planned, ctx.progress, until=fails if ctx.stop_at_first_failure else None
    )
    lengths = planned[: got.shape[0]]
    full = full_all[: len(lengths)]
    cmp = compare_rows(full, got, tol)

    bitwise: Bitwise | None = None
    bit_fail = torch.zeros(len(lengths), dtype=torch.bool)
    if ref_cached_all is not None:
        ref_cached = ref_cached_all[: len(lengths)]
        equal = bits_equal(ref_cached, got).all(dim=1)  # [N]
        bit_fail = ~equal
        bitwise = Bitwise(
            reference_path=reference.name,
            lengths_bit_identical=int(equal.sum()),
            lengths=len(lengths),
            max_abs_delta_vs_cached=float((ref_cached - got).abs().nan_to_num(float("inf")).max()),
        )

    argmax_failed = cmp.failed.any(dim=1)
    beyond = cmp.beyond_allowance.any(dim=1) if bounded else torch.zeros_like(argmax_failed)
    failed = argmax_failed | bit_fail | beyond  # [N]
    tie = cmp.tie.any(dim=1)
    over = cmp.over_tolerance.any(dim=1)
    delta = cmp.max_abs_delta.amax(dim=1)
    deviates = (argmax_failed | over).tolist()

    metrics: dict[str, Any] = {
        "compare": params.compare,
        "lengths": len(lengths),
        "lengths_planned": len(planned),
        "longest": planned[-1],
        "context": longest,
        "batch": params.batch,
        "argmax_agreement": round(float(cmp.agree.float().mean()), 6),
        "argmax_failures": int(argmax_failed.sum()),
        "ties": int(tie.sum()),
        "over_tolerance": int(over.sum()),
        "beyond_allowance": int(beyond.sum()),
        "deny_allowance": DENY_ALLOWANCE,
        "max_abs_delta": float(delta.max()),
        "atol": tol.atol,
        "rtol": tol.rtol,
    }
    if bitwise is not None:
        metrics["bit_identical"] = bool(not bit_fail.any())
    sweep_plan = plan.as_dict()
    if len(lengths) < len(planned):
        sweep_plan["stopped_at"] = lengths[-1]
    series, failures, ties = _rows(lengths, cmp, delta, argmax_failed | bit_fail | beyond, tie, params.evidence_rows)
    evidence = SweepEvidence(
        per_length=series,
        rows_total=len(lengths),
        rows_shown=len(series.length),
        failures=failures,
        ties=ties,
        tolerance=ToleranceRecord(**tol.as_dict()),
        boundaries=Boundaries(count=len(bounds), first=list(bounds[:8]), lengths=list(bounds[:512])),
        coverage=coverage,
        boundary_coverage=plan.coverage,  # per kind: edges up to the context, edges visited ±1
        sweep_plan=sweep_plan,
        bitwise=bitwise,
    ).dump()

    detected_at = lengths[int(failed.nonzero()[0])] if bool(failed.any()) else None
    diagnosis = None
    if detected_at is not None:
        if bitwise is not None and not bool(argmax_failed.any()) and not bool(over.any()):
            diagnosis = {
                "bug_class": "rounding-only",
                "profile": "bitwise",
                "explanation": "bits differ from the cached reference while every length agrees with "
                "the full pass within tolerance: consistent with different reduction shapes (claim "
                "tolerance), not with a cache bug that moves logits",
            }
        else:
            diagnosis = diagnose(
                lengths,
                deviates,
                delta.tolist(),
                reference=reference,
                candidate=candidate,
                tokens=tokens,
                dtype=ctx.dtype,
                flips=argmax_failed.tolist(),
                progressive=True,  # cached_sweep's one growing session: its chunks can be replayed
                tol=tol,
                seed=ctx.seed,
            )
        status: Literal["pass", "fail", "warn", "unproven"] = "fail"
        why = []
        if bool(argmax_failed.any()):
            why.append(f"argmax differs at {int(argmax_failed.sum())} of {len(lengths)} lengths")
        if bool(beyond.any()):
            why.append(
                f"|Δlogit| beyond {DENY_ALLOWANCE:g}x the {tol.source} tolerance at {int(beyond.sum())} of "
                f"{len(lengths)} lengths (max {float(delta.max()):.3g}; the claim bounds the logits)"
            )
        if bool(bit_fail.any()):
            why.append(f"bits differ from {reference.name} at {int(bit_fail.sum())} lengths")
        message = f"{'; '.join(why)}, first at prefix length {detected_at} ({diagnosis['bug_class']})"
    elif bool(tie.any()) or bool(over.any()):
        status = "warn"
        message = (
            f"argmax agrees at all {len(lengths)} lengths except {int(tie.sum())} tie(s); "
            f"{int(over.sum())} length(s) over tolerance, max |Δ| against the full pass {float(delta.max()):.3g}"
        )
    else:
        status = "pass"
        message = (
            f"argmax agrees at all {len(lengths)} lengths up to {lengths[-1]} ({plan.summary()} visited); "
            f"max |Δ| against the full pass {float(delta.max()):.3g}"
        )
        if bitwise is not None:
            message += f"; bit-identical to {reference.name} running the same cached schedule (|Δ| 0)"
    if status != "fail" and coverage.unreachable:
        status = "unproven"
        message = (
            f"the policy wants prefix lengths {coverage.unreachable} but the paths reach only "
            f"{reachable} (max_len); up to {longest}: {message}. Scope the claim with `longest`, or use a "
            "path that reaches them"
        )
    return Outcome(
        status=status,
        message=message,
        metrics=metrics,
        evidence=evidence,
        exercise=exercise,
        diagnosis=diagnosis,
        detected_at=detected_at,
        observation=got,
        # against a full pass, a correct path may move by its dtype's band (x the deny allowance under a
        # claim that bounds the logits); against the old cached layout every bit counts
        tolerated_change=_tolerated(cmp.tolerance, bounded) if ref_cached_all is None else None,
    )


def _tolerated(row_tol: torch.Tensor, bounded: bool) -> float | None:
    """The largest change of a row the check passes: its tolerance, x the deny allowance when bounded."""
    if not row_tol.numel():
        return None
    return float(row_tol.max()) * (DENY_ALLOWANCE if bounded else 1.0)


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
