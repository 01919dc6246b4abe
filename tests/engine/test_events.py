"""The runner's typed events (gate.engine.events): what it emits, in order, and the log lines a
caller without an event sink reads instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from gate.core.check import CheckContext
from gate.core.plan import PlannedCheck
from gate.core.policy import ControlSpec
from gate.core.result import ControlOutcome, Status
from gate.engine.events import CheckFinished, ControlFinished, ControlStarted, RunEvent
from gate.engine.runner import run_check, run_manifest
from gate.errors import UnavailableError
from tests.engine.test_controls import ToyParams, ToyPath, toy
from tests.support.repo import EXAMPLES


def _planned() -> PlannedCheck:
    controls = [ControlSpec(fault="big", expect="detect"), ControlSpec(fault="inert", expect="detect")]
    return PlannedCheck(
        check="toy", step=4, severity="deny", why="test", source="test", available=True, controls=controls
    )


def _ctx(lines: list[str]) -> CheckContext:
    return CheckContext(
        manifest=None, reference=ToyPath(), candidate=ToyPath(), seed=0, device="cpu", dtype="float32", log=lines.append
    )


def test_each_control_emits_its_start_and_its_result() -> None:
    events: list[RunEvent] = []
    lines: list[str] = []
    result = run_check(_planned(), toy, ToyParams(), _ctx(lines), events=events.append)
    assert [type(e) for e in events] == [ControlStarted, ControlFinished, ControlStarted, ControlFinished]
    big, inert = events[1], events[3]
    assert isinstance(big, ControlFinished) and isinstance(inert, ControlFinished)
    assert (big.fault, big.result, big.detected_at) == ("big", ControlOutcome.detected, 3)
    assert inert.result == ControlOutcome.unobservable
    assert [(c.fault, c.outcome) for c in result.controls] == [(big.fault, big.result), (inert.fault, inert.result)]
    assert not any("control" in line for line in lines)  # the events went to the sink, not the log


def test_without_a_sink_the_events_are_log_lines() -> None:
    events: list[RunEvent] = []
    lines: list[str] = []
    run_check(_planned(), toy, ToyParams(), _ctx([]), events=events.append)
    run_check(_planned(), toy, ToyParams(), _ctx(lines))
    assert lines == [e.line() for e in events]
    assert lines[1].startswith("  control big: detected at 3: ")


def test_a_check_result_line() -> None:
    event = CheckFinished(check="toy", status=Status.unproven, message="no control could show anything")
    assert event.line() == "  unproven: no control could show anything" and event.outcome == "unproven"


# The broad "adapter could not run" relabelling covers building a path, nothing after it ---------


def _adapter_that(fails_in: str) -> type:
    from gate.adapters.reference import ReferenceAdapter

    class Adapter(ReferenceAdapter):  # type: ignore[misc,valid-type]
        def build(self, options: object, **kwargs: object) -> object:
            if fails_in == "build":
                raise RuntimeError("no driver for this device")
            path = super().build(options, **kwargs)

            class Broken(type(path)):  # type: ignore[misc]
                def identity(self) -> dict[str, object]:
                    raise RuntimeError("gate's own bug")

            path.__class__ = Broken
            return path

    return Adapter


@pytest.mark.parametrize("fails_in", ["build", "identity"])
def test_only_building_a_path_is_relabelled_adapter_could_not_run(
    fails_in: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from gate.core import registry

    monkeypatch.setattr(registry, "load_adapter", lambda _name: _adapter_that(fails_in))
    if fails_in == "build":
        with pytest.raises(UnavailableError, match="adapter could not run: RuntimeError: no driver"):
            run_manifest(EXAMPLES / "reference-static-layout.yaml", tmp_path)
    else:
        with pytest.raises(RuntimeError, match="gate's own bug"):
            run_manifest(EXAMPLES / "reference-static-layout.yaml", tmp_path)
    assert not (tmp_path / "results.json").exists()
