"""The runner's control engine and verdict logic, on a toy path whose faults are known exactly.

The toy path is the smallest DecodePath that lets each control outcome happen on purpose; real
checks on real models are tested in their own files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from pydantic import Field

from gate.core.check import CheckContext, Outcome, Params, check
from gate.core.manifest import ClaimLevel
from gate.core.plan import PlannedCheck
from gate.core.policy import ControlSpec
from gate.core.result import ControlOutcome, Status, Verdict
from gate.engine.profile import ForwardClock, Stopwatch
from gate.engine.run_cache import RunCache
from gate.engine.runner import decide, run_check
from gate.errors import EXIT_ENGINE_TIMEOUT, EngineTimeout
from gate.protocols import subject_call


@dataclass
class ToyPath:
    """Logits are a fixed tensor; a fault adds `shift` to them (or nothing, for 'inert')."""

    shift: float = 0.0
    name: str = "toy"
    vocab_size: int = 4
    max_len: int = 8
    uses_cache: bool = True
    dtype: str = "float32"
    applied: list[str] = field(default_factory=list)

    def identity(self) -> dict[str, Any]:
        return {}

    def faults(self) -> tuple[str, ...]:
        return ("big", "small", "inert")

    def with_fault(self, fault: str) -> ToyPath:
        return ToyPath(shift={"big": 1.0, "small": 1e-6, "inert": 0.0}[fault], applied=[fault])

    def logits(self) -> torch.Tensor:
        return torch.arange(4.0) + self.shift


class ToyParams(Params):
    threshold: float = 0.5
    exercise: bool = True
    raise_error: bool = False
    engine_timeout: bool = False
    crash: str = ""
    """Raise inside a subject call: "always", "faulted" (only under a fault) or "" (never)."""
    skip: bool = False
    spread: float | None = None
    """The clean run's rounding spread (Outcome.rounding_spread)."""
    underpowered: dict[str, str] = Field(default_factory=dict)
    """Faults below the check's power at these settings (Outcome.underpowered)."""


@check("toy", params=ToyParams)
def toy(ctx: CheckContext, params: ToyParams) -> Outcome:
    if params.raise_error:
        raise RuntimeError("boom")
    if params.engine_timeout:
        raise EngineTimeout("candidate: POST /v1/completions got no reply within 1s")
    if params.skip:
        return Outcome(status="skip", message="the path offers no probe")
    if params.crash == "always" or (params.crash == "faulted" and ctx.candidate.applied):  # type: ignore[attr-defined]
        with subject_call("ToyModel.forward", length=5):
            raise IndexError("index 7 is out of bounds")
    observed = ctx.candidate.logits()  # type: ignore[attr-defined]
    delta = float((observed - torch.arange(4.0)).abs().max())
    return Outcome(
        status="fail" if delta > params.threshold else "pass",
        message=f"delta {delta}",
        metrics={"delta": delta, "stop_at_first_failure": ctx.stop_at_first_failure},
        exercise={"steps": 1} if params.exercise else {},
        observation=observed,
        detected_at=3 if delta > params.threshold else None,
        rounding_spread=params.spread,
        underpowered=params.underpowered,
    )


def _run(controls: list[ControlSpec], clock: ForwardClock | None = None, candidate: Any = None, **params: Any):  # type: ignore[no-untyped-def]
    planned = PlannedCheck(
        check="toy", step=4, severity="deny", why="test", source="test", available=True, controls=controls
    )
    ctx = CheckContext(
        manifest=None,
        reference=ToyPath(),
        candidate=candidate or ToyPath(),
        seed=0,
        device="cpu",
        dtype="float32",
    )
    return run_check(planned, toy, ToyParams(**params), ctx, clock=clock)


def test_detected_control_keeps_pass_and_records_length() -> None:
    result = _run([ControlSpec(fault="big")])
    assert result.status == Status.passed
    (control,) = result.controls
    assert control.outcome == ControlOutcome.detected and control.detected_at == 3
    assert control.output_difference == 1.0


def test_controls_run_in_stop_mode_and_record_their_own_time() -> None:
    with ForwardClock() as clock:
        result = _run([ControlSpec(fault="big"), ControlSpec(fault="inert")], clock)
    assert result.metrics["stop_at_first_failure"] is False  # the positive run covers everything
    assert all(c.metrics["stop_at_first_failure"] is True for c in result.controls)
    assert all(c.duration_s > 0 and c.forward_s is not None for c in result.controls)
    assert result.positive_s > 0 and result.duration_s >= result.positive_s + sum(c.duration_s for c in result.controls)


@dataclass
class _SlowStorePath(ToyPath):
    """A toy path whose logits come out of the subject's own (non-forward) code, taking `store_s`
    seconds on a fake clock: the time the profile must book as the subject's."""

    ticks: list[float] = field(default_factory=lambda: [0.0])
    store_s: float = 2.0

    def with_fault(self, fault: str) -> ToyPath:
        shift = {"big": 1.0, "small": 1e-6, "inert": 0.0}[fault]
        return _SlowStorePath(shift=shift, applied=[fault], ticks=self.ticks, store_s=self.store_s / 2)

    def logits(self) -> torch.Tensor:
        with subject_call("Store.lookup"):
            self.ticks[0] += self.store_s
        self.ticks[0] += 0.25  # the adapter's glue, outside the region: gate's side
        return torch.arange(4.0) + self.shift


def test_a_check_and_each_control_record_the_subjects_time_apart_from_gates() -> None:
    path = _SlowStorePath()
    with ForwardClock(now=lambda: path.ticks[0]) as clock:
        result = _run([ControlSpec(fault="big"), ControlSpec(fault="inert")], clock, candidate=path)
    assert result.status == Status.passed
    # the positive run (2 s in the store) and two controls (1 s each); no forwards at all
    assert result.forward_s == 0.0
    assert result.subject_s == 4.0
    assert result.positive_s == 2.25 and result.duration_s == 2.25 + 2 * 1.25
    for control in result.controls:
        assert control.subject_s == 1.0 and control.forward_s == 0.0
        assert control.duration_s == 1.25  # a control's own duration: its store time and the glue


def test_forward_clock_counts_outermost_module_calls_only() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(4, 4)))
    with ForwardClock() as clock, Stopwatch(clock) as watch:
        for _ in range(20):
            model(torch.ones(2, 4))
    assert 0 < watch.forward_s <= watch.wall_s  # type: ignore[operator]
    before = clock.elapsed()
    model(torch.ones(2, 4))  # uninstalled: not counted
    assert clock.elapsed() == before


def test_run_cache_computes_once_per_key_and_matches_paths_by_identity() -> None:
    cache, calls = RunCache(), []
    a, b = ToyPath(), ToyPath()  # equal dataclasses, distinct paths
    tokens = torch.arange(6).view(2, 3)

    def compute(tag: str) -> torch.Tensor:
        calls.append(tag)
        return torch.zeros(3)

    cache.get(("rows", a, tokens, [1, 2]), lambda: compute("a"))
    cache.get(("rows", a, tokens.clone(), [1, 2]), lambda: compute("a again"))  # same content
    cache.get(("rows", b, tokens, [1, 2]), lambda: compute("b"))
    cache.get(("rows", a, tokens + 1, [1, 2]), lambda: compute("other tokens"))
    assert calls == ["a", "b", "other tokens"]
    assert cache.stats()["hits"] == 1 and cache.stats()["entries"] == 3


def test_missed_control_fails_the_check_with_no_power() -> None:
    result = _run([ControlSpec(fault="big"), ControlSpec(fault="small")])
    assert result.status == Status.failed
    assert result.message == "check toy has no power against fault small"
    assert result.controls[1].outcome == ControlOutcome.missed


def test_inert_fault_is_unobservable_not_missed() -> None:
    result = _run([ControlSpec(fault="big"), ControlSpec(fault="inert")])
    assert result.status == Status.passed
    assert result.controls[1].outcome == ControlOutcome.unobservable


def test_no_control_that_could_show_anything_is_unproven_not_a_failure() -> None:
    result = _run([ControlSpec(fault="inert"), ControlSpec(fault="nonexistent")])
    assert result.status == Status.unproven
    assert "could show anything on this path" in result.message
    assert result.controls[0].outcome == ControlOutcome.unobservable
    assert result.controls[1].outcome == ControlOutcome.unsupported


def test_a_control_below_the_checks_power_is_unobservable_never_missed() -> None:
    """One rule for every control: a fault the check declares below its power at these settings
    (Outcome.underpowered) that it passes is unobservable, with the settings that would show it."""
    result = _run([ControlSpec(fault="big"), ControlSpec(fault="small")], underpowered={"small": "lower threshold"})
    assert result.status == Status.passed, result.message
    small = result.controls[1]
    assert small.outcome == ControlOutcome.unobservable and small.metrics["observable_with"] == "lower threshold"
    assert "below the check's power (lower threshold)" in small.message
    # a fault declared underpowered that the check catches all the same is detected
    caught = _run([ControlSpec(fault="big")], underpowered={"big": "lower threshold"})
    assert caught.status == Status.passed and caught.controls[0].outcome == ControlOutcome.detected


def test_a_check_whose_every_control_is_below_its_power_is_unproven_naming_the_settings() -> None:
    result = _run([ControlSpec(fault="small")], underpowered={"small": "threshold below 1e-6"})
    assert result.status == Status.unproven
    assert "to make them observable: small: threshold below 1e-6" in result.message
    assert "no power" not in result.message


def test_harmless_fault_must_pass() -> None:
    ok = _run([ControlSpec(fault="big"), ControlSpec(fault="small", expect="pass")])
    assert ok.status == Status.passed and ok.controls[1].outcome == ControlOutcome.tolerated
    bad = _run([ControlSpec(fault="big", expect="pass")])
    assert bad.status == Status.failed and bad.controls[0].outcome == ControlOutcome.over_rejected


def test_pass_without_exercise_is_an_error() -> None:
    result = _run([], exercise=False)
    assert result.status == Status.error and "proof of exercise" in result.message


def test_exception_becomes_error_with_traceback() -> None:
    result = _run([ControlSpec(fault="big")], raise_error=True)
    assert result.status == Status.error and result.error is not None
    assert "RuntimeError: boom" in result.message and "Traceback" in result.error.traceback


def test_a_crash_inside_the_subject_is_a_failure_of_class_crash_not_an_error() -> None:
    result = _run([ControlSpec(fault="big")], crash="always")
    assert result.status == Status.failed and result.error is None
    assert result.diagnosis is not None and result.diagnosis["bug_class"] == "crash"
    assert result.diagnosis["exception"] == "IndexError: index 7 is out of bounds"
    assert result.diagnosis["call"] == "ToyModel.forward" and result.diagnosis["length"] == 5
    assert "IndexError" in result.diagnosis["traceback"]
    assert decide([result], ClaimLevel.tolerance)[:2] == (Verdict.failed, 1)
    # gate's own exception (outside a subject call) stays gate's error
    assert _run([ControlSpec(fault="big")], raise_error=True).status == Status.error


def test_a_faulted_subject_that_crashes_counts_as_detected() -> None:
    result = _run([ControlSpec(fault="small")], crash="faulted")
    assert result.status == Status.passed
    assert result.controls[0].outcome == ControlOutcome.detected and "crashed" in result.controls[0].message


def test_a_required_deny_check_that_cannot_run_is_unproven_not_skipped() -> None:
    result = _run([ControlSpec(fault="big")], skip=True)
    assert result.status == Status.unproven and "could not run" in result.message
    assert decide([result], ClaimLevel.tolerance)[:2] == (Verdict.unproven, 6)


def test_verdict_precedence() -> None:
    passing = _run([ControlSpec(fault="big")])
    failing = _run([ControlSpec(fault="small")])
    erroring = _run([], raise_error=True)
    assert decide([passing], ClaimLevel.tolerance)[:2] == (Verdict.passed, 0)
    assert decide([passing, failing], ClaimLevel.tolerance)[:2] == (Verdict.failed, 1)
    assert decide([failing, erroring], ClaimLevel.tolerance)[:2] == (Verdict.error, 3)
    assert decide([passing], ClaimLevel.bounded_degradation)[:2] == (Verdict.awaiting_approval, 4)
    skipped = passing.model_copy(update={"check": "other", "status": Status.skip})
    assert decide([passing, skipped], ClaimLevel.tolerance)[2] == "the one check that ran passed (1 skipped: other)"
    warn = failing.model_copy(update={"severity": "warn"})
    assert decide([passing, warn], ClaimLevel.tolerance)[0] == Verdict.passed


def test_an_engine_error_gives_the_run_its_own_exit_code() -> None:
    timed_out = _run([], engine_timeout=True)
    assert timed_out.status == Status.error and timed_out.metrics["exit_code"] == EXIT_ENGINE_TIMEOUT
    assert decide([_run([ControlSpec(fault="big")]), timed_out], ClaimLevel.tolerance)[:2] == (
        Verdict.error,
        EXIT_ENGINE_TIMEOUT,
    )
    assert decide([_run([], raise_error=True), timed_out], ClaimLevel.tolerance)[1] == 3  # the first error names it


def test_a_control_that_fails_only_within_the_rounding_spread_is_not_power() -> None:
    result = _run([ControlSpec(fault="small"), ControlSpec(fault="big")], threshold=1e-7, spread=1e-3)
    small, big = result.controls
    assert (
        small.outcome == ControlOutcome.unobservable
        and "within the correct path's own rounding spread" in small.message
    )
    assert big.outcome == ControlOutcome.detected and result.status == Status.passed


@dataclass
class RotaryToyPath(ToyPath):
    """A path that declares 'small' invisible on its architecture (as a pure-RoPE model does a uniform shift)."""

    def invisible_faults(self) -> dict[str, str]:
        return {"small": "a uniform shift under pure rotary embeddings changes nothing but rounding"}


def test_a_control_declared_invisible_is_unobservable_up_front_and_leaves_power_unproven() -> None:
    result = _run([ControlSpec(fault="small")], candidate=RotaryToyPath(), threshold=1e-7)
    (control,) = result.controls
    assert control.outcome == ControlOutcome.unobservable and control.kind is None
    assert "declared before running: a uniform shift under pure rotary embeddings" in control.message
    assert result.status == Status.unproven  # no power shown, never a failure of the check nor a pass
