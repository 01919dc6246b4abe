"""What the runner tells its caller while it works, as typed events rather than log text: a check's
start and result and each control's (`run_manifest(events=...)`). A caller that gives no event sink
gets each event as its log line (`as_log`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict

from gate.core.result import ControlOutcome, Status


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    detail: bool = False
    """A detail a reader sees only when asking for more (`gate run -v`)."""
    check: str
    """The check it is about."""

    def line(self) -> str:
        """The event as a log line."""
        raise NotImplementedError

    @property
    def outcome(self) -> str | None:
        """The status or control outcome the line reports (what it is coloured by); None: none."""
        return None


class CheckStarted(_Event):
    """A planned check is about to run."""

    kind: Literal["check-started"] = "check-started"
    step: int
    """Its step on the ladder."""
    severity: str
    """deny or warn."""

    def line(self) -> str:
        return f"check {self.check} (step {self.step}, {self.severity})"


class _ControlEvent(_Event):
    fault: str
    """The fault the control plants."""


class ControlStarted(_ControlEvent):
    """One of a check's negative controls is about to run."""

    kind: Literal["control-started"] = "control-started"
    detail: bool = True
    """Shown with `-v` only: its result follows."""
    expect: str
    """What the control expects of the check (detect or tolerate)."""

    def line(self) -> str:
        return f"  control {self.fault} (expect {self.expect})"


class ControlFinished(_ControlEvent):
    """A negative control's result."""

    kind: Literal["control-finished"] = "control-finished"
    result: ControlOutcome
    """detected, missed, unobservable, ..."""
    detected_at: int | None = None
    """Where the check caught it (the smallest failing length), when it did."""
    message: str = ""

    @property
    def outcome(self) -> str | None:
        return self.result.value

    def line(self) -> str:
        where = f" at {self.detected_at}" if self.detected_at is not None else ""
        return f"  control {self.fault}: {self.result.value}{where}: {self.message}"


class CheckFinished(_Event):
    """A check's result, its controls judged."""

    kind: Literal["check-finished"] = "check-finished"
    status: Status
    message: str = ""

    @property
    def outcome(self) -> str | None:
        return self.status.value

    def line(self) -> str:
        return f"  {self.status.value}: {self.message}"


RunEvent = CheckStarted | ControlStarted | ControlFinished | CheckFinished
"""Every event the runner emits."""

Events = Callable[[RunEvent], None]
"""An event sink."""


def as_log(log: Callable[[str], None]) -> Events:
    """A sink that writes each event as its log line."""
    return lambda event: log(event.line())
