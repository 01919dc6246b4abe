"""One-sided confidence bounds and minimum sample sizes for quality envelopes.

An envelope is judged on the one-sided bound at its declared confidence, never on the point
estimate: a rate uses the Wilson score bound, a mean a seeded (paired) percentile bootstrap.
The minimum sample size follows TensorRT-LLM's accuracy suite (tests/integration/defs/accuracy):
there the minimum detectable effect is

    theta = (z_{1-alpha} + z_{1-beta}) * sqrt(groups * sigma^2 / n)

with groups = 2 because their reference accuracy is itself a noisy n-sample estimate
(a two-sample test). Solved for n:

    n = ceil(groups * sigma^2 * (z_{1-alpha} + z_{1-beta})^2 / theta^2)

For a bound judged against a fixed threshold (agreement with the exact path, candidate accuracy),
the reference side carries no noise and groups = 1: with that n, a candidate whose true value is
`theta` better than the threshold passes with probability >= power, and one exactly at the
threshold passes with probability <= 1 - confidence. A paired difference of two noisy scores
(accuracy-drop) keeps groups = 2, which is the paired variance bound when the two outcomes are
uncorrelated (positive correlation, the usual case, only shrinks it).

Imports no torch; numpy only for the bootstrap.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import Decimal
from statistics import NormalDist
from typing import Literal

from gate._util.numbers import significant
from gate.core.evidence import Judgement

Side = Literal["lower", "upper"]

BERNOULLI_SIGMA = 0.5
"""Worst-case standard deviation of a score in [0, 1] (p = 0.5), as TensorRT-LLM uses for yes/no tasks."""

MIN_SAMPLES = 16
"""No slice is judged on fewer samples than this, whatever the power calculation says."""


def z_one_sided(level: float) -> float:
    """The standard normal quantile z with P(Z <= z) = level."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    return NormalDist().inv_cdf(level)


def min_sample_size(
    min_detectable_effect: float,
    confidence: float,
    power: float,
    sigma: float = BERNOULLI_SIGMA,
    groups: int = 1,
    floor: int = MIN_SAMPLES,
) -> int:
    """Samples needed to detect `min_detectable_effect` at one-sided `confidence` with `power` (the
    module's n, alpha = 1 - confidence, beta = 1 - power); never below `floor`."""
    if min_detectable_effect <= 0:
        raise ValueError("min_detectable_effect must be positive")
    if sigma < 0 or groups not in (1, 2):
        raise ValueError("sigma must be >= 0 and groups 1 (one-sample) or 2 (two-sample)")
    z = z_one_sided(confidence) + z_one_sided(power)
    n = groups * sigma**2 * z**2 / min_detectable_effect**2
    return max(floor, math.ceil(n - 1e-9))


def wilson_bound(successes: int, n: int, confidence: float, side: Side) -> float:
    """One-sided Wilson score bound on a binomial rate (lower for `>=` envelopes, upper for `<=`).

    With no samples the bound is the uninformative end of [0, 1]; at the end itself it is exact (centre
    and half-width cancel: no rounding residue)."""
    if n <= 0 or (successes == 0 and side == "lower") or (successes == n and side == "upper"):
        return 0.0 if side == "lower" else 1.0
    if not 0 <= successes <= n:
        raise ValueError(f"successes {successes} outside [0, {n}]")
    z = z_one_sided(confidence)
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return min(1.0, max(0.0, centre - half if side == "lower" else centre + half))


def bootstrap_bound(
    values: Sequence[float],
    confidence: float,
    side: Side,
    seed: int,
    reference: Sequence[float] | None = None,
    resamples: int = 2000,
) -> float:
    """One-sided percentile-bootstrap bound on a mean, seeded so a run can be reproduced.

    With `reference`, the bound is on mean(reference - values), resampling the *pairs*: each
    resample draws sample indices once and uses both scores of each drawn sample, so the shared
    per-sample difficulty cancels (the paired bootstrap)."""
    import numpy as np

    x = np.asarray(values, dtype=np.float64)
    if reference is not None:
        r = np.asarray(reference, dtype=np.float64)
        if r.shape != x.shape:
            raise ValueError("paired bootstrap needs one reference score per sample")
        x = r - x
    n = x.size
    if n == 0:
        return -math.inf if side == "lower" else math.inf
    rng = np.random.default_rng(seed)
    # idx: [resamples, n]; the same draw serves both sides of a pair because x is already paired.
    means = np.empty(resamples, dtype=np.float64)
    chunk = max(1, 2_000_000 // n)
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = x[idx].mean(axis=1)
    return float(np.quantile(means, 1.0 - confidence if side == "lower" else confidence, method="linear"))


def holds(bound: float, comparator: str, threshold: str) -> bool:
    """Compare a bound with a decimal-string threshold without binary float surprises."""
    if math.isnan(bound):
        return False
    if math.isinf(bound):
        return (bound > 0) == (comparator == ">=")
    b, t = Decimal(repr(bound)), Decimal(threshold)
    if comparator == ">=":
        return b >= t
    if comparator == "<=":
        return b <= t
    raise ValueError(f"unknown comparator {comparator!r}")


def settled_rate(successes: int, scored: int, planned: int, confidence: float, comparator: str, threshold: str) -> bool:
    """True when a rate envelope over `planned` samples fails however the `planned - scored` samples
    not yet scored turn out (deterministic curtailment).

    Wilson's bound is monotone in the successes at a fixed n, so the best case is every remaining
    sample a success for a `>=` envelope (the lower bound at its highest) and every one a failure
    for a `<=` envelope (the upper bound at its lowest): when even that bound violates the
    threshold, no later sample can change the verdict, and scoring them only costs time."""
    if planned < scored or not 0 <= successes <= scored:
        raise ValueError(f"{successes} successes of {scored} scored, {planned} planned")
    side: Side = "lower" if comparator == ">=" else "upper"
    return not holds(best_case_bound(successes, scored, planned, confidence, side), comparator, threshold)


def best_case_bound(successes: int, scored: int, planned: int, confidence: float, side: Side) -> float:
    """Wilson's bound over `planned` samples had every unscored one gone the envelope's way
    (successes for a lower bound, failures for an upper)."""
    best = successes + planned - scored if side == "lower" else successes
    return wilson_bound(best, planned, confidence, side)


def judge(
    scores: Sequence[float],
    *,
    kind: Literal["rate", "mean"],
    comparator: str,
    threshold: str,
    confidence: float,
    min_detectable_effect: float,
    power: float,
    seed: int,
    reference: Sequence[float] | None = None,
    sigma: float | None = None,
    floor: int = MIN_SAMPLES,
    resamples: int = 2000,
    planned: int | None = None,
) -> Judgement:
    """Judge an envelope on per-sample `scores`.

    kind="rate": scores are 0/1, the bound is Wilson's. kind="mean": the bound is the seeded
    bootstrap's; with `reference` it is paired and judges mean(reference - scores).
    `sigma`: the standard deviation for the sample-size rule. None means 0.5 for a rate (the
    worst case of a 0/1 score) and the observed standard deviation for a mean (a plug-in, as in
    Stein's two-stage design); pass 0.5 for a mean of scores known to lie in [0, 1].
    `planned`: the samples the slice was sized for, when scoring stopped at len(scores) because the
    rate envelope was settled (`settled_rate`): it fails, and the reason gives the best case over
    `planned` beside the bound over the samples scored (which violates the threshold too: a bound
    over fewer samples is never closer to it than the best case).
    """
    import numpy as np

    side: Side = "lower" if comparator == ">=" else "upper"
    n = len(scores)
    groups = 2 if reference is not None else 1
    curtailed = planned is not None and planned > n
    if curtailed and kind != "rate":
        raise ValueError("only a rate envelope is curtailed (a bootstrap bound is not monotone in one sample)")
    if kind == "rate":
        successes = round(float(np.sum(np.asarray(scores, dtype=np.float64))))
        point = successes / n if n else math.nan
        bound = wilson_bound(successes, n, confidence, side)
        used_sigma = BERNOULLI_SIGMA if sigma is None else sigma
    else:
        x = np.asarray(scores, dtype=np.float64)
        if reference is not None:
            x = np.asarray(reference, dtype=np.float64) - x
        point = float(x.mean()) if n else math.nan
        bound = bootstrap_bound(scores, confidence, side, seed, reference=reference, resamples=resamples)
        observed = float(x.std(ddof=1)) if n > 1 else 0.0
        used_sigma = observed if sigma is None else sigma
    n_required = min_sample_size(min_detectable_effect, confidence, power, used_sigma, groups, floor)
    ok = holds(bound, comparator, threshold)
    reason = (
        f"{confidence:.0%} {side} bound {significant(bound)} {'holds' if ok else 'violates'} {comparator} {threshold} "
        f"(point {significant(point)}, n={n})"
    )
    if curtailed:
        assert planned is not None
        case = "succeeded" if side == "lower" else "failed"
        best = best_case_bound(successes, n, planned, confidence, side)
        reason = (
            f"settled after {n} of {planned} samples: {reason}, and had the other {planned - n} all {case} "
            f"the bound over {planned} would be {significant(best)}, still a violation"
        )
        ok = False
    elif n < n_required:
        reason = (
            f"too few samples: {n} < {n_required} needed to detect {min_detectable_effect} "
            f"at {confidence:.0%} confidence with {power:.0%} power; {reason}"
        )
        ok = False
    return Judgement(
        point=point,
        bound=bound,
        n=n,
        n_required=n_required,
        sigma=used_sigma,
        passed=ok,
        reason=reason,
        planned=planned if curtailed else None,
    )
