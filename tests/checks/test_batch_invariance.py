"""batch-invariance on the reference decoder and the hf adapter: correct paths pass, each of its
planted faults is detected as a control (the observation changed and the check failed), a path that
does not pad is judged on equal-length batches only, with its power from a generic fault, and the
continuous setting (requests joining and leaving one running batch) catches a stale slot that every
single-request check and every padded batch misses."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from gate.checks.batch_invariance import BatchInvarianceParams, batch_invariance, probe_order
from gate.core.policy import ControlSpec
from gate.core.result import ControlOutcome
from gate.engine.controls import run_control
from gate.protocols import BatchedSession, BatchedSessions, ContinuousBatching, ContinuousSession
from tests.support.continuous import assert_matches_full_pass
from tests.support.reference import MAX_LEN, ctx, path

CONTROLS = ("padding-in-positions", "pad-attended", "cross-request-handle", "stale-slot-on-join")
PARAMS = BatchInvarianceParams()


@pytest.mark.parametrize("kind", ["static", "dynamic", "chunked"])
def test_reference_paths_pass_and_every_control_is_detected(kind: str) -> None:
    reference, candidate = path("full"), path(kind, **({"chunk_size": 8} if kind == "chunked" else {}))
    assert isinstance(candidate, BatchedSessions) and candidate.padding_sides == ("left", "right")
    context = ctx(reference, candidate)
    clean = batch_invariance(context, PARAMS)
    assert clean.status == "pass", clean.message
    assert set(clean.exercise["batches"]) == {
        "equal-length",
        "left-padded",
        "left-padded, rows reordered",
        "right-padded",
        "continuous",
    }
    continuous = clean.exercise["batches"]["continuous"]
    assert continuous["mixed_forwards"] >= 1 and continuous["slots_reused"] >= 1
    assert continuous["joins"] == continuous["leaves"] == len(PARAMS.lengths)
    assert clean.exercise["batches"]["left-padded"]["pad_tokens"] > 0
    assert clean.exercise["batches"]["left-padded"]["cached_steps"] >= PARAMS.steps - 1
    for fault in CONTROLS:
        result = run_control(batch_invariance, context, PARAMS, clean, ControlSpec(fault=fault))
        assert result.outcome == ControlOutcome.detected, (fault, result.message)


def test_padding_faults_are_diagnosed_as_padding_and_crosstalk_as_crosstalk() -> None:
    reference, candidate = path("full"), path("static")
    for fault, bug in (
        ("padding-in-positions", "padding"),
        ("pad-attended", "padding"),
        ("cross-request-handle", "batch-crosstalk"),
        ("stale-slot-on-join", "continuous-batching"),
    ):
        out = batch_invariance(ctx(reference, candidate.with_fault(fault)), PARAMS)
        assert out.status == "fail" and out.diagnosis is not None, fault
        assert out.diagnosis["bug_class"] == bug, (fault, out.message)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_correct_path_passes_over_seeds_under_a_greedy_claim(seed: int) -> None:
    out = batch_invariance(ctx(path("full"), path("dynamic"), seed=seed, claim={"level": "greedy-tokens"}), PARAMS)
    assert out.status == "pass", out.message


def test_a_padded_batch_hides_the_pad_rows_from_the_check() -> None:
    session = path("static").new_batched_session(2, "left")
    assert isinstance(session, BatchedSession)
    rows = session.prefill([torch.tensor([5, 6, 7]), torch.tensor([9])])
    assert [tuple(r.shape) for r in rows] == [(3, 256), (1, 256)]
    with pytest.raises(ValueError, match="prefill-only"):
        path("static").new_batched_session(2, "right").append(torch.zeros(2, 1, dtype=torch.long))


def test_a_path_that_does_not_pad_runs_equal_length_batches_and_gets_power_from_handle_swap() -> None:
    reference, candidate = path("full"), path("static")

    class Unpadded:
        """The static path seen through the Session protocol only (no BatchedSessions)."""

        name, vocab_size, max_len, uses_cache, dtype = "unpadded", 256, candidate.max_len, True, "float32"

        def identity(self) -> dict[str, object]:
            return {}

        def full_logits(self, tokens: torch.Tensor) -> torch.Tensor:
            return candidate.full_logits(tokens)

        def new_session(self, batch: int) -> object:
            return candidate.new_session(batch)

        def faults(self) -> tuple[str, ...]:
            return ()

        def with_fault(self, fault: str) -> object:
            raise AssertionError(fault)

    context = ctx(reference, Unpadded())
    clean = batch_invariance(context, PARAMS)
    assert clean.status == "pass" and "only equal-length" in clean.message
    assert list(clean.exercise["batches"]) == ["equal-length"]
    assert "does not batch continuously" in clean.evidence["continuous"]
    handle = run_control(batch_invariance, context, PARAMS, clean, ControlSpec(fault="cross-request-handle"))
    assert handle.outcome == ControlOutcome.detected and handle.kind == "generic"
    padding = run_control(batch_invariance, context, PARAMS, clean, ControlSpec(fault="pad-attended"))
    assert padding.outcome == ControlOutcome.unsupported


@pytest.mark.parametrize(("model", "kind"), [("llama", "dynamic"), ("gpt2", "static")])
def test_hf_paths_pad_through_attention_mask_and_position_ids(model: str, kind: str) -> None:
    pytest.importorskip("transformers")
    from tests.adapters.hf.subjects import path as hf_path

    reference, candidate = hf_path(model), hf_path(model, path=kind)
    assert candidate.padding_sides == ("left", "right")
    context = ctx(reference, candidate)
    clean = batch_invariance(context, PARAMS)
    assert clean.status == "pass", clean.message
    for fault in [f for f in CONTROLS if f in candidate.faults()]:
        result = run_control(batch_invariance, context, PARAMS, clean, ControlSpec(fault=fault))
        assert result.outcome == ControlOutcome.detected, (fault, result.message)
    assert "pad-attended" not in hf_path(model, path="full").faults()


def test_a_stale_slot_is_seen_only_by_the_continuous_setting() -> None:
    from gate.checks.greedy_parity import GreedyParityParams, greedy_parity
    from gate.checks.mask_oracle import MaskOracleParams, mask_oracle
    from gate.checks.prefix_sweep import PrefixSweepParams, prefix_sweep
    from gate.checks.reset_isolation import ResetIsolationParams, reset_isolation

    reference, faulty = path("full"), path("static").with_fault("stale-slot-on-join")
    for spec, params in (
        (prefix_sweep, PrefixSweepParams(longest=MAX_LEN - 1, log_spaced=8)),
        (greedy_parity, GreedyParityParams(prompt_lengths=[5], tokens=[8])),
        (mask_oracle, MaskOracleParams()),
        (reset_isolation, ResetIsolationParams()),
    ):
        assert spec(ctx(reference, faulty), params).status == "pass", spec.name  # type: ignore[operator]
    out = batch_invariance(ctx(reference, faulty, claim={"level": "greedy-tokens"}), PARAMS)
    assert out.status == "fail" and out.diagnosis is not None
    assert out.diagnosis["setting"].startswith("continuous")
    assert all(r["ok"] for r in out.evidence["results"] if not r["setting"].startswith("continuous"))


def test_a_continuous_session_mixes_prefill_and_decode_in_one_forward() -> None:
    reference, candidate = path("full"), path("dynamic")
    assert isinstance(candidate, ContinuousBatching) and candidate.continuous_batching
    assert not path("full").continuous_batching
    session = candidate.new_continuous_session(2)
    assert isinstance(session, ContinuousSession)
    assert_matches_full_pass(reference, session, (11, 9, 6), seed=4)
    ex = session.exercise()
    assert ex["forwards"] == 4 and ex["mixed_forwards"] == 2 and ex["slots_reused"] == 1
    with pytest.raises(ValueError, match="slots is taken"):
        session.join()  # b and c hold both slots


SIDES = ["none", "left", "left", "right", "continuous"]
"""The kinds of the default settings: equal-length, left-padded (twice), right-padded, continuous."""


def test_a_control_probes_first_the_settings_its_fault_names_and_a_positive_run_keeps_the_order() -> None:
    assert probe_order(SIDES, None) == [0, 1, 2, 3, 4]
    assert probe_order(SIDES, "pad-attended") == [1, 2, 3, 0, 4]
    assert probe_order(SIDES, "padding-in-positions") == [1, 2, 3, 0, 4]
    assert probe_order(SIDES, "stale-slot-on-join") == [4, 0, 1, 2, 3]
    assert probe_order(SIDES, "cross-request-handle") == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    "fault",
    [*CONTROLS, "mask-origin-reset", "stale-weights", "truncated-last-block"],
)
def test_a_control_finds_what_the_full_walk_finds_where_it_finds_it(fault: str) -> None:
    """Batches first, stopping at the first failing forward, then the failing request alone: the same
    setting, request, position and diagnosis as the positive run's order walked in full (alone first),
    also for a fault that shows alone (the failure is then the first request that fails alone)."""
    reference, faulty = path("full"), path("static").with_fault(fault)
    full = batch_invariance(ctx(reference, faulty), PARAMS)
    stopped = batch_invariance(replace(ctx(reference, faulty), control=fault, stop_at_first_failure=True), PARAMS)
    assert full.status == stopped.status == "fail"
    assert full.diagnosis is not None and stopped.diagnosis is not None
    assert stopped.detected_at == full.detected_at
    assert stopped.diagnosis["setting"] == full.diagnosis["setting"]
    assert stopped.diagnosis["bug_class"] == full.diagnosis["bug_class"]
    assert stopped.message.split(" (it fails alone")[0] == full.message.split(" (it fails alone")[0]
    assert len(stopped.evidence["results"]) < len(full.evidence["results"])  # it stopped early
    if full.diagnosis["bug_class"] != "uncertain":  # a batching bug: the request was confirmed alone
        confirmed = stopped.evidence["first_failure"]["alone_holds_through"]
        assert confirmed == stopped.detected_at
        assert [r["setting"] for r in stopped.evidence["results"]][-1] == "alone"


def test_a_padding_control_runs_only_the_padded_batch_and_one_request_alone() -> None:
    reference, candidate = path("full"), path("static")
    context = ctx(reference, candidate)
    clean = batch_invariance(context, PARAMS)
    faulty = batch_invariance(
        replace(
            context, candidate=candidate.with_fault("pad-attended"), control="pad-attended", stop_at_first_failure=True
        ),
        PARAMS,
    )
    settings = [r["setting"] for r in faulty.evidence["results"]]
    assert settings == [f"left-padded (row {i})" for i in range(len(PARAMS.lengths))] + ["alone"]
    assert all(r["rows"] == r["prompt_len"] for r in faulty.evidence["results"][:-1])  # stopped after prefill
    assert clean.evidence["results"][0]["setting"] == "alone"  # the positive run: every request alone first
    assert [r["setting"] for r in clean.evidence["results"]].count("alone") == len(PARAMS.lengths) + 2 * 2


def test_a_control_that_finds_nothing_walks_everything_and_lines_up_with_the_positive_run() -> None:
    """A fault batch-invariance cannot see (reset-keeps-position: no request is reset) walks every
    batch and every request alone, in another order, yet its observation is laid out as the positive
    run's: the engine measures Δ = 0 and reports it unobservable, not missed."""
    reference, candidate = path("full"), path("static")
    context = ctx(reference, candidate)
    clean = batch_invariance(context, PARAMS)
    result = run_control(batch_invariance, context, PARAMS, clean, ControlSpec(fault="reset-keeps-position"))
    assert result.outcome == ControlOutcome.unobservable and result.output_difference == 0.0
