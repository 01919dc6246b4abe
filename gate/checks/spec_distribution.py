"""spec-distribution: speculative sampling keeps the target's output distribution.

Greedy equality is no evidence for sampling: a sampler with the wrong acceptance ratio or residual
keeps greedy output and changes the distribution. So the check enumerates the target's exact joint
distribution over the next `horizon` tokens of one seeded prompt (temperature and top-k keep it to
at most top_k^horizon cells), draws n seeded continuations through the candidate's speculative
sampler, and applies a G-test at the claim's alpha. The horizon must exceed the draft length k, or
bugs in the bonus token (drawn at position k + 1) cannot show.

Samples are drawn sequentially. For every fault in `power_against`, the exact distribution that
fault would produce with this target and draft is enumerated too. Before any sample is drawn, a
schedule of looks is fixed: sample sizes doubling from `min_samples` up to the budget
`max_samples`, and the fewest looks after which the test (each look at alpha / looks, Bonferroni,
so the whole sequence holds alpha) rejects every such fault with the declared power (non-central
χ²). The check stops at the first look that rejects (a control stops at its first detection) or
at the last planned look. A negative control first looks at a pilot sized for its own fault, with
Bonferroni over the pilot and the planned looks; the laws and the looks are computed once per run
and shared with the controls whose candidates answer every probability query alike
(gate.checks._spec_design). A fault whose exact law equals the target's with this draft is
unobservable here and named up front; one the budget cannot reach with the declared power leaves
the check `unproven`, saying which and why, never a failure of a correct sampler. A configuration
in which the draft is never rejected (a draft identical to the target) exercises nothing: it
fails, whatever the test says.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from typing import Any

import numpy as np
import torch

from gate._util.numbers import significant
from gate.checks._params import SpecDistributionParams
from gate.checks._spec import efficiency_note, sampling_generator, seeded_prompts, speculative_candidate
from gate.checks._spec_design import control_looks, shared_design
from gate.core.check import CheckContext, Outcome, check
from gate.core.evidence import DistributionEvidence, Look, SequentialDesign
from gate.core.manifest import DistributionClaim
from gate.protocols import SpeculativePath
from gate.speculative.gof import GTest, g_test, power
from gate.speculative.law import Seq
from gate.speculative.sampler import SpecStats

MAX_EVIDENCE_CELLS = 300
NEAR_TIE = 1e-4
"""A k-th/(k+1)-th logit gap (after temperature) below this makes top-k membership numerically fragile."""


class _Sampler:
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


def _walk(
    sampler: _Sampler, sizes: list[int], level: float, index: dict[Seq, int], p0: np.ndarray, history: list[Look]
) -> tuple[np.ndarray, int, list[Seq], GTest]:
    """Look at each cumulative size in turn until one rejects at `level`: the last look's counts and test."""
    for n_look in sizes:
        tokens = sampler.draw_to(n_look, sizes[-1])
        observed, other, strays = _count(tokens, index)
        test = g_test([*observed, other], [*p0, 0.0])
        history.append(Look(n=n_look, statistic=test.statistic, dof=test.dof, p_value=test.p_value))
        if test.p_value < level:
            break  # rejected: the sequence stops at its first rejection (a control at its first detection)
    return observed, other, strays, test


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

    # the null (the reference target's exact joint law), each fault's exact law, the looks: once per run
    design = shared_design(ctx, spec, prompt, p, horizon, alpha, target_power)
    law0, gaps, cells, p0, alts = design.law0, design.gaps, design.cells, design.p0, design.alts
    unobservable, required = design.unobservable, design.required
    ctx.log(f"    enumerated {len(law0)} continuations of {horizon} tokens (k={k})")
    looks = control_looks(ctx, design, p, alpha, target_power)
    pilot = f"a pilot of {looks.pilot}, then " if looks.pilot else ""
    ctx.log(f"    sequential test: looks at {pilot}n = {looks.sizes}, each at alpha {looks.alpha:.3g}")

    history: list[Look] = []
    # a control's pilot draws its own samples; the planned looks then draw afresh from the run's
    # seed, exactly what a positive run draws (so an unchanged sampler gives the same observation)
    for sizes in ([looks.pilot], looks.sizes) if looks.pilot else (looks.sizes,):
        sampler = _Sampler(spec, prompt, horizon, p, ctx)
        observed, other, strays, test = _walk(sampler, sizes, looks.alpha, design.index, p0, history)
        if test.p_value < looks.alpha:
            break
    n, stats, seconds = sampler.n, sampler.stats, sampler.seconds
    rejected = test.p_value < looks.alpha
    level = looks.alpha
    powers = {f: round(power(p0, a, n, level), 6) for f, a in alts.items()}
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
        "alpha_per_look": level,
        "looks": len(history),
        "k": k,
        "horizon": horizon,
        "n_samples": n,
        "impossible_samples": test.impossible,
        **efficiency,
        "min_power": min((powers[f] for f in required), default=None),
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
        samples_needed=looks.needed,
        sequential=SequentialDesign(
            method="Bonferroni over a schedule of looks fixed before sampling (sizes doubling from "
            "min_samples to the budget max_samples); stops at the first rejection or at the first look "
            "with the declared power against every observable fault; a negative control may look first "
            "at a pilot sized for its fault, its own samples, every look then at alpha / (looks + 1)",
            planned_looks=looks.sizes,
            pilot=looks.pilot,
            alpha_per_look=level,
            budget=p.max_samples,
            reaches_power=looks.reaches_power,
            history=history,
        ),
        unobservable=unobservable,
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
        power_note=None if design.enumerated else "the candidate gives no draft probabilities: power not computed",
    ).dump()
    observation = torch.tensor([*observed, other], dtype=torch.float64)
    where = f"k={k}, horizon={horizon} tokens, n={n}" + (
        f", look {len(history)} of {looks.count} at alpha {level:.3g}" if looks.count > 1 else ""
    )

    problems = []
    if rejected:
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
    if problems:
        first = next((r["tokens"] for r in depth if r["p_value"] < alpha), None)
        return Outcome(
            "fail", "; ".join(problems), metrics, evidence, exercise, detected_at=first, observation=observation
        )
    unseen = (
        "; unobservable with this draft: " + ", ".join(f"{f} ({why})" for f, why in unobservable.items())
        if unobservable
        else ""
    )
    weak = {f: powers[f] for f in required if powers[f] < target_power}
    if weak:
        return Outcome(
            "unproven",
            f"no departure from the target's distribution ({where}), but the budget of {p.max_samples} samples "
            "cannot show the declared power: against "
            + ", ".join(
                f"{f} {v:.3f} (needs {looks.needed.get(f) or f'more than {p.max_samples}'})" for f, v in weak.items()
            )
            + f" < {target_power} with this draft; raise max_samples, or use a draft that makes the fault visible"
            + unseen,
            metrics,
            evidence,
            exercise,
            observation=observation,
        )
    shown = ", ".join(f"{f} {powers[f]:.2f}" for f in required)
    return Outcome(
        "pass",
        f"continuations match the target's exact joint distribution ({where}): "
        f"G={test.statistic:.1f}, dof={test.dof}, p={significant(test.p_value)} at alpha={alpha}; "
        f"power {shown or 'not computed'}; acceptance {stats.acceptance_rate:.3f}, "
        f"{stats.tokens_per_target_pass:.2f} tokens per target pass{efficiency_note(stats)}{unseen}",
        metrics,
        evidence,
        exercise,
        observation=observation,
    )


def _finite(x: float) -> float | str:
    return x if math.isfinite(x) else "inf"
