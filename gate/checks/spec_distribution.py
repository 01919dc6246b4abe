"""spec-distribution: speculative sampling keeps the target's output distribution.

Greedy equality is no evidence for sampling: a sampler with the wrong acceptance ratio or residual
keeps greedy output and changes the distribution. So the check enumerates the target's exact joint
distribution over the next `horizon` tokens of one seeded prompt (temperature and top-k keep it to
at most top_k^horizon cells), draws n seeded continuations through the candidate's speculative
sampler, and applies a G-test at the claim's alpha. The horizon must exceed the draft length k, or
bugs in the bonus token (drawn at position k + 1) cannot show.

n comes from the declared power: for every fault in `power_against`, the exact distribution that
fault would produce with this target and draft is enumerated too, and n is the smallest sample size
at which the test rejects it with the declared power (non-central χ²), never below `min_samples`.
A configuration in which the draft is never rejected (a draft identical to the target) exercises
nothing: it fails, whatever the test says.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from typing import Any

import numpy as np
import torch

from gate._util.numbers import significant
from gate.checks._params import (
    SpecDistributionParams,
)
from gate.checks._spec import efficiency_note, sampling_generator, seeded_prompts, speculative_candidate
from gate.core.check import CheckContext, Outcome, check
from gate.core.evidence import DistributionEvidence
from gate.core.manifest import DistributionClaim
from gate.protocols import SpeculativePath
from gate.speculative.gof import g_test, power, required_samples
from gate.speculative.law import Law, NextTokenTable, Seq, sampler_law, target_law
from gate.speculative.sampler import CORRECT, FAULTS, SpecStats, apply_fault, warp

MAX_EVIDENCE_CELLS = 300
NEAR_TIE = 1e-4
"""A k-th/(k+1)-th logit gap (after temperature) below this makes top-k membership numerically fragile."""


def _table(fn: Any, prompt: torch.Tensor, temperature: float, top_k: int) -> NextTokenTable:
    return NextTokenTable(lambda c: fn(c, temperature=temperature, top_k=top_k), prompt)


def _reference_probs(ctx: CheckContext, temperature: float, top_k: int, gaps: list[float]) -> Any:
    """The reference (the target alone) defines correct; also record the top-k boundary gap."""

    def probs(contexts: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            logits = ctx.reference.full_logits(contexts)[:, -1].double()
        top = (logits / temperature).topk(min(top_k + 1, logits.shape[-1]), dim=-1).values
        if top.shape[-1] > top_k:
            gaps.append(float((top[:, top_k - 1] - top[:, top_k]).min()))
        return warp(logits, temperature, top_k)

    return probs


def _alternatives(
    spec: SpeculativePath, prompt: torch.Tensor, p: SpecDistributionParams, k: int, horizon: int
) -> dict[str, Law] | None:
    """The exact law each sampler fault would produce with the candidate's target and draft."""
    try:
        target = _table(spec.target_next_token_probs, prompt, p.temperature, p.top_k)
        draft = _table(spec.draft_next_token_probs, prompt, p.temperature, p.top_k)
        return {f: sampler_law(target, draft, apply_fault(CORRECT, f), k, horizon) for f in FAULTS}
    except NotImplementedError:
        return None


def _sample_size(
    p0: np.ndarray, alts: dict[str, np.ndarray], p: SpecDistributionParams, alpha: float, target_power: float
) -> tuple[int, dict[str, int | None]]:
    needed = {
        f: required_samples(p0, alts[f], alpha, target_power, p.max_samples, 10) for f in p.power_against if f in alts
    }
    sizes = [n for n in needed.values() if n is not None]
    return min(p.max_samples, max([p.min_samples, *sizes])), needed


def _draw(
    spec: SpeculativePath, prompt: torch.Tensor, n: int, horizon: int, p: SpecDistributionParams, ctx: CheckContext
) -> tuple[torch.Tensor, SpecStats, float]:
    gen = sampling_generator(ctx.seed, ctx.device)
    parts, stats = [], SpecStats(k=spec.num_draft_tokens)
    started = time.perf_counter()
    for start in range(0, n, p.batch_size):
        b = min(p.batch_size, n - start)
        out = spec.sample(prompt.expand(b, -1), horizon, temperature=p.temperature, top_k=p.top_k, generator=gen)
        parts.append(out.tokens.cpu())
        stats = stats.add(out.stats)
        ctx.progress("samples drawn", start + b, n)
    return torch.cat(parts), stats, time.perf_counter() - started


def _count(tokens: torch.Tensor, index: dict[Seq, int]) -> tuple[np.ndarray, int, list[Seq]]:
    """Counts per cell, the count outside every enumerated cell, and a few of those sequences."""
    observed = np.zeros(len(index))
    other, strays = 0, []
    seqs, counts = torch.unique(tokens, dim=0, return_counts=True)
    for seq, c in zip(map(tuple, seqs.tolist()), counts.tolist(), strict=True):
        if seq in index:
            observed[index[seq]] += c
        else:
            other += c
            strays.append(seq)
    return observed, other, strays[:5]


def _by_depth(cells: list[Seq], observed: np.ndarray, other: int, p0: np.ndarray, horizon: int) -> list[dict[str, Any]]:
    """The same test on the first t tokens, t = 1..horizon: where the distribution first departs."""
    rows = []
    for t in range(1, horizon + 1):
        o: dict[Seq, float] = defaultdict(float)
        e: dict[Seq, float] = defaultdict(float)
        for cell, oc, pc in zip(cells, observed, p0, strict=True):
            o[cell[:t]] += oc
            e[cell[:t]] += pc
        keys = sorted(set(o) | set(e))
        test = g_test([*(o[c] for c in keys), other], [*(e[c] for c in keys), 0.0])
        rows.append({"tokens": t, "statistic": _finite(test.statistic), "dof": test.dof, "p_value": test.p_value})
    return rows


def _label(seq: Seq) -> str:
    return " ".join(map(str, seq))


def _bounded_table(cells: list[Seq], observed: np.ndarray, expected: np.ndarray, other: int) -> dict[str, list[Any]]:
    """Observed and expected counts for the dossier, at most MAX_EVIDENCE_CELLS rows."""
    order = list(range(len(cells)))
    rest_o = rest_e = 0.0
    if len(order) > MAX_EVIDENCE_CELLS - 2:
        order.sort(key=lambda i: -(expected[i] + observed[i]))
        kept, dropped = order[: MAX_EVIDENCE_CELLS - 2], order[MAX_EVIDENCE_CELLS - 2 :]
        rest_o, rest_e = float(observed[dropped].sum()), float(expected[dropped].sum())
        order = sorted(kept)
    table: dict[str, list[Any]] = {
        "categories": [_label(cells[i]) for i in order],
        "observed": [int(observed[i]) for i in order],
        "expected": [round(float(expected[i]), 3) for i in order],
    }
    for name, o, e in (("(rest)", rest_o, rest_e), ("(outside enumeration)", float(other), 0.0)):
        if o or e:
            table["categories"].append(name)
            table["observed"].append(int(o))
            table["expected"].append(round(e, 3))
    return table


@check("spec-distribution", params=SpecDistributionParams)
def spec_distribution(ctx: CheckContext, p: SpecDistributionParams) -> Outcome:
    """Sampled continuations through the speculative path follow the target's exact joint distribution."""
    spec = speculative_candidate(ctx)
    k = spec.num_draft_tokens
    horizon = p.horizon or k + 1
    if horizon < k + 1:
        raise ValueError(f"horizon {horizon} must exceed the draft length k={k}: the bonus token is at k + 1")
    if p.top_k**horizon > p.max_cells:
        raise ValueError(f"top_k^horizon = {p.top_k**horizon} cells exceeds max_cells {p.max_cells}")
    claim = ctx.manifest.claim
    alpha, target_power = (claim.alpha, claim.power) if isinstance(claim, DistributionClaim) else (0.01, 0.9)
    prompt = seeded_prompts(ctx.reference.vocab_size, 1, p.prompt_len, ctx.seed, ctx.device)[0]

    # the null: the reference target's exact joint law; the alternatives: each fault's exact law
    def null_law() -> tuple[Law, list[float]]:
        gaps: list[float] = []
        return target_law(NextTokenTable(_reference_probs(ctx, p.temperature, p.top_k, gaps), prompt), horizon), gaps

    # the reference side is the same for every control: enumerated once per run
    law0, gaps = ctx.cache.get(("spec-null-law", ctx.reference, prompt, p.temperature, p.top_k, horizon), null_law)
    ctx.log(f"    enumerated {len(law0)} continuations of {horizon} tokens (k={k})")
    alt_laws = _alternatives(spec, prompt, p, k, horizon)
    cells = sorted(set(law0).union(*(alt_laws or {}).values()), key=lambda c: (-law0.get(c, 0.0), c))
    index = {c: i for i, c in enumerate(cells)}
    p0 = np.array([law0.get(c, 0.0) for c in cells])
    alts = {f: np.array([law.get(c, 0.0) for c in cells]) for f, law in (alt_laws or {}).items()}
    n, needed = _sample_size(p0, alts, p, alpha, target_power)

    tokens, stats, seconds = _draw(spec, prompt, n, horizon, p, ctx)
    observed, other, strays = _count(tokens, index)
    test = g_test([*observed, other], [*p0, 0.0])
    powers = {f: round(power(p0, a, n, alpha), 6) for f, a in alts.items()}
    depth = _by_depth(cells, observed, other, p0, horizon)

    efficiency = {
        "acceptance_rate": round(stats.acceptance_rate, 6),
        "tokens_per_target_pass": round(stats.tokens_per_target_pass, 6),
        "samples_per_second": round(n / seconds, 1) if seconds > 0 else None,
    }
    exercise = {**stats.as_dict(), "n_samples": n, "cells": len(law0), "path": ctx.candidate.name}
    metrics: dict[str, Any] = {
        "statistic": _finite(test.statistic),
        "p_value": test.p_value,
        "dof": test.dof,
        "alpha": alpha,
        "k": k,
        "horizon": horizon,
        "n_samples": n,
        "impossible_samples": test.impossible,
        **efficiency,
        "min_power": min((powers[f] for f in p.power_against if f in powers), default=None),
    }
    evidence = DistributionEvidence(
        **_bounded_table(cells, observed, n * p0, other),
        statistic=test.statistic,
        p_value=test.p_value,
        dof=test.dof,
        pooled_cells=test.pooled_cells,
        alpha=alpha,
        declared_power=target_power,
        power=powers,
        samples_needed=needed,
        k=k,
        horizon=horizon,
        n_samples=n,
        temperature=p.temperature,
        top_k=p.top_k,
        prompt=prompt.tolist(),
        by_depth=depth,
        efficiency={**efficiency, **stats.as_dict()},
        min_top_k_gap=min(gaps) if gaps else None,
        outside_enumeration_examples=[list(s) for s in strays],
        power_note=None if alt_laws is not None else "the candidate gives no draft probabilities: power not computed",
    ).dump()
    observation = torch.tensor([*observed, other], dtype=torch.float64)
    where = f"k={k}, horizon={horizon} tokens, n={n}"

    problems = []
    if test.p_value < alpha:
        detail = (
            f"{test.impossible} samples the target gives probability 0"
            if test.impossible
            else f"G={test.statistic:.1f}, dof={test.dof}, p={test.p_value:.3g}"
        )
        problems.append(f"sampled continuations depart from the target's distribution ({detail}; {where})")
        if test.impossible and gaps and min(gaps) < NEAR_TIE:
            problems.append(
                f"note: the top-{p.top_k} boundary has a near-tie (logit gap {min(gaps):.2g}), so "
                "numerical differences between batch shapes could also put samples outside the support"
            )
    if stats.rejections < p.min_rejections:
        problems.append(
            f"exercises nothing: {stats.rejections} of {stats.target_passes} rounds rejected a draft "
            f"(acceptance {stats.acceptance_rate:.4f}), so the residual path never ran (a draft identical to "
            "the target, or verification that accepts everything)"
        )
    weak = {f: powers[f] for f in p.power_against if f in powers and powers[f] < target_power}
    if weak:
        problems.append(
            "underpowered: at n="
            + str(n)
            + " the test's power against "
            + ", ".join(f"{f} is {v:.3f}" for f, v in weak.items())
            + f" < declared {target_power}: with this draft the fault leaves the distribution (nearly) unchanged"
        )
    if problems:
        first = next((r["tokens"] for r in depth if r["p_value"] < alpha), None)
        return Outcome(
            "fail", "; ".join(problems), metrics, evidence, exercise, detected_at=first, observation=observation
        )
    shown = ", ".join(f"{f} {powers[f]:.2f}" for f in p.power_against if f in powers)
    return Outcome(
        "pass",
        f"continuations match the target's exact joint distribution ({where}): "
        f"G={test.statistic:.1f}, dof={test.dof}, p={significant(test.p_value)} at alpha={alpha}; "
        f"power {shown or 'not computed'}; acceptance {stats.acceptance_rate:.3f}, "
        f"{stats.tokens_per_target_pass:.2f} tokens per target pass{efficiency_note(stats)}",
        metrics,
        evidence,
        exercise,
        observation=observation,
    )


def _finite(x: float) -> float | str:
    return x if math.isfinite(x) else "inf"
