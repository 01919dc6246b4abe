"""Continuous batching on the hf dynamic path: requests join and leave one running batch, each step
one forward of the model mixing prefill and decode; every request's logits match a full pass; a
stale slot is caught by batch-invariance's continuous setting and shrunk by schedule-fuzz."""

from __future__ import annotations

import pytest

from gate.checks.batch_invariance import BatchInvarianceParams, batch_invariance
from gate.checks.schedule_fuzz import ScheduleFuzzParams, schedule_fuzz
from gate.protocols import ContinuousBatching, ContinuousSession
from tests.adapters.hf.subjects import library_reset_keeps_length, path
from tests.support.continuous import assert_matches_full_pass
from tests.support.reference import ctx


@pytest.mark.parametrize("model", ["llama", "gpt2", "mistral-sliding-window"])
def test_joins_and_leaves_match_a_full_pass(model: str) -> None:
    reference, candidate = path(model), path(model, path="dynamic")
    assert isinstance(candidate, ContinuousBatching) and candidate.continuous_batching
    assert not path(model, path="static").continuous_batching
    assert "stale-slot-on-join" not in path(model, path="static").faults()
    session = candidate.new_continuous_session(2)
    assert isinstance(session, ContinuousSession)
    assert_matches_full_pass(reference, session, (40, 12, 9), seed=2)
    ex = session.exercise()
    assert ex["mixed_forwards"] == 2 and ex["slots_reused"] == 1 and ex["cache_class"] == "DynamicCache"


def test_a_stale_slot_fails_the_continuous_setting_and_shrinks_to_three_steps() -> None:
    reference, faulty = path("llama"), path("llama", path="dynamic").with_fault("stale-slot-on-join")
    out = batch_invariance(ctx(reference, faulty), BatchInvarianceParams())
    assert out.status == "fail" and out.diagnosis is not None
    assert out.diagnosis["bug_class"] == "continuous-batching"
    fuzz = schedule_fuzz(ctx(reference, faulty), ScheduleFuzzParams(max_examples=60))
    assert fuzz.status == "fail"
    if library_reset_keeps_length():  # 5.2: the sessions' search finds the library's own reset bug first
        assert fuzz.evidence["reproducer"]["schedule"] == ["prefill 1", "reset", "prefill 1"]
        return
    assert fuzz.evidence["reproducer"]["schedule"] == ["join 1", "leave 0", "join 1"]
