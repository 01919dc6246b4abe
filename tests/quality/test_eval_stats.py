"""One-sided bounds and sample sizes for quality envelopes (gate.quality.stats)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gate.quality.stats import (
    BERNOULLI_SIGMA,
    bootstrap_bound,
    holds,
    judge,
    min_sample_size,
    settled_rate,
    wilson_bound,
    z_one_sided,
)


def detectable_effect(
    n: int, confidence: float, power: float, sigma: float = BERNOULLI_SIGMA, groups: int = 1
) -> float:
    """TensorRT-LLM's `compute_theta`: the smallest effect `n` samples detect with `power` (the
    relation `min_sample_size` solves for n)."""
    return (z_one_sided(confidence) + z_one_sided(power)) * math.sqrt(groups * sigma**2 / n)


def test_detectable_effect_matches_tensorrt_llm_table() -> None:
    # TensorRT-LLM accuracy README, MMLU: sigma 50, alpha 0.05, beta 0.2 (two-sample)
    assert detectable_effect(4096, 0.95, 0.8, sigma=50, groups=2) == pytest.approx(2.747193, abs=1e-5)
    assert detectable_effect(1024, 0.95, 0.8, sigma=50, groups=2) == pytest.approx(5.494385, abs=1e-5)
    assert detectable_effect(32, 0.95, 0.8, sigma=50, groups=2) == pytest.approx(31.080936, abs=1e-5)


def test_min_sample_size_inverts_the_effect() -> None:
    for n in (64, 256, 1000):
        theta = detectable_effect(n, 0.95, 0.8)
        assert min_sample_size(theta, 0.95, 0.8, floor=1) == n
    # one-sample, worst-case Bernoulli: 0.05 at 95 % / 80 % needs 619 samples; 0.1 needs 155
    assert min_sample_size(0.05, 0.95, 0.8) == 619
    assert min_sample_size(0.1, 0.95, 0.8) == 155
    assert min_sample_size(0.1, 0.95, 0.8, groups=2) == 310
    assert min_sample_size(0.9, 0.95, 0.8) == 16  # the floor


def test_wilson_closed_form_at_zero_and_one() -> None:
    z = z_one_sided(0.95)
    assert wilson_bound(0, 10, 0.95, "upper") == pytest.approx(z * z / (10 + z * z))
    assert wilson_bound(10, 10, 0.95, "lower") == pytest.approx(10 / (10 + z * z))
    assert wilson_bound(0, 10, 0.95, "lower") == 0.0
    assert wilson_bound(0, 56, 0.95, "lower") == 0.0 and wilson_bound(56, 56, 0.95, "upper") == 1.0
    assert wilson_bound(0, 0, 0.95, "lower") == 0.0 and wilson_bound(0, 0, 0.95, "upper") == 1.0


def test_wilson_lower_bound_covers_at_the_declared_confidence() -> None:
    rng = np.random.default_rng(0)
    p, n = 0.9, 120
    draws = rng.binomial(n, p, size=4000)
    covered = np.mean([wilson_bound(int(s), n, 0.95, "lower") <= p for s in draws])
    assert covered >= 0.93


def test_bootstrap_is_seeded_and_paired() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(0.2, 0.1, size=200)
    a = bootstrap_bound(x, 0.95, "upper", seed=3)
    assert a == bootstrap_bound(x, 0.95, "upper", seed=3)
    assert a > x.mean() > bootstrap_bound(x, 0.95, "lower", seed=3)
    # pairs that differ by a constant: the paired bound is that constant, whatever the spread
    ref = rng.normal(0.0, 5.0, size=200)
    assert bootstrap_bound(ref - 0.25, 0.95, "upper", seed=0, reference=ref) == pytest.approx(0.25)


def test_bootstrap_upper_bound_covers_the_mean() -> None:
    rng = np.random.default_rng(2)
    hits = 0
    for _ in range(300):
        x = rng.exponential(1.0, size=80)
        hits += bootstrap_bound(x, 0.95, "upper", seed=int(rng.integers(1 << 30)), resamples=400) >= 1.0
    assert hits / 300 >= 0.88  # percentile bootstrap on a skewed mean: close to, a bit under, 95 %


def test_decimal_threshold_comparison() -> None:
    assert holds(0.95, ">=", "0.95") and holds(0.95, "<=", "0.95")
    assert not holds(0.9499999999, ">=", "0.95")
    assert not holds(math.nan, ">=", "0")
    assert holds(math.inf, ">=", "1") and not holds(math.inf, "<=", "1")


def test_a_perfect_but_small_slice_cannot_pass() -> None:
    small = judge(
        [1.0] * 30,
        kind="rate",
        comparator=">=",
        threshold="0.8",
        confidence=0.95,
        min_detectable_effect=0.1,
        power=0.8,
        seed=0,
    )
    assert not small.passed and small.n_required == 155 and "too few samples" in small.reason
    big = judge(
        [1.0] * 155,
        kind="rate",
        comparator=">=",
        threshold="0.95",
        confidence=0.95,
        min_detectable_effect=0.1,
        power=0.8,
        seed=0,
    )
    assert big.passed and big.bound < 1.0


def test_judged_on_the_bound_not_the_point() -> None:
    # point 0.9 over 200 samples is above 0.88, but the 95 % lower bound is not
    scores = [1.0] * 180 + [0.0] * 20
    j = judge(
        scores,
        kind="rate",
        comparator=">=",
        threshold="0.88",
        confidence=0.95,
        min_detectable_effect=0.1,
        power=0.8,
        seed=0,
    )
    assert j.point == pytest.approx(0.9) and j.bound < 0.88 and not j.passed


def test_kl_sample_size_uses_the_observed_spread() -> None:
    calm = judge(
        [0.001] * 20,
        kind="mean",
        comparator="<=",
        threshold="0.05",
        confidence=0.95,
        min_detectable_effect=0.02,
        power=0.8,
        seed=0,
        floor=16,
    )
    assert calm.passed and calm.n_required == 16
    noisy = judge(
        [0.0, 0.2] * 10,
        kind="mean",
        comparator="<=",
        threshold="0.5",
        confidence=0.95,
        min_detectable_effect=0.02,
        power=0.8,
        seed=0,
    )
    assert not noisy.passed and noisy.n_required > 20


@pytest.mark.parametrize("comparator,threshold", [(">=", "0.85"), ("<=", "0.1"), (">=", "0.5"), ("<=", "0.45")])
def test_a_settled_rate_fails_however_the_rest_turns_out(comparator: str, threshold: str) -> None:
    """Curtailment is exact: settled means every completion of the unscored samples fails, and
    unsettled means some completion passes (brute force over the completions of a 40-sample slice)."""
    planned, args = 40, dict(kind="rate", comparator=comparator, threshold=threshold)
    common = dict(confidence=0.95, min_detectable_effect=0.9, power=0.8, seed=0, floor=2)
    for scored in range(planned + 1):
        for successes in range(scored + 1):
            outcomes = {
                judge([1.0] * (successes + extra) + [0.0] * (planned - successes - extra), **args, **common).passed
                for extra in range(planned - scored + 1)
            }
            settled = settled_rate(successes, scored, planned, 0.95, comparator, threshold)
            assert settled == (outcomes == {False}), (scored, successes, outcomes)
            if settled and scored:  # the bound over the samples scored violates the threshold too
                assert not judge([1.0] * successes + [0.0] * (scored - successes), **args, **common).passed


def test_a_curtailed_judgement_reports_the_best_case_and_fails() -> None:
    common = dict(kind="rate", comparator=">=", threshold="0.85", confidence=0.95, min_detectable_effect=0.05)
    cut = judge([0.0] * 80 + [1.0] * 20, power=0.8, seed=0, planned=619, **common)  # type: ignore[arg-type]
    assert not cut.passed and cut.planned == 619 and cut.n == 100 and cut.point == 0.2
    assert cut.bound == wilson_bound(20, 100, 0.95, "lower")
    best = wilson_bound(20 + 519, 619, 0.95, "lower")
    assert cut.bound < best < 0.85 and f"would be {best:.4g}" in cut.reason
    assert "settled after 100 of 619 samples" in cut.reason and "too few" not in cut.reason
    whole = judge([0.0] * 80 + [1.0] * 539, power=0.8, seed=0, **common)  # type: ignore[arg-type]
    assert whole.bound == best and whole.planned is None and not whole.passed
    with pytest.raises(ValueError, match="only a rate"):
        judge([0.5] * 10, **{**common, "kind": "mean"}, power=0.8, seed=0, planned=20)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        settled_rate(5, 4, 10, 0.95, ">=", "0.5")
