"""The terminal progress log colours each check's result line by its status."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from gate.cli import common
from gate.core.result import Status


@pytest.mark.parametrize("status", list(Status), ids=lambda s: s.value)
def test_every_status_line_the_runner_logs_has_a_colour(status: Status) -> None:
    line = f"  {status.value}: what the check found"  # the runner's format (gate.engine.runner)
    found = common.STATUS_LINE.match(line)
    assert found is not None and found.group(1) in common.STATUS_STYLES


def test_progress_lines_are_coloured_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    buffer = io.StringIO()
    monkeypatch.setattr(common, "is_ci", lambda: False)
    monkeypatch.setattr(
        "rich.console.Console", lambda **_: Console(file=buffer, force_terminal=True, color_system="standard")
    )
    log = common.progress_logger()
    log("  fail: prefix-sweep diverged at length 2")
    log("check prefix-sweep (step 4, deny)")
    coloured, plain = buffer.getvalue().splitlines()
    assert "\x1b[1;31m" in coloured  # bold red
    assert "\x1b[" not in plain
