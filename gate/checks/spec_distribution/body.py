"""spec-distribution's body: measure seeded samples at the looks of a fixed design (counted per enumerated
cell), judge them by the G-test and the design's power, explain."""

from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from gate._util.numbers import significant
from gate.checks._spec import efficiency_note, sampling_generator, seeded_prompts, speculative_candidate
from gate.checks._spec_design import Design, LookPlan, control_looks, shared_design
from gate.checks.spec_distribution import SpecDistributionParams
from gate.checks.spec_distribution.evidence import DistributionEvidence, Look, SequentialDesign
from gate.core.check import CheckContext, Outcome, check
from gate.core.manifest import DistributionClaim
from gate.protocols import SpeculativePath
from gate.speculative.gof import GTest, g_test, power, required_samples
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
    """Every look taken, the pilot's included (the fields below: the last look's)."""
    observed: np.ndarray
    """Counts per enumerated cell."""
    other: int
    """Samples outside every enumerated cell, and a few of them (`strays`)."""
    strays: list[Seq]
    test: GTest
    n: int
    stats: SpecStats
    seconds: float

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


# --- cells: continuations drawn in increments, counted per enumerated cell, tested by depth, tabled ---


MAX_EVIDENCE_CELLS = 300


class Sampler:
    """Seeded continuations through the candidate, drawn in increments (one generator throughout)."""

    def __init__(
        self, spec: SpeculativePath, prompt: torch.Tensor, horizon: int, p: SpecDistributionParams, ctx: CheckContext
    ) -> None:
        self.spec, self.prompt, self.horizon, self.p, self.ctx = spec, prompt, horizon, p, ctx
        self.gen = sampling_generator(ctx.seed, ctx.device)
        self.parts: list[torch.Tensor] = []
        self.stats = SpecStats(k=spec.num_draft_tokens)
        self.n, self.seconds = 0, 0.0

    def draw_to(self, n: int, budget: int) -> torch.Tensor:
        """Draw until `n` continuations exist; all of them, [n, horizon]."""
        started = time.perf_counter()
        while self.n < n:
            b = min(self.p.batch_size, n - self.n)
            out = self.spec.sample(
                self.prompt.expand(b, -1),
                self.horizon,
                temperature=self.p.temperature,
                top_k=self.p.top_k,
                generator=self.gen,
            )
            self.parts.append(out.tokens.cpu())
            self.stats = self.stats.add(out.stats)
            self.n += b
            self.ctx.progress("samples drawn", self.n, budget)
        self.seconds += time.perf_counter() - started
        return torch.cat(self.parts)


def walk(
    sampler: Sampler, sizes: list[int], level: float, index: dict[Seq, int], p0: np.ndarray, history: list[Look]
) -> tuple[np.ndarray, int, list[Seq], GTest]:
    """Look at each cumulative size in turn until one rejects at `level`: the last look's counts and test."""
    for n_look in sizes:
        tokens = sampler.draw_to(n_look, sizes[-1])
        observed, other, strays = count(tokens, index)
        test = g_test([*observed, other], [*p0, 0.0])
        history.append(Look(n=n_look, statistic=test.statistic, dof=test.dof, p_value=test.p_value))
        if test.p_value < level:
            break  # rejected: the sequence stops at its first rejection (a control at its first detection)
    return observed, other, strays, test


def count(tokens: torch.Tensor, index: dict[Seq, int]) -> tuple[np.ndarray, int, list[Seq]]:
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


def by_depth(cells: list[Seq], observed: np.ndarray, other: int, p0: np.ndarray, horizon: int) -> list[dict[str, Any]]:
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
        rows.append({"tokens": t, "statistic": finite(test.statistic), "dof": test.dof, "p_value": test.p_value})
    return rows


def bounded_table(cells: list[Seq], observed: np.ndarray, expected: np.ndarray, other: int) -> dict[str, list[Any]]:
    """Observed and expected counts for the dossier, at most MAX_EVIDENCE_CELLS rows."""
    order = list(range(len(cells)))
    rest_o = rest_e = 0.0
    if len(order) > MAX_EVIDENCE_CELLS - 2:
        order.sort(key=lambda i: -(expected[i] + observed[i]))
        kept, dropped = order[: MAX_EVIDENCE_CELLS - 2], order[MAX_EVIDENCE_CELLS - 2 :]
        rest_o, rest_e = float(observed[dropped].sum()), float(expected[dropped].sum())
        order = sorted(kept)
    table: dict[str, list[Any]] = {
        "categories": [" ".join(map(str, cells[i])) for i in order],
        "observed": [int(observed[i]) for i in order],
        "expected": [round(float(expected[i]), 3) for i in order],
    }
    for name, o, e in (("(rest)", rest_o, rest_e), ("(outside enumeration)", float(other), 0.0)):
        if o or e:
            table["categories"].append(name)
            table["observed"].append(int(o))
            table["expected"].append(round(e, 3))
    return table


def finite(x: float) -> float | str:
    return x if math.isfinite(x) else "inf"
