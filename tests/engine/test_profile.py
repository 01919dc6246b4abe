"""`gate run --profile`: the three time buckets the clock keeps and the table it prints.

No timed assertions: the clock reads a fake time source the tests advance by hand.
"""

from __future__ import annotations

import pytest
import torch

import tests.report.results as fx
from gate._util import regions
from gate.core.result import time_buckets
from gate.engine.profile import ForwardClock, Stopwatch, profile_lines, run_buckets
from gate.errors import SubjectCrash
from gate.protocols import subject_call


class _Ticks:
    """A fake time source: `advance(seconds)` moves it; nothing here reads the real clock."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class _Busy(torch.nn.Module):
    """A module whose forward 'takes' a given time on the fake clock (and may call the subject)."""

    def __init__(self, ticks: _Ticks, seconds: float, inner_region: float = 0.0) -> None:
        super().__init__()
        self.ticks, self.seconds, self.inner_region = ticks, seconds, inner_region
        self.child = torch.nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.ticks.advance(self.seconds)
        if self.inner_region:
            with subject_call("cache.update"):  # opened inside a forward: stays forward time
                self.ticks.advance(self.inner_region)
        return self.child(x)  # a nested module: counted once, with its outermost forward


def test_profile_lists_every_check_and_control_with_three_buckets() -> None:
    result = fx.passing_run()
    lines = profile_lines(result)
    text = "\n".join(lines)
    for check in result.checks:
        assert check.check in text
        for control in check.controls:
            assert f"control {control.fault}" in text
    sweep = next(line for line in lines if line.strip().startswith("prefix-sweep"))
    # wall, model forwards, the subject's other work, gate's own: from the record
    assert "2.50s" in sweep and "2.30s" in sweep and "0.10s" in sweep
    assert "controls / run: 0.01" in text  # 30 ms of controls over a 2.2 s run
    assert lines[-1].strip().startswith("all checks") and "gate's own work" in lines[-1]
    # with the whole run's wall time, the time outside every check (set-up, outputs) is shown too
    checks_s = sum(check.duration_s for check in result.checks)
    outside = profile_lines(result, run_s=checks_s + 1.25)[-1]
    assert outside.strip().startswith("outside the checks") and "1.25s" in outside


def test_the_profile_buckets_sum_to_the_run() -> None:
    result = fx.passing_run()
    totals = run_buckets(result)
    assert totals is not None
    wall, forward, subject, own = totals
    assert wall == pytest.approx(sum(c.duration_s for c in result.checks))
    assert forward + subject + own == pytest.approx(wall)
    assert forward >= 2.3 and subject >= 0.1 and own >= 0.0
    for check in result.checks:
        if check.forward_s is not None:
            assert sum(time_buckets(check.duration_s, check.forward_s, check.subject_s)) == pytest.approx(
                check.duration_s
            )


def test_time_in_a_subject_region_outside_forwards_is_the_subjects() -> None:
    ticks = _Ticks()
    model = _Busy(ticks, 2.0)
    with ForwardClock(now=ticks) as clock, Stopwatch(clock) as watch:
        with subject_call("store.lookup", length=0):
            ticks.advance(3.0)  # the subject's own work: no module runs
            model(torch.zeros(1))  # a forward inside the region: a model forward, not the subject's
            ticks.advance(0.5)  # the subject again after the forward
        model(torch.zeros(1))  # gate's own oracle forward: a model forward too
        ticks.advance(1.0)  # gate's own work
    assert watch.wall_s == pytest.approx(8.5)
    assert watch.forward_s == pytest.approx(4.0)
    assert watch.subject_s == pytest.approx(3.5)
    assert time_buckets(watch.wall_s, watch.forward_s, watch.subject_s) == pytest.approx((4.0, 3.5, 1.0))
    assert regions.SLOT.observer is None  # the clock uninstalled itself


def test_a_region_opened_inside_a_forward_is_forward_time_and_nested_regions_count_once() -> None:
    ticks = _Ticks()
    with ForwardClock(now=ticks) as clock:
        _Busy(ticks, 1.0, inner_region=2.0)(torch.zeros(1))
        assert clock.elapsed() == pytest.approx(3.0)
        assert clock.subject_elapsed() == 0.0
        with subject_call("outer"):
            ticks.advance(1.0)
            with subject_call("inner"):
                ticks.advance(2.0)
            assert clock.subject_elapsed() == pytest.approx(3.0)  # an open region reads up to now
        assert clock.subject_elapsed() == pytest.approx(3.0)  # the nested region counted once


def test_a_crash_inside_a_region_still_closes_it() -> None:
    ticks = _Ticks()
    with ForwardClock(now=ticks) as clock:
        with pytest.raises(SubjectCrash), subject_call("step", length=3):
            ticks.advance(1.0)
            raise ValueError("boom")
        ticks.advance(5.0)
        assert clock.subject_elapsed() == pytest.approx(1.0)  # closed: nothing accrues after it


def test_without_an_installed_clock_subject_call_observes_nothing() -> None:
    assert regions.SLOT.observer is None
    with subject_call("step"):
        pass
    watch = Stopwatch(None)
    with watch:
        pass
    assert watch.forward_s is None and watch.subject_s is None
