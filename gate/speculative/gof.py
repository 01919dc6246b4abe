"""Goodness of fit for categorical samples: G-test with pooled small cells, its power, sample size.

The G-test compares observed counts O with expected counts E = n·π0 over the cells of an exactly
known distribution π0: G = 2 Σ O ln(O / E), referred to χ² with (cells − 1) degrees of freedom.
The χ² approximation needs E ≥ 5 in every cell, so cells under that are pooled, smallest first.
A sample in a cell π0 gives probability zero is impossible under the null: the test rejects outright.

Power against a fixed alternative π1 uses the non-central χ² with the same degrees of freedom and
non-centrality λ = 2n·KL(π1 ‖ π0) over the pooled cells (the large-sample mean of G under π1),
combined with the chance that some sample falls where π0 is zero.

Pure numpy and scipy; no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.special import chdtrc, chdtri, chndtr  # χ² tails (scipy.stats costs a second to import)

MIN_EXPECTED = 5.0


def pool_cells(expected: npt.ArrayLike) -> list[list[int]]:
    """Groups of cell indices such that each group's expected count is >= MIN_EXPECTED.

    Cells at or above the threshold stay alone; smaller ones are merged smallest-first, and a
    remainder still under the threshold joins the smallest group. Cells with E = 0 are dropped."""
    e = np.asarray(expected, dtype=float)
    order = [int(i) for i in np.argsort(e, kind="stable") if e[i] > 0]
    groups: list[list[int]] = []
    current: list[int] = []
    total = 0.0
    for i in order:
        if e[i] >= MIN_EXPECTED and not current:
            groups.append([i])
            continue
        current.append(i)
        total += e[i]
        if total >= MIN_EXPECTED:
            groups.append(current)
            current, total = [], 0.0
    if current:
        if groups:
            smallest = min(range(len(groups)), key=lambda g: float(e[groups[g]].sum()))
            groups[smallest] = groups[smallest] + current
        else:
            groups.append(current)
    return groups


@dataclass
class GTest:
    statistic: float
    """G = 2 Σ O ln(O/E) over pooled cells (inf when a sample is impossible under π0)."""
    dof: int
    """Pooled cells − 1."""
    p_value: float
    pooled_cells: int
    impossible: int
    """Samples in cells where π0 is zero."""


def g_test(observed: npt.ArrayLike, probs: npt.ArrayLike) -> GTest:
    """G-test of counts against exact cell probabilities (which must sum to 1 over the support)."""
    o, p = np.asarray(observed, dtype=float), np.asarray(probs, dtype=float)
    expected = float(o.sum()) * p
    impossible = int(o[p <= 0].sum())
    groups = pool_cells(expected)
    og = np.array([o[g].sum() for g in groups])
    eg = np.array([expected[g].sum() for g in groups])
    dof = max(len(groups) - 1, 1)
    if impossible:
        return GTest(math.inf, dof, 0.0, len(groups), impossible)
    nz = og > 0
    statistic = float(2.0 * np.sum(og[nz] * np.log(og[nz] / eg[nz])))
    return GTest(statistic, dof, float(chdtrc(dof, statistic)), len(groups), 0)


def power(null: npt.ArrayLike, alternative: npt.ArrayLike, n: int, alpha: float) -> float:
    """Probability that the G-test at level `alpha` rejects π0 with n samples drawn from π1.

    `null` and `alternative` are aligned over the same cells (π0 may be zero where π1 is not)."""
    p0, p1 = np.asarray(null, dtype=float), np.asarray(alternative, dtype=float)
    off_support = float(p1[p0 <= 0].sum())
    groups = pool_cells(n * p0)
    g0 = np.array([p0[g].sum() for g in groups])
    g1 = np.array([p1[g].sum() for g in groups])
    g1 = g1 / g1.sum() if g1.sum() > 0 else g0
    dof = max(len(groups) - 1, 1)
    nz = g1 > 0
    kl = float(np.sum(g1[nz] * np.log(g1[nz] / g0[nz])))
    critical = float(chdtri(dof, alpha))
    in_support = 1.0 - float(chndtr(critical, dof, 2.0 * n * kl)) if kl > 1e-15 else alpha
    never_off = (1.0 - off_support) ** n
    return 1.0 - never_off * (1.0 - in_support)


def required_samples(
    null: npt.ArrayLike, alternative: npt.ArrayLike, alpha: float, target_power: float, n_max: int, n_min: int = 1
) -> int | None:
    """Smallest n in [n_min, n_max] whose power reaches `target_power`; None if n_max does not."""
    if power(null, alternative, n_max, alpha) < target_power:
        return None
    lo, hi = n_min, n_max
    if power(null, alternative, lo, alpha) >= target_power:
        return lo
    while hi - lo > max(1, lo // 100):  # 1 % resolution is plenty
        mid = (lo + hi) // 2
        if power(null, alternative, mid, alpha) >= target_power:
            hi = mid
        else:
            lo = mid
    return hi
