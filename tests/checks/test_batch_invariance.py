"""batch-invariance on the reference decoder and the hf adapter: correct paths pass, each of its
three planted faults is detected as a control (the observation changed and the check failed), and a
path that does not pad is judged on equal-length batches only, with its power from a generic fault."""

from __future__ import annotations

import pytest
import torch

from gate.checks.batch_invariance import BatchInvarianceParams, batch_invariance
from gate.core.policy import ControlSpec
from gate.core.result import ControlOutcome
from gate.engine.controls import run_control
from gate.protocols import BatchedSession, BatchedSessions
from tests.support.reference import ctx, path

CONTROLS = ("padding-in-positions", "pad-attended", "cross-request-handle")
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
    }
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
    for fault in CONTROLS:
        result = run_control(batch_invariance, context, PARAMS, clean, ControlSpec(fault=fault))
        assert result.outcome == ControlOutcome.detected, (fault, result.message)
    assert "pad-attended" not in hf_path(model, path="full").faults()
