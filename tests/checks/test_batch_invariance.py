"""batch-invariance on the reference decoder and the hf adapter: correct paths pass, each of its
planted faults is detected as a control (the observation changed and the check failed), a path that
does not pad is judged on equal-length batches only, with its power from a generic fault, and the
continuous setting (requests joining and leaving one running batch) catches a stale slot that every
single-request check and every padded batch misses."""

from __future__ import annotations

import pytest
import torch

from gate.checks.batch_invariance import BatchInvarianceParams, batch_invariance
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
