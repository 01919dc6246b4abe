"""spec-distribution's design: the exact laws and the looks, fixed before any sample is drawn.

The design is the target's exact joint law (the null), the exact law each sampler fault would give
with the candidate's target and draft (the alternatives), the cells, and the schedule of looks with
the declared power against every observable fault. It depends only on the target's and draft's
next-token probabilities, never on the sampler, so one run computes it once (`shared_design`): a
control reuses it after its candidate answered every probability query the enumeration asked with
the same bits; a fault in the model rather than in the sampler's rule gets its own design.

A control proves power with one rejection. Where its own fault's exact law is known, it first looks
at a pilot sample sized to reject that law, then, if the pilot does not reject, walks the planned
looks. Bonferroni covers the pilot too: every look of the control is at alpha / (planned looks + 1),
and the pilot is taken only if the planned looks keep the declared power at that level. A fault whose
exact law is the target's (drop-bonus) has no law to size a pilot for and walks the planned looks
(about one positive run, benchmarks/spec_controls.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gate.checks.spec_distribution import SpecDistributionParams
from gate.core.check import CheckContext
from gate.protocols import SpeculativePath
from gate.speculative.gof import power, required_samples
from gate.speculative.law import Law, NextTokenTable, Seq, answers_again, sampler_law, target_law
from gate.speculative.sampler import CORRECT, FAULTS, apply_fault, warp

MAX_LOOKS = 8
"""Most looks of the sequential test (sizes doubling from min_samples to the budget)."""
SAME_LAW = 1e-9
"""Total variation below which a fault's exact law is the target's: no sample size can show it."""
PILOT_POWER = 0.99
"""A control's pilot rejects its own fault's exact law with at least this chance."""
MIN_PILOT = 50
"""The smallest pilot (the floor of min_samples)."""

Asked = list[tuple[torch.Tensor, torch.Tensor]]


@dataclass
class LookPlan:
    """The sequential design, fixed before any sample is drawn."""

    sizes: list[int]
    """Cumulative sample size at each look."""
    alpha: float
    """Level of each look."""
    reaches_power: bool
    needed: dict[str, int | None]
    """Per fault, the smallest n with the declared power at the per-look level (None: beyond the budget)."""
    pilot: int | None = None
    """A control's first look, on its own samples, sized for its fault; not pooled with `sizes`."""

    @property
    def count(self) -> int:
        return len(self.sizes) + (self.pilot is not None)


@dataclass(frozen=True)
class Design:
    """Everything spec-distribution fixes before it samples."""

    law0: Law
    """The target's exact joint law over the horizon (from the reference)."""
    gaps: list[float]
    """Smallest top-k boundary gaps seen while enumerating the null."""
    enumerated: bool
    cells: list[Seq]
    index: dict[Seq, int]
    p0: np.ndarray
    alts: dict[str, np.ndarray]
    """The null and each sampler fault's exact law over `cells`."""
    unobservable: dict[str, str]
    required: list[str]
    """Faults the looks must have the declared power against (observable ones of power_against)."""
    looks: LookPlan
    asked: tuple[Asked, Asked] | None
    """The candidate's target and draft answers the alternatives were enumerated from."""


def _at(fn: Any, p: SpecDistributionParams) -> Any:
    """`fn` at the params' temperature and top-k."""
    return lambda c: fn(c, temperature=p.temperature, top_k=p.top_k)


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


def shared_design(
    ctx: CheckContext,
    spec: SpeculativePath,
    prompt: torch.Tensor,
    p: SpecDistributionParams,
    horizon: int,
    alpha: float,
    target_power: float,
) -> Design:
    """The run's design, computed once; a candidate that answers any query differently gets its own."""

    def null_law() -> tuple[Law, list[float]]:
        gaps: list[float] = []
        return target_law(NextTokenTable(_reference_probs(ctx, p.temperature, p.top_k, gaps), prompt), horizon), gaps

    def enumerated() -> Design:
        # the reference side is the same for every candidate: enumerated once per run
        key = ("spec-null-law", ctx.reference, prompt, p.temperature, p.top_k, horizon)
        law0, gaps = ctx.cache.get(key, null_law)
        target = NextTokenTable(_at(spec.target_next_token_probs, p), prompt)
        draft = NextTokenTable(_at(spec.draft_next_token_probs, p), prompt)
        k = spec.num_draft_tokens
        try:
            alt_laws = {f: sampler_law(target, draft, apply_fault(CORRECT, f), k, horizon) for f in FAULTS}
        except NotImplementedError:  # no draft probabilities (e.g. prompt lookup): no alternatives, no power
            alt_laws = {}
        cells = sorted(set(law0).union(*alt_laws.values()), key=lambda c: (-law0.get(c, 0.0), c))
        p0 = np.array([law0.get(c, 0.0) for c in cells])
        alts = {f: np.array([law.get(c, 0.0) for c in cells]) for f, law in alt_laws.items()}
        unobservable = _unobservable(p0, alts, p.power_against)
        required = [f for f in p.power_against if f in alts and f not in unobservable]
        return Design(
            law0=law0,
            gaps=gaps,
            enumerated=bool(alt_laws),
            cells=cells,
            index={c: i for i, c in enumerate(cells)},
            p0=p0,
            alts=alts,
            unobservable=unobservable,
            required=required,
            looks=_plan_looks(p0, alts, required, p, alpha, target_power),
            asked=(target.asked, draft.asked) if alt_laws else None,
        )

    fresh: list[Design] = []

    def compute() -> Design:
        fresh.append(enumerated())
        return fresh[0]

    key = ("spec-distribution-design", ctx.reference, prompt, p.model_dump(), spec.num_draft_tokens, horizon)
    shared = ctx.cache.get((*key, alpha, target_power), compute)
    return shared if fresh or _answers_as_enumerated(spec, p, shared) else enumerated()


def _answers_as_enumerated(spec: SpeculativePath, p: SpecDistributionParams, design: Design) -> bool:
    if design.asked is None:  # nothing to compare with: enumerate (the draft gave no probabilities)
        return False
    target, draft = design.asked
    try:
        return answers_again(_at(spec.target_next_token_probs, p), target) and answers_again(
            _at(spec.draft_next_token_probs, p), draft
        )
    except NotImplementedError:
        return False


def _unobservable(p0: np.ndarray, alts: dict[str, np.ndarray], faults: list[str]) -> dict[str, str]:
    """Faults whose exact law with this target and draft is the target's own, and why."""
    why = f"its exact law with this target and draft equals the target's (total variation < {SAME_LAW:g}): "
    why += "no sample size can show it"
    return {f: why for f in faults if f in alts and float(np.abs(alts[f] - p0).sum()) < SAME_LAW}


def _look_sizes(p: SpecDistributionParams) -> list[int]:
    first = min(p.min_samples, p.max_samples)
    sizes = [first]
    while sizes[-1] < p.max_samples:
        sizes.append(min(2 * sizes[-1], p.max_samples))
    if len(sizes) > MAX_LOOKS:  # a wide budget: MAX_LOOKS geometric sizes from the floor to the budget
        ratio = (p.max_samples / first) ** (1 / (MAX_LOOKS - 1))
        sizes = sorted({round(first * ratio**i) for i in range(MAX_LOOKS - 1)} | {p.max_samples})
    return sizes


def _plan_looks(
    p0: np.ndarray,
    alts: dict[str, np.ndarray],
    faults: list[str],
    p: SpecDistributionParams,
    alpha: float,
    target: float,
) -> LookPlan:
    """The fewest looks, each at alpha / looks, after which every fault in `faults` is rejected with
    the declared power; all of them (the budget) when no number of looks gets there."""
    sizes = _look_sizes(p)

    def powered(n: int, level: float) -> bool:
        return all(power(p0, alts[f], n, level) >= target for f in faults)

    def needed(level: float) -> dict[str, int | None]:
        return {f: required_samples(p0, alts[f], level, target, p.max_samples, 10) for f in faults}

    for m in range(1, len(sizes) + 1):
        for i, n in enumerate(sizes[:m]):
            if powered(n, alpha / m):
                used, level = sizes[: i + 1], alpha / (i + 1)  # i + 1 <= m looks: a level at least alpha / m
                return LookPlan(used, level, True, needed(level))
    return LookPlan(sizes, alpha / len(sizes), False, needed(alpha / len(sizes)))


def control_looks(
    ctx: CheckContext, design: Design, p: SpecDistributionParams, alpha: float, target_power: float
) -> LookPlan:
    """The looks of this run: the planned ones, after a control's pilot where one pays (module docstring)."""
    fault = ctx.control
    if not ctx.stop_at_first_failure or fault is None:
        return design.looks
    planned, required = design.looks, design.required
    pilot = ctx.cache.get(
        ("spec-distribution-pilot", design, fault, alpha, target_power),
        lambda: _pilot(design, fault, alpha, target_power),
    )
    if pilot is None:
        return planned
    n, level = pilot
    needed = ctx.cache.get(
        ("spec-distribution-needed", design, level, target_power),
        lambda: {
            f: required_samples(design.p0, design.alts[f], level, target_power, p.max_samples, 10) for f in required
        },
    )
    return LookPlan(planned.sizes, level, True, needed, pilot=n)


def _pilot(design: Design, fault: str, alpha: float, target_power: float) -> tuple[int, float] | None:
    """The pilot's size and the level of every look of the control; None: walk the planned looks."""
    planned = design.looks
    alt = design.alts.get(fault)
    if alt is None or float(np.abs(alt - design.p0).sum()) < SAME_LAW or not planned.reaches_power:
        return None  # no law to size a pilot for, or one no sample shows
    level = alpha / (len(planned.sizes) + 1)
    n = required_samples(design.p0, alt, level, PILOT_POWER, planned.sizes[0], MIN_PILOT)
    if n is None or 2 * n > planned.sizes[0]:
        return None  # a pilot that large saves too little
    if any(power(design.p0, design.alts[f], planned.sizes[-1], level) < target_power for f in design.required):
        return None  # the extra look would cost the planned looks their declared power
    return n, level
