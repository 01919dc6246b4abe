"""schedule-fuzz says how far a correct path may move its probe logits (`Outcome.tolerated_change`),
as prefix-sweep, greedy-parity and batch-invariance do: a control that moved them no further and
passed is unobservable at that dtype, never missed (no lack of power is claimed), while one that
moved them past the band the claim allows is detected."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from gate.checks._compare import DEFAULT_TOLERANCE, DENY_ALLOWANCE
from gate.checks.schedule_fuzz import ScheduleFuzzParams, schedule_fuzz
from gate.core.policy import ControlSpec
from gate.core.result import ControlOutcome
from gate.engine.controls import run_control
from tests.support import reference

PARAMS = ScheduleFuzzParams(max_examples=12, max_steps=4, max_chunk=8, max_tokens=24, joins=False)
ATOL, RTOL = DEFAULT_TOLERANCE["float32"]


class Shifted:
    """A session whose every logit row is shifted by `shift` (argmax unchanged, |Δ| = shift)."""

    def __init__(self, inner: Any, shift: float) -> None:
        self.inner, self.shift = inner, shift

    def prefill(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.inner.prefill(tokens) + self.shift

    def append(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.inner.append(tokens) + self.shift

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class Nudgeable:
    """The reference decoder's static path offering one fault of its own, `nudge`: every logit its
    sessions return moves by `shift` (a uniform move, so no argmax flips; only the claim's bound on
    the logits can see it)."""

    def __init__(self, inner: Any, nudge: float, shift: float = 0.0) -> None:
        self.__dict__.update(inner=inner, nudge=nudge, shift=shift)

    def faults(self) -> tuple[str, ...]:
        return ("nudge",)

    def with_fault(self, fault: str) -> Nudgeable:
        return Nudgeable(self.__dict__["inner"], 0.0, self.__dict__["nudge"])

    def new_session(self, batch_size: int) -> Any:
        session = self.__dict__["inner"].new_session(batch_size)
        return Shifted(session, self.__dict__["shift"]) if self.__dict__["shift"] else session

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["inner"], name)


def _control(shift_in_tolerances: float) -> tuple[Any, Any]:
    """The clean run and the `nudge` control moving every logit by that many times the widest row tolerance."""
    ref, cand = reference.path("full"), Nudgeable(reference.path("static"), 0.0)
    ctx = reference.ctx(ref, cand, claim={"level": "tolerance"})
    clean = schedule_fuzz(ctx, PARAMS)
    assert clean.status == "pass", clean.message
    assert clean.observation is not None and clean.tolerated_change is not None
    widest = ATOL + RTOL * float(clean.observation.abs().max())
    assert clean.tolerated_change == pytest.approx(DENY_ALLOWANCE * widest, rel=1e-3)  # the claim bounds the logits
    cand.__dict__["nudge"] = shift_in_tolerances * widest
    return clean, run_control(schedule_fuzz, ctx, PARAMS, clean, ControlSpec(fault="nudge"))


def test_a_fault_moving_logits_within_the_band_is_unobservable_not_missed() -> None:
    clean, control = _control(0.5)
    assert control.kind == "adapter" and control.applied == "nudge"
    assert control.output_difference is not None and 0 < control.output_difference < clean.tolerated_change
    assert control.outcome == ControlOutcome.unobservable, control.message
    assert "within what the check accepts of a correct path" in control.message


def test_a_fault_moving_logits_past_the_band_is_detected() -> None:
    clean, control = _control(3.0)
    assert control.output_difference is not None and control.output_difference > clean.tolerated_change
    assert control.outcome == ControlOutcome.detected, control.message
