"""spec-distribution's body: measure seeded samples at the looks of a fixed design, judge them by
the G-test and the design's power, explain."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from gate._util.numbers import significant
from gate.checks._spec import efficiency_note, seeded_prompts, speculative_candidate
from gate.checks._spec_design import Design, LookPlan, control_looks, shared_design
from gate.checks.spec_distribution import SpecDistributionParams
from gate.checks.spec_distribution.cells import Sampler, bounded_table, by_depth, finite, walk
from gate.checks.spec_distribution.evidence import DistributionEvidence, Look, SequentialDesign
from gate.core.check import CheckContext, Outcome, check
from gate.core.manifest import DistributionClaim
from gate.protocols import SpeculativePath
from gate.speculative.gof import GTest, power, required_samples
from gate.speculative.law import Seq
from gate.speculative.sampler import SpecStats

NEAR_TIE = 1e-4
"""A k-th/(k+1)-th logit gap (after temperature) below this makes top-k membership numerically fragile."""
Status = Literal["pass", "fail", "unproven"]


@dataclass(frozen=True)
class Observations:
    """The design fixed before sampling, the looks taken, the last look's counts and test."""

    prompt: torch.Tensor
    k: int
    horizon: int
    alpha: float
    """The claim's alpha (the whole sequence of looks holds it)."""
    target_power: float
    design: Design
    looks: LookPlan
    history: list[Look]
    """Every look taken, the pilot's included."""
    observed: np.ndarray
    """The last look's counts per enumerated cell."""
    other: int
    """The last look's samples outside every enumerated cell."""
    strays: list[Seq]
    """A few of those."""
    test: GTest
    n: int
    stats: SpecStats
    seconds: float
    """test, samples and seconds spent sampling: the last look's."""

    @property
    def rejected(self) -> bool:
        """Whether the last look rejects the target's law at the per-look level."""
        return self.test.p_value < self.looks.alpha


@dataclass(frozen=True)
class Judgement:
    """The power reached against each fault, and what is wrong or unproven."""

    powers: dict[str, float]
    """Fault -> power of the test at the samples drawn and the per-look level."""
    depth: list[dict[str, Any]]
    """The same test on the first t tokens, t = 1..horizon."""
    problems: list[str]
    weak: dict[str, float]
    """Required faults whose power falls short of the declared one."""
    detected_at: int | None
    """The first depth that departs at alpha, where the check fails."""


def _horizon(p: SpecDistributionParams, k: int) -> int:
    """Tokens per continuation: past the draft length, within the enumeration's bound."""
    horizon = p.horizon or k + 1
    if horizon < k + 1:
        raise ValueError(f"horizon {horizon} must exceed the draft length k={k}: the bonus token is at k + 1")
    if p.top_k**horizon > p.max_cells:
        raise ValueError(f"top_k^horizon = {p.top_k**horizon} cells exceeds max_cells {p.max_cells}")
    return horizon


def measure(ctx: CheckContext, p: SpecDistributionParams, spec: SpeculativePath) -> Observations:
    """The design (once per run), then seeded samples at each look until one rejects or the looks end."""
    k = spec.num_draft_tokens
    horizon = _horizon(p, k)
    claim = ctx.manifest.claim
    alpha, target_power = (claim.alpha, claim.power) if isinstance(claim, DistributionClaim) else (0.01, 0.9)
    prompt = seeded_prompts(ctx.reference.vocab_size, 1, p.prompt_len, ctx.seed, ctx.device)[0]

    # the null (the reference target's exact joint law), each fault's exact law, the looks: once per run
    design = shared_design(ctx, spec, prompt, p, horizon, alpha, target_power)
    ctx.log(f"    enumerated {len(design.law0)} continuations of {horizon} tokens (k={k})")
    looks = control_looks(ctx, design, p, alpha, target_power)
    pilot = f"a pilot of {looks.pilot}, then " if looks.pilot else ""
    ctx.log(f"    sequential test: looks at {pilot}n = {looks.sizes}, each at alpha {looks.alpha:.3g}")

    history: list[Look] = []
    # a control's pilot draws its own samples; the planned looks then draw afresh from the run's
    # seed, exactly what a positive run draws (so an unchanged sampler gives the same observation)
    for sizes in ([looks.pilot], looks.sizes) if looks.pilot else (looks.sizes,):
        sampler = Sampler(spec, prompt, horizon, p, ctx)
        observed, other, strays, test = walk(sampler, sizes, looks.alpha, design.index, design.p0, history)
        if test.p_value < looks.alpha:
            break
    fixed = (prompt, k, horizon, alpha, target_power, design, looks, history)
    return Observations(*fixed, observed, other, strays, test, sampler.n, sampler.stats, sampler.seconds)


def _where(obs: Observations) -> str:
    """The setting of the last look, for the message."""
    looks = obs.looks
    return f"k={obs.k}, horizon={obs.horizon} tokens, n={obs.n}" + (
        f", look {len(obs.history)} of {looks.count} at alpha {looks.alpha:.3g}" if looks.count > 1 else ""
    )


def judge(p: SpecDistributionParams, obs: Observations) -> Judgement:
    """The departures found and the power reached (pure)."""
    design, test, stats = obs.design, obs.test, obs.stats
    powers = {f: round(power(design.p0, a, obs.n, obs.looks.alpha), 6) for f, a in design.alts.items()}
    depth = by_depth(design.cells, obs.observed, obs.other, design.p0, obs.horizon)
    problems = []
    if obs.rejected:
        detail = (
            f"{test.impossible} samples the target gives probability 0"
            if test.impossible
            else f"G={test.statistic:.1f}, dof={test.dof}, p={test.p_value:.3g}"
        )
        problems.append(f"sampled continuations depart from the target's distribution ({detail}; {_where(obs)})")
        if test.impossible and design.gaps and min(design.gaps) < NEAR_TIE:
            problems.append(
                f"note: the top-{p.top_k} boundary has a near-tie (logit gap {min(design.gaps):.2g}), so "
                "numerical differences between batch shapes could also put samples outside the support"
            )
    if stats.rejections < p.min_rejections:
        problems.append(
            f"exercises nothing: {stats.rejections} of {stats.target_passes} rounds rejected a draft "
            f"(acceptance {stats.acceptance_rate:.4f}), so the residual path never ran (a draft identical to "
            "the target, or verification that accepts everything)"
        )
    first = next((r["tokens"] for r in depth if r["p_value"] < obs.alpha), None) if problems else None
    weak = {f: powers[f] for f in design.required if powers[f] < obs.target_power}
    return Judgement(powers, depth, problems, weak, first)


def _verdict(p: SpecDistributionParams, obs: Observations, j: Judgement) -> tuple[Status, str]:
    """The status and its message: the problems, the power the budget cannot show, or the match."""
    if j.problems:
        return "fail", "; ".join(j.problems)
    unobservable, test, stats = obs.design.unobservable, obs.test, obs.stats
    unseen = (
        "; unobservable with this draft: " + ", ".join(f"{f} ({why})" for f, why in unobservable.items())
        if unobservable
        else ""
    )
    if j.weak:
        return "unproven", (
            f"no departure from the target's distribution ({_where(obs)}), but the budget of {p.max_samples} "
            "samples cannot show the declared power: against "
            + ", ".join(
                f"{f} {v:.3f} (needs {obs.looks.needed.get(f) or f'more than {p.max_samples}'})"
                for f, v in j.weak.items()
            )
            + f" < {obs.target_power} with this draft; raise max_samples, or use a draft that makes the fault visible"
            + unseen
        )
    shown = ", ".join(f"{f} {j.powers[f]:.2f}" for f in obs.design.required)
    return "pass", (
        f"continuations match the target's exact joint distribution ({_where(obs)}): "
        f"G={test.statistic:.1f}, dof={test.dof}, p={significant(test.p_value)} at alpha={obs.alpha}; "
        f"power {shown or 'not computed'}; acceptance {stats.acceptance_rate:.3f}, "
        f"{stats.tokens_per_target_pass:.2f} tokens per target pass{efficiency_note(stats)}{unseen}"
    )


def _efficiency(obs: Observations) -> dict[str, Any]:
    stats, n, seconds = obs.stats, obs.n, obs.seconds
    return {
        "acceptance_rate": round(stats.acceptance_rate, 6),
        "tokens_per_target_pass": round(stats.tokens_per_target_pass, 6),
        "samples_per_second": round(n / seconds, 1) if seconds > 0 else None,
    }


def _metrics(obs: Observations, j: Judgement) -> dict[str, Any]:
    test = obs.test
    return {
        "statistic": finite(test.statistic),
        "p_value": test.p_value,
        "dof": test.dof,
        "alpha": obs.alpha,
        "alpha_per_look": obs.looks.alpha,
        "looks": len(obs.history),
        "k": obs.k,
        "horizon": obs.horizon,
        "n_samples": obs.n,
        "impossible_samples": test.impossible,
        **_efficiency(obs),
        "min_power": min((j.powers[f] for f in obs.design.required), default=None),
    }


def _evidence(p: SpecDistributionParams, obs: Observations, j: Judgement) -> dict[str, Any]:
    design, looks, test, n = obs.design, obs.looks, obs.test, obs.n
    return DistributionEvidence(
        **bounded_table(design.cells, obs.observed, n * design.p0, obs.other),
        statistic=test.statistic,
        p_value=test.p_value,
        dof=test.dof,
        pooled_cells=test.pooled_cells,
        alpha=obs.alpha,
        declared_power=obs.target_power,
        power=j.powers,
        samples_needed=looks.needed,
        sequential=SequentialDesign(
            method="Bonferroni over a schedule of looks fixed before sampling (sizes doubling from "
            "min_samples to the budget max_samples); stops at the first rejection or at the first look "
            "with the declared power against every observable fault; a negative control may look first "
            "at a pilot sized for its fault, its own samples, every look then at alpha / (looks + 1)",
            planned_looks=looks.sizes,
            pilot=looks.pilot,
            alpha_per_look=looks.alpha,
            budget=p.max_samples,
            reaches_power=looks.reaches_power,
            history=obs.history,
        ),
        unobservable=design.unobservable,
        k=obs.k,
        horizon=obs.horizon,
        n_samples=n,
        temperature=p.temperature,
        top_k=p.top_k,
        prompt=obs.prompt.tolist(),
        by_depth=j.depth,
        efficiency={**_efficiency(obs), **obs.stats.as_dict()},
        min_top_k_gap=min(design.gaps) if design.gaps else None,
        outside_enumeration_examples=[list(s) for s in obs.strays],
        power_note=None if design.enumerated else "the candidate gives no draft probabilities: power not computed",
    ).dump()


def explain(ctx: CheckContext, p: SpecDistributionParams, obs: Observations, j: Judgement) -> Outcome:
    """The Outcome of the judgement, built once: fail, unproven (power short of the declared) or pass."""
    status, message = _verdict(p, obs, j)
    exercise = {**obs.stats.as_dict(), "n_samples": obs.n, "cells": len(obs.design.law0), "path": ctx.candidate.name}
    return Outcome(
        status,
        message,
        _metrics(obs, j),
        _evidence(p, obs, j),
        exercise,
        detected_at=j.detected_at,
        observation=torch.tensor([*obs.observed, obs.other], dtype=torch.float64),
        underpowered=underpowered(p, obs, j),
    )


FAR_BUDGET = 1000
"""How many times the budget `underpowered` searches for the samples a fault needs."""


def underpowered(p: SpecDistributionParams, obs: Observations, j: Judgement) -> dict[str, str]:
    """The faults of power_against this draft and budget cannot show with the declared power -> the
    settings that would: more samples (how many, within FAR_BUDGET budgets) or a draft accepted more often."""
    design, acceptance = obs.design, obs.stats.acceptance_rate
    draft = f"a draft accepted more often than this run's {acceptance:.3f}"
    out = {
        f: f"no sample size can show it with this draft ({why}); use {draft}" for f, why in design.unobservable.items()
    }
    for f, reached in j.weak.items():
        n = required_samples(
            design.p0, design.alts[f], obs.looks.alpha, obs.target_power, FAR_BUDGET * p.max_samples, p.max_samples
        )
        samples = f"raise max_samples to about {n}" if n else f"raise max_samples beyond {FAR_BUDGET * p.max_samples}"
        out[f] = f"power {reached:.3f} < {obs.target_power} at {obs.n} samples: {samples}, or use {draft}"
    return out


@check("spec-distribution", params=SpecDistributionParams)
def spec_distribution(ctx: CheckContext, p: SpecDistributionParams) -> Outcome:
    """Sampled continuations through the speculative path follow the target's exact joint distribution."""
    spec = speculative_candidate(ctx)
    obs = measure(ctx, p, spec)
    return explain(ctx, p, obs, judge(p, obs))
