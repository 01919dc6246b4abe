"""What `gate run` shows while it works: coloured result and control lines, progress, -q/-v, --color."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from gate.cli import progress
from gate.cli.progress import Reporter
from gate.core.result import ControlOutcome, Status
from gate.engine.events import CheckFinished, CheckStarted, ControlFinished, ControlStarted


@pytest.mark.parametrize("status", list(Status), ids=lambda s: s.value)
def test_every_check_result_has_a_colour(status: Status) -> None:
    assert progress.style_of(CheckFinished(check="prefix-sweep", status=status, message="found")) is not None


@pytest.mark.parametrize("outcome", list(ControlOutcome), ids=lambda o: o.value)
def test_every_control_outcome_has_a_colour(outcome: ControlOutcome) -> None:
    event = ControlFinished(check="greedy-parity", fault="wrong-start-pos", result=outcome, detected_at=512)
    assert progress.style_of(event) == progress.STATUS_STYLES[outcome.value]
    assert not event.detail


def _terminal(monkeypatch: pytest.MonkeyPatch, reporter: Reporter, **console: object) -> io.StringIO:
    buffer = io.StringIO()
    options = {"file": buffer, "force_terminal": True, "color_system": "standard", "width": 100, **console}
    monkeypatch.setattr(reporter, "_console", Console(**options))  # type: ignore[arg-type]
    return buffer


def test_result_and_control_lines_are_coloured_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    reporter = Reporter(verbosity=2, plain=False)
    buffer = _terminal(monkeypatch, reporter)
    reporter.event(CheckFinished(check="prefix-sweep", status=Status.failed, message="diverged at length 2"))
    reporter.event(
        ControlFinished(
            check="prefix-sweep", fault="mask-origin-reset", result=ControlOutcome.missed, message="still passed"
        )
    )
    reporter.event(CheckStarted(check="prefix-sweep", step=4, severity="deny"))
    reporter.log("  fail: a check's own line that reads like a result")
    failed, missed, plain, detail = buffer.getvalue().splitlines()
    assert "\x1b[1;31m" in failed and "\x1b[1;31m" in missed  # bold red
    assert "\x1b[" not in plain and "\x1b[" not in detail  # log text is never read for a status


def test_color_never_and_no_color_print_no_escapes(monkeypatch: pytest.MonkeyPatch) -> None:
    never = Reporter(plain=False, color="never")
    assert never.console().no_color
    monkeypatch.setenv("NO_COLOR", "1")
    auto = Reporter(plain=False, color="auto")
    buffer = io.StringIO()
    console = auto.console()
    console.file = buffer
    console.print("  fail: x", style=progress.style_of(CheckFinished(check="c", status=Status.failed)))
    assert "\x1b[31" not in buffer.getvalue() and "\x1b[1;31" not in buffer.getvalue()


def test_color_always_colours_even_in_ci(capsys: pytest.CaptureFixture[str]) -> None:
    reporter = Reporter(plain=True, color="always")
    assert reporter.console().is_terminal
    reporter.console().file = io.StringIO()
    reporter.event(CheckFinished(check="c", status=Status.failed, message="x"))
    assert "\x1b[" in reporter.console().file.getvalue()


def test_quiet_prints_nothing_and_verbose_adds_detail_lines(capsys: pytest.CaptureFixture[str]) -> None:
    quiet, normal, verbose = Reporter(0, plain=True), Reporter(1, plain=True), Reporter(2, plain=True)
    started = CheckStarted(check="prefix-sweep", step=4, severity="deny")
    announced = ControlStarted(check="prefix-sweep", fault="wrong-start-pos", expect="detect")
    found = ControlFinished(check="prefix-sweep", fault="wrong-start-pos", result=ControlOutcome.detected)
    finished = CheckFinished(check="prefix-sweep", status=Status.passed, message="96 lengths agree")
    for reporter in (quiet, normal, verbose):
        reporter.event(started)
        reporter.log("  96 lengths up to 2047, batch 2, compare full")  # a check's own detail line
        reporter.event(announced)
        reporter.event(found)
        reporter.event(finished)
        reporter.progress("lengths swept", 96, 96)
    err = capsys.readouterr().err.splitlines()
    for event in (started, found, finished):  # normal and verbose, not quiet
        assert err.count(f"[gate] {event.line()}") == 2
    assert err.count("[gate]   96 lengths up to 2047, batch 2, compare full") == 1  # verbose only
    assert err.count(f"[gate] {announced.line()}") == 1  # verbose only: its result follows
    assert err.count("[gate]   lengths swept: 96/96 (0 s)") == 2


def test_plain_progress_is_periodic_in_ci(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    clock = iter([0.0, 1.0, 2.0, 12.5, 13.0, 30.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    reporter = Reporter(plain=True)
    for done in (1, 2, 3, 4, 5, 6):
        reporter.progress("samples drawn", done * 100, 600)
    lines = capsys.readouterr().err.splitlines()
    # the first, one after PLAIN_EVERY_S seconds, and the last
    assert lines == [
        "[gate]   samples drawn: 100/600 (0 s)",
        "[gate]   samples drawn: 400/600 (12 s)",
        "[gate]   samples drawn: 600/600 (30 s)",
    ]


def test_rich_progress_bar_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    reporter = Reporter(plain=False)
    _terminal(monkeypatch, reporter)
    reporter.progress("reference-paged: lengths swept", 10, 96)
    assert reporter._bars is not None and len(reporter._bars.tasks) == 1
    task = reporter._bars.tasks[0]
    assert (task.completed, task.total, task.description) == (10, 96, "reference-paged: lengths swept")
    reporter.progress("reference-paged: lengths swept", 96, 96)
    assert reporter._tasks == {}
    reporter.close()
    assert reporter._bars is None
