"""Every planted fault is detected by at least one check, with the right diagnosis; faults are
applied from outside the model and never leak into the clean path."""

from __future__ import annotations

import pytest
import torch

from gate.adapters.reference import Options, ReferenceAdapter
from gate.checks._diagnosis.profile import length_profile
from gate.checks._sweep import cached_sweep
from gate.checks.batch_invariance import BatchInvarianceParams, batch_invariance
from gate.checks.greedy_parity import GreedyParityParams, greedy_parity
from gate.checks.mask_oracle import MaskOracleParams, mask_oracle
from gate.checks.prefix_sweep import PrefixSweepParams, prefix_sweep
from gate.checks.reset_isolation import ResetIsolationParams, reset_isolation
from gate.core.check import CheckSpec
from gate.engine.controls import observation_difference
from gate.errors import UnknownFault
from gate.models.faults import FAULT_NAMES, FAULTS
from tests.support.reference import MAX_LEN, ctx, path

PRIMARY: dict[str, tuple[CheckSpec, object]] = {  # type: ignore[type-arg]
    "reset-keeps-position": (reset_isolation, ResetIsolationParams()),
    "padding-in-positions": (batch_invariance, BatchInvarianceParams()),
    "pad-attended": (batch_invariance, BatchInvarianceParams()),
    "stale-slot-on-join": (batch_invariance, BatchInvarianceParams()),
}
SWEEP = (prefix_sweep, PrefixSweepParams(longest=MAX_LEN - 1))


def test_catalogue_matches_the_issue() -> None:
    assert FAULT_NAMES == (
        "mask-origin-reset",
        "missing-start-pos",
        "off-by-one-pos",
        "rope-after-write",
        "reset-keeps-position",
        "truncated-last-block",
        "stale-weights",
        "cross-request-handle",
        "poisoned-tail-read",
        "sliding-window-mask",
        "padding-in-positions",
        "pad-attended",
        "stale-slot-on-join",
        "kv-head-map",
        "chunk-mask-origin",
    )
    assert path("static").faults() == FAULT_NAMES
    assert path("full").faults() == ("sliding-window-mask",)
    with pytest.raises(UnknownFault):
        path("full").with_fault("stale-weights")


@pytest.mark.parametrize("fault", FAULT_NAMES)
def test_each_fault_is_detected_with_the_right_diagnosis(fault: str) -> None:
    spec, params = PRIMARY.get(fault, SWEEP)
    reference, candidate = path("full"), path("static")
    clean = spec(ctx(reference, candidate), params)
    faulty = spec(ctx(reference, candidate.with_fault(fault)), params)
    assert clean.status == "pass"
    assert faulty.status == "fail", f"{spec.name} missed {fault}: {faulty.message}"
    assert faulty.diagnosis is not None and faulty.diagnosis["bug_class"] == FAULTS[fault].bug_class
    assert faulty.detected_at is not None
    assert observation_difference(clean, faulty) not in (None, 0.0)


def test_positional_faults_show_where_positions_are_absolute() -> None:
    reference, candidate = path("full", preset="tiny-abs"), path("static", preset="tiny-abs")
    for fault in ("missing-start-pos", "off-by-one-pos"):
        out = prefix_sweep(ctx(reference, candidate.with_fault(fault)), PrefixSweepParams(log_spaced=16))
        assert out.status == "fail" and out.diagnosis is not None
        assert out.diagnosis["bug_class"] == "positional-index"
    out = reset_isolation(ctx(reference, candidate.with_fault("reset-keeps-position")), ResetIsolationParams())
    assert out.status == "fail" and out.metrics["cache_len_after_reset"] == 24 + 8


def test_mask_oracle_detects_cache_read_and_reset_faults() -> None:
    reference, candidate = path("full"), path("static")
    clean = mask_oracle(ctx(reference, candidate), MaskOracleParams())
    for fault in (
        "mask-origin-reset",
        "truncated-last-block",
        "cross-request-handle",
        "poisoned-tail-read",
        "reset-keeps-position",
    ):
        out = mask_oracle(ctx(reference, candidate.with_fault(fault)), MaskOracleParams())
        assert out.status == "fail" and out.diagnosis is not None, fault
        assert out.diagnosis["bug_class"] == FAULTS[fault].bug_class  # it returned the predicted wrong answer
    # positional faults do not touch the probe (no positions in it): unobservable, not missed
    for fault in ("missing-start-pos", "rope-after-write"):
        faulty = mask_oracle(ctx(reference, candidate.with_fault(fault)), MaskOracleParams())
        assert faulty.status == "pass" and observation_difference(clean, faulty) == 0.0


def test_greedy_parity_detects_a_state_fault() -> None:
    params = GreedyParityParams(prompt_lengths=[5, 40], tokens=[8, 24])
    out = greedy_parity(ctx(path("full"), path("static").with_fault("stale-weights")), params)
    assert out.status == "fail" and out.diagnosis is not None
    assert out.diagnosis["bug_class"] == "stale-state"


def test_reset_isolation_cannot_see_faults_that_hit_both_runs() -> None:
    reference, candidate = path("full"), path("static")
    clean = reset_isolation(ctx(reference, candidate), ResetIsolationParams())
    faulty = reset_isolation(ctx(reference, candidate.with_fault("mask-origin-reset")), ResetIsolationParams())
    assert faulty.status == "pass" and observation_difference(clean, faulty) == 0.0  # unobservable, not missed


def test_faults_leave_the_clean_path_untouched() -> None:
    candidate = path("static")
    tokens = torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(0))
    before, _ = cached_sweep(candidate, tokens, [0, 5, 20, 39])
    for fault in FAULT_NAMES:
        faulty = candidate.with_fault(fault)
        # a model fault patches its own copy; the others share the model and must leave it alone
        assert (faulty.model is candidate.model) == (FAULTS[fault].target != "model"), fault
        cached_sweep(faulty, tokens, [0, 5, 20, 39])  # running a faulted path changes nothing either
        reset_isolation(ctx(path("full"), faulty), ResetIsolationParams(steps=2))
    after, _ = cached_sweep(candidate, tokens, [0, 5, 20, 39])
    assert torch.equal(before, after)
    assert candidate.fault is None and not candidate.cache_hooks and not candidate.session_hooks


def test_manifest_option_builds_a_faulty_candidate() -> None:
    built = ReferenceAdapter().build(
        Options(path="static", max_len=64, fault="off-by-one-pos"), device="cpu", dtype="float32", seed=0
    )
    assert built.fault == "off-by-one-pos" and built.name.endswith("+off-by-one-pos")
    assert built.identity()["fault"] == "off-by-one-pos"


def test_length_profiles() -> None:
    lengths = [0, 1, 2, 16, 32, 48, 64, 100, 200]
    periodic = length_profile(lengths, [False, True, True, False, False, False, False, True, True], [0.0] * 9)
    assert periodic["profile"] == "periodic" and periodic["block"] == 16
    onset = length_profile(lengths, [False] * 6 + [True] * 3, [0.0] * 9)
    assert onset["profile"] == "onset-at-length" and onset["onset"] == 64
    growing = length_profile(lengths, [False] + [True] * 8, [0, 0.01, 0.02, 0.1, 0.2, 0.3, 0.4, 0.8, 1.6])
    assert growing["profile"] == "grows-with-length"
    flat = length_profile(lengths, [False] + [True] * 8, [0, 1, 1, 1, 1, 1, 1, 1, 1])
    assert flat["profile"] == "short-prefix"


def test_reset_isolation_refuses_to_judge_non_finite_logits() -> None:
    # NaN from a poisoned tail is bit-equal to NaN: without this guard a reset check would "pass" on it
    reference, candidate = path("full"), path("static")
    out = reset_isolation(ctx(reference, candidate.with_fault("poisoned-tail-read")), ResetIsolationParams())
    assert out.status == "fail" and out.metrics["non_finite_logits"] > 0
    assert out.diagnosis is not None and out.diagnosis["bug_class"] == "non-finite-output"
