"""The top-k rule (vLLM's check_logprobs_close, tie-aware): agreement, ties, flips, exactness."""

from __future__ import annotations

from gate.checks._compare import Tolerance
from gate.checks._topk import TopKObservation, compare_topk, exact_equal

TOL = Tolerance(1e-3, 0.0, "test")


def obs(tokens: list[int], logprobs: list[float], top: list[dict[int, float]]) -> TopKObservation:
    return TopKObservation(tokens, logprobs, top)


def test_identical_sequences_agree_and_are_exact() -> None:
    a = obs([5, 6], [-0.1, -0.2], [{5: -0.1, 7: -2.0}, {6: -0.2, 8: -3.0}])
    c = compare_topk(a, a, TOL)
    assert not c.diverged and not c.failed and c.max_abs_delta == 0.0 and c.compared == 2
    assert exact_equal(a, a)


def test_logprob_drift_is_measured_over_shared_topk_entries() -> None:
    ref = obs([5], [-0.1], [{5: -0.1, 7: -2.0}])
    cand = obs([5], [-0.1], [{5: -0.1, 7: -2.5}])
    c = compare_topk(ref, cand, TOL)
    assert not c.failed and c.over_tolerance and abs(c.max_abs_delta - 0.5) < 1e-12
    assert not exact_equal(ref, cand)


def test_flip_within_tolerance_is_a_tie_not_a_failure() -> None:
    ref = obs([5, 1], [-0.6931], [{5: -0.6931, 7: -0.6935}, {}])
    cand = obs([7, 2], [-0.6931], [{7: -0.6931, 5: -0.6934}, {}])
    c = compare_topk(ref, cand, TOL)
    assert c.diverged and c.first_divergence == 0 and c.tie and c.close and not c.failed
    assert c.gap is not None and abs(c.gap - 0.0004) < 1e-9


def test_flip_with_a_real_gap_fails_and_reports_it() -> None:
    ref = obs([5, 6, 9], [-0.1, -0.1, -0.1], [{5: -0.1}, {6: -0.1, 4: -1.0}, {9: -0.1}])
    cand = obs([5, 4, 9], [-0.1, -0.2, -0.1], [{5: -0.1}, {4: -0.2, 6: -0.9}, {9: -0.1}])
    c = compare_topk(ref, cand, TOL)
    assert c.failed and c.first_divergence == 1 and c.close and abs((c.gap or 0) - 0.9) < 1e-12
    assert c.compared == 2  # nothing after the divergence is compared


def test_flip_outside_the_topk_gives_a_lower_bound() -> None:
    ref = obs([5], [-0.1], [{5: -0.1, 7: -1.5}])
    cand = obs([8], [-0.1], [{8: -0.1, 5: -3.0}])
    c = compare_topk(ref, cand, TOL)
    assert c.failed and c.gap is None and not c.close and abs((c.gap_lower_bound or 0) - 1.4) < 1e-12
