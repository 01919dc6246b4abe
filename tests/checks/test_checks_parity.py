"""The parity checks on correct paths (pass, never a false failure), their numbers and tie handling."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import torch

from gate.checks._compare import Tolerance, bits_equal, compare_rows, random_tokens
from gate.checks._sweep import SEED_LENGTHS, log_spaced, plan_sweep, sweep_lengths
from gate.checks.greedy_parity import GreedyParityParams, greedy_parity
from gate.checks.mask_oracle import MaskOracleParams, mask_oracle, visible_means
from gate.checks.prefix_sweep import PrefixSweepParams, prefix_sweep
from gate.checks.reset_isolation import ResetIsolationParams, reset_isolation
from gate.engine.controls import observation_difference
from tests.support.reference import MAX_LEN, ctx, path

FAST_GREEDY = GreedyParityParams(prompt_lengths=[5, 40], tokens=[8, 24])


# -- lengths and comparison ------------------------------------------------------------------


def test_sweep_lengths_cover_seed_log_spaced_and_boundaries() -> None:
    lengths = sweep_lengths(8191, boundaries=[64, 128])
    assert set(SEED_LENGTHS) <= set(lengths)
    assert len(log_spaced(64, 8191)) >= 64
    assert {63, 64, 65, 127, 128, 129} <= set(lengths)
    clipped = sweep_lengths(255)
    assert max(clipped) == 255 and 2000 not in clipped
    assert set(range(1, 41)) <= set(sweep_lengths(255, every_up_to=40))


def test_tie_is_reported_not_failed_or_hidden() -> None:
    tol = Tolerance(atol=0.1, rtol=0.0, source="test")
    reference = torch.tensor([[[5.0, 4.95, 1.0], [5.0, 3.0, 1.0]]])  # margins 0.05 and 2.0
    candidate = torch.tensor([[[4.94, 4.96, 1.0], [2.9, 3.1, 1.0]]])  # both flip to token 1
    cmp = compare_rows(reference, candidate, tol)
    assert cmp.tie.tolist() == [[True, False]]
    assert cmp.failed.tolist() == [[False, True]]
    assert cmp.margin[0, 0].item() == pytest.approx(0.05, abs=1e-6)
    nan = compare_rows(reference, torch.full_like(reference, float("nan")), tol)
    assert nan.failed.all() and not nan.tie.any()


def test_bits_equal_is_strict() -> None:
    a = torch.randn(3, 5)
    b = a.clone()
    b[1, 2] = torch.nextafter(b[1, 2], torch.tensor(float("inf")))
    assert bits_equal(a, b).tolist() == [True, False, True]


# -- correct paths pass ----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("kind", ["dynamic", "static", "chunked"])
def test_prefix_sweep_never_fails_a_correct_path(dtype: str, seed: int, kind: str) -> None:
    reference, candidate = path("full", dtype=dtype, seed=seed), path(kind, dtype=dtype, seed=seed, chunk_size=32)
    out = prefix_sweep(ctx(reference, candidate, dtype=dtype, seed=seed), PrefixSweepParams(longest=MAX_LEN - 1))
    assert out.status in ("pass", "warn"), out.message  # warn only for ties in bfloat16
    assert out.metrics["argmax_failures"] == 0
    if dtype == "float32":
        assert out.status == "pass"
    assert out.exercise["cached_steps"] > 0 and out.exercise["cache_len"] > 200
    assert out.evidence["rows_shown"] <= PrefixSweepParams().evidence_rows
    assert out.observation is not None and out.observation.shape[0] == out.metrics["lengths"]


def test_prefix_sweep_visits_chunk_boundaries() -> None:
    reference, candidate = path("full"), path("chunked", chunk_size=32)
    out = prefix_sweep(ctx(reference, candidate), PrefixSweepParams(log_spaced=8))
    lengths = out.evidence["per_length"]["length"]
    assert {31, 32, 33, 63, 64, 65} <= set(lengths) or out.metrics["lengths"] > out.evidence["rows_shown"]
    coverage = out.evidence["boundary_coverage"]["chunk"]
    assert coverage["edges"] == len(candidate.layout_edges()["chunk"]) == coverage["visited"]
    assert "chunk" in out.message and f"{coverage['visited']}/{coverage['edges']}" in out.message


def test_sweep_plan_is_bounded_seeded_and_visits_every_kind() -> None:
    edges = {"block": range(16, 131072, 16), "chunk": range(2048, 131072, 2048), "window": [4096]}
    plan = plan_sweep(131071, edges=edges, cap=120, seed=3)
    assert len(plan.lengths) <= 120 and plan.capped
    assert set(SEED_LENGTHS) <= set(plan.lengths)
    assert {15, 16, 17, 127, 128, 129, 2047, 2048, 2049, 4095, 4096, 4097} <= set(plan.lengths)
    assert {131055, 131056, 131057} <= set(plan.lengths)  # the last block edge of the context
    kinds = plan.coverage
    assert kinds["block"]["edges"] == 8191 and kinds["window"] == {"edges": 1, "visited": 1}
    assert all(c["visited"] >= 1 for c in kinds.values())
    assert plan_sweep(131071, edges=edges, cap=120, seed=3).lengths == plan.lengths
    assert plan_sweep(131071, edges=edges, cap=120, seed=4).lengths != plan.lengths
    near = plan_sweep(131071, edges={**edges, "window": [40000]}, reach=8191)
    assert max(near.lengths) == 40001 and 16000 not in near.lengths  # reach, plus each kind's first edge
    assert near.coverage["block"]["edges"] == 8191 and near.coverage["window"]["visited"] == 1
    assert "swept up to 40001 of 131071" in near.summary()
    assert {2000, 8000} <= set(plan_sweep(131071, edges=edges, reach=1000).lengths)  # standard lengths stay
    full = plan_sweep(131071, edges=edges, exhaustive=True)
    assert full.coverage["block"]["visited"] == 8191 and not full.capped


def test_control_mode_stops_at_the_first_failing_length() -> None:
    reference, candidate = path("full"), path("static")
    faulty = candidate.with_fault("sliding-window-mask")
    params = PrefixSweepParams(log_spaced=16)
    stopped = prefix_sweep(replace(ctx(reference, faulty), stop_at_first_failure=True), params)
    whole = prefix_sweep(ctx(reference, faulty), params)
    assert stopped.status == whole.status == "fail"
    assert stopped.detected_at == whole.detected_at and stopped.detected_at is not None
    assert stopped.metrics["lengths"] < whole.metrics["lengths"] == whole.metrics["lengths_planned"]
    assert stopped.evidence["sweep_plan"]["stopped_at"] == stopped.detected_at
    assert stopped.exercise["stopped_at_first_failure"] == stopped.detected_at


def test_greedy_control_mode_stops_at_the_first_real_divergence() -> None:
    reference, candidate = path("full"), path("static").with_fault("off-by-one-pos")
    stopped = greedy_parity(replace(ctx(reference, candidate), stop_at_first_failure=True), FAST_GREEDY)
    whole = greedy_parity(ctx(reference, candidate), FAST_GREEDY)
    assert stopped.status == whole.status == "fail" and stopped.detected_at == whole.detected_at
    assert stopped.exercise["generated_tokens"] < whole.exercise["generated_tokens"]


def test_exact_compares_bits_between_same_shape_cached_paths() -> None:
    out = prefix_sweep(
        ctx(path("dynamic"), path("static"), claim={"level": "exact"}),
        PrefixSweepParams(compare="cached", longest=MAX_LEN - 1),
    )
    assert out.status == "pass" and out.metrics["bit_identical"] is True
    assert out.evidence["bitwise"]["lengths_bit_identical"] == out.metrics["lengths"]


def test_exact_against_a_full_pass_is_refused_not_loosened() -> None:
    with pytest.raises(ValueError, match="not an honest claim"):
        prefix_sweep(ctx(path("full"), path("static"), claim={"level": "exact"}), PrefixSweepParams(compare="cached"))


class _LastBitNoise:
    """A correct path whose logits differ from the reference in the last bits only."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def new_session(self, batch: int) -> Any:
        session = self._inner.new_session(batch)
        outer = self

        class Noisy:
            def prefill(self, tokens: torch.Tensor) -> torch.Tensor:
                return outer._nudge(session.prefill(tokens))

            def append(self, tokens: torch.Tensor) -> torch.Tensor:
                return outer._nudge(session.append(tokens))

            def __getattr__(self, name: str) -> Any:
                return getattr(session, name)

        return Noisy()

    @staticmethod
    def _nudge(logits: torch.Tensor) -> torch.Tensor:
        return torch.nextafter(logits, torch.full_like(logits, float("inf")))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_exact_fails_on_last_bit_differences_and_says_rounding_only() -> None:
    out = prefix_sweep(
        ctx(path("dynamic"), _LastBitNoise(path("static")), claim={"level": "exact"}),
        PrefixSweepParams(compare="cached", log_spaced=8),
    )
    assert out.status == "fail" and out.metrics["argmax_failures"] == 0
    assert out.diagnosis is not None and out.diagnosis["bug_class"] == "rounding-only"


def test_claim_tolerance_is_used() -> None:
    out = prefix_sweep(
        ctx(path("full"), path("static"), claim={"level": "tolerance", "atol": 0.5, "rtol": 0.0}),
        PrefixSweepParams(log_spaced=4),
    )
    assert out.evidence["tolerance"] == {"atol": 0.5, "rtol": 0.0, "source": "claim"}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_greedy_parity_passes_on_correct_paths(dtype: str) -> None:
    out = greedy_parity(ctx(path("full", dtype=dtype), path("static", dtype=dtype), dtype=dtype), FAST_GREEDY)
    assert out.status in ("pass", "warn"), out.message
    assert out.exercise["generated_tokens"] == 2 * 2 * 24


def test_greedy_parity_keeps_the_first_divergence_with_logit_rows() -> None:
    out = greedy_parity(ctx(path("full"), path("static").with_fault("mask-origin-reset")), FAST_GREEDY)
    assert out.status == "fail"
    first = next(r["first_divergence"] for r in out.evidence["runs"] if "first_divergence" in r)
    assert first["absolute_position"] == first["step"] + next(
        r["prompt_len"] for r in out.evidence["runs"] if "first_divergence" in r
    )
    assert len(first["reference_top_k"]) == 5 and len(first["candidate_top_k"]) == 5
    assert out.detected_at is not None


@pytest.mark.parametrize("kind", ["full", "dynamic", "static", "chunked"])
def test_reset_isolation_passes_on_correct_paths(kind: str) -> None:
    out = reset_isolation(ctx(path("full"), path(kind)), ResetIsolationParams())
    assert out.status == "pass", out.message
    assert out.evidence["after_reset"]["cache_len"] == 0


# -- the mask oracle -------------------------------------------------------------------------


def test_seed_004_numbers() -> None:
    values = (2, 4, 8, 16, 32)
    assert [float(x) for x in visible_means(values, [3, 4])] == [7.5, 12.4]
    assert [float(x) for x in visible_means(values, [0, 1])] == [2.0, 3.0]
    assert float(visible_means(values, [1])[0]) == 3.0  # one-token cache: position 1


@pytest.mark.parametrize("kind", ["full", "dynamic", "static", "chunked"])
def test_mask_oracle_passes_through_every_path(kind: str) -> None:
    out = mask_oracle(ctx(path("full"), path(kind)), MaskOracleParams())
    assert out.status == "pass", out.message
    assert out.evidence["fixture"]["got"] == pytest.approx([7.5, 12.4], rel=1e-6)
    assert out.metrics["cases"] == 12


def test_mask_oracle_catches_the_wrong_origin_with_its_predicted_answer() -> None:
    out = mask_oracle(ctx(path("full"), path("static").with_fault("mask-origin-reset")), MaskOracleParams())
    assert out.status == "fail"
    assert out.evidence["fixture"]["got"] == [2.0, 3.0]
    assert out.diagnosis is not None and out.diagnosis["bug_class"] == "mask-offset"


def test_mask_oracle_poisoned_tail() -> None:
    out = mask_oracle(ctx(path("full"), path("dynamic").with_fault("poisoned-tail-read")), MaskOracleParams())
    assert out.status == "fail"
    assert out.diagnosis is not None and out.diagnosis["bug_class"] == "read-past-valid-length"
    assert any(case["nan"] for case in out.evidence["cases"] if case["poisoned_tail"])


@pytest.mark.parametrize(
    ("fault", "bug_class"),
    [
        ("mask-origin-reset", "mask-offset"),
        ("poisoned-tail-read", "read-past-valid-length"),
        ("reset-keeps-position", "uncertain"),
    ],
)
def test_mask_oracle_control_stops_at_the_first_wrong_case(fault: str, bug_class: str) -> None:
    faulty = path("static").with_fault(fault)
    whole = mask_oracle(ctx(path("full"), faulty), MaskOracleParams())
    stopped = mask_oracle(
        replace(ctx(path("full"), faulty), stop_at_first_failure=True, control=fault), MaskOracleParams()
    )
    assert stopped.status == whole.status == "fail"
    # a control probes first the case its name points at (a reset fault: reset-between-requests, one
    # probe, not nine) and reports where it failed, by the positive run's index
    assert stopped.detected_at in [case["index"] for case in whole.evidence["cases"] if not case["ok"]]
    assert stopped.metrics["cases"] == stopped.exercise["probe_calls"] == stopped.metrics["failed_cases"] == 1
    assert stopped.diagnosis is not None and stopped.diagnosis["bug_class"] == bug_class
    assert stopped.observation is not None and whole.observation is not None
    if stopped.detected_at == 0:  # it ran the positive run's first case: its observation is a prefix
        assert stopped.observation_in_run_order
        prefix = whole.observation[: stopped.observation.numel()]
        torch.testing.assert_close(stopped.observation, prefix, rtol=0, atol=0, equal_nan=True)
        assert observation_difference(whole, stopped) == 0.0  # compared on that prefix, not as a change of shape
    else:
        assert not stopped.observation_in_run_order and observation_difference(whole, stopped) == float("inf")


def test_mask_oracle_control_walking_every_case_keeps_the_positive_layout() -> None:
    clean = path("static")
    whole = mask_oracle(ctx(path("full"), clean), MaskOracleParams())
    walked = mask_oracle(
        replace(ctx(path("full"), clean), stop_at_first_failure=True, control="reset-keeps-position"),
        MaskOracleParams(),
    )
    assert walked.status == "pass" and observation_difference(whole, walked) == 0.0  # reordered, laid out alike


def test_reset_isolation_control_compares_the_request_after_the_reset_first() -> None:
    faulty = path("static").with_fault("reset-keeps-position")
    params = ResetIsolationParams()
    whole = reset_isolation(ctx(path("full"), faulty), params)
    stopped = reset_isolation(replace(ctx(path("full"), faulty), stop_at_first_failure=True), params)
    assert stopped.status == whole.status == "fail" and stopped.detected_at == whole.detected_at
    assert stopped.exercise["stopped_at_first_failure"] == {"request": "second", "tokens": params.second}
    assert "first" not in stopped.evidence["requests"] and stopped.diagnosis == whole.diagnosis
    assert observation_difference(whole, stopped) == 0.0  # the stopped control observed a prefix of the whole run
    clean = reset_isolation(ctx(path("full"), path("static")), params)
    assert observation_difference(clean, stopped) == stopped.metrics["max_abs_delta"] > clean.rounding_spread
    unstopped = reset_isolation(replace(ctx(path("full"), path("static")), stop_at_first_failure=True), params)
    assert unstopped.status == "pass" and set(unstopped.evidence["requests"]) == {"first", "second"}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_checks_run_on_cuda(dtype: str) -> None:
    from gate.adapters.reference import Options, ReferenceAdapter

    def build(kind: str) -> Any:
        return ReferenceAdapter().build(Options(path=kind, max_len=1024), device="cuda", dtype=dtype, seed=0)

    reference, candidate = build("full"), build("static")
    context = ctx(reference, candidate, dtype=dtype)
    context.device = "cuda"
    assert prefix_sweep(context, PrefixSweepParams(longest=1023)).status in ("pass", "warn")
    assert mask_oracle(context, MaskOracleParams()).status == "pass"
    faulty = ctx(reference, candidate.with_fault("mask-origin-reset"), dtype=dtype)
    assert prefix_sweep(faulty, PrefixSweepParams()).status == "fail"


def test_a_tolerance_claim_denies_logits_beyond_the_allowance_an_int8_cache_called_a_layout() -> None:
    from gate.adapters.reference import Options, ReferenceAdapter

    lying = ReferenceAdapter().build(
        Options(path="quantized", preset="tiny", max_len=MAX_LEN, quant={"bits": 8, "group_size": 32}),
        device="cpu",
        dtype="float32",
        seed=0,
    )
    out = prefix_sweep(ctx(path("full"), lying), PrefixSweepParams(longest=MAX_LEN - 1))
    assert out.status == "fail" and "beyond 2x" in out.message
    assert out.metrics["beyond_allowance"] >= 0.9 * out.metrics["lengths"]  # |Δ| at most lengths, not near-ties
    assert out.diagnosis is not None and out.diagnosis["bug_class"] == "approximation"
    # the same logits under a greedy-tokens claim only warn about |Δ| (flips decide there)
    greedy = prefix_sweep(
        ctx(path("full"), lying, claim={"level": "greedy-tokens", "tokens": [8]}),
        PrefixSweepParams(longest=MAX_LEN - 1),
    )
    assert greedy.metrics["beyond_allowance"] == 0


def test_lengths_the_policy_wants_but_the_path_cannot_reach_are_unproven() -> None:
    out = prefix_sweep(ctx(path("full"), path("static")), PrefixSweepParams(log_spaced=8))
    assert out.status == "unproven" and "[2000, 8000]" in out.message
    assert out.evidence["coverage"] == {
        "wanted": [0, 1, 2, 16, 64, 200, 2000, 8000],
        "scoped_to": None,
        "reachable_longest": MAX_LEN - 1,
        "unreachable": [2000, 8000],
    }


def test_a_failure_from_length_0_still_traces_the_layers() -> None:
    from gate.checks._diagnosis import diagnose

    reference, candidate = path("full"), path("static").with_fault("missing-start-pos")
    tokens = random_tokens(256, 2, 40, 0)
    out = diagnose([0, 8, 16], [True, True, True], [1.0, 2.0, 3.0], reference=reference, candidate=candidate,
                   tokens=tokens, dtype="float32")  # fmt: skip
    assert "tracing_error" not in out and out["traced_prefix_len"] == 8
    assert out["bug_class"] == "positional-index"
