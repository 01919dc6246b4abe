"""What `gate run` shows while it works: the runner's events, log lines, progress inside long checks.

On a terminal: rich styled lines and a live progress bar per task; in CI or when stderr is not a
terminal: plain `[gate]` lines, a long task's every PLAIN_EVERY_S seconds. Colour follows `--color`
(under auto, NO_COLOR and FORCE_COLOR). Verbosity: 0 (`-q`) only errors; 1 checks, results,
controls and progress; 2 (`-v`) adds each check's detail lines and each control's announcement.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Literal

from gate._util.text import one_line
from gate.engine.events import RunEvent

ColorMode = Literal["auto", "always", "never"]

PLAIN_EVERY_S = 10.0
"""In CI a long task prints a progress line at most this often."""

STATUS_STYLES = {
    "pass": "green",
    "fail": "bold red",
    "error": "bold red",
    "warn": "yellow",
    "unproven": "yellow",
    "waived": "cyan",
    "skip": "dim",
    "not-applicable": "dim",
    # control outcomes
    "detected": "green",
    "tolerated": "green",
    "missed": "bold red",
    "over-rejected": "bold red",
    "unobservable": "yellow",
    "unsupported": "dim",
}
"""Terminal colour per check status and control outcome."""


def style_of(event: RunEvent) -> str | None:
    """The terminal style of an event: by the status or control outcome it reports."""
    return STATUS_STYLES.get(event.outcome) if event.outcome is not None else None


class Reporter:
    """The sink for the runner's `events`, `log` and `progress` callbacks."""

    def __init__(self, verbosity: int = 1, color: ColorMode = "auto", plain: bool | None = None) -> None:
        self.verbosity = verbosity
        self.plain = (bool(os.environ.get("CI")) or not sys.stderr.isatty()) if plain is None else plain
        self.color = color
        self._console: Any = None
        self._bars: Any = None
        self._tasks: dict[str, Any] = {}
        self._plain_seen: dict[str, float] = {}
        self._started: dict[str, float] = {}

    def console(self) -> Any:
        if self._console is None:
            from rich.console import Console

            options: dict[str, Any] = {"stderr": True, "highlight": False}
            if self.color == "always":
                options.update(force_terminal=True, no_color=False)
            elif self.color == "never":
                options.update(no_color=True)
            self._console = Console(**options)
        return self._console

    def event(self, event: RunEvent) -> None:
        """One of the runner's events, as its line, coloured by what it reports."""
        if self.verbosity <= 0 or (self.verbosity < 2 and event.detail):
            return
        self._print(event.line(), style_of(event))

    def log(self, message: str) -> None:
        if self.verbosity <= 0 or (self.verbosity < 2 and message.startswith("  ")):  # a detail line: -v only
            return
        self._print(message, None)

    def _print(self, message: str, style: str | None) -> None:
        if not self._tasks:
            self.close()
        if self.plain and self.color != "always":
            print(f"[gate] {one_line(message)}", file=sys.stderr, flush=True)
            return
        self.console().print(one_line(message), style=style, highlight=False, markup=False)

    def progress(self, task: str, done: int, total: int) -> None:
        if self.verbosity <= 0 or total <= 0:
            return
        now = time.monotonic()
        started = self._started.setdefault(task, now)
        if self.plain:
            last = self._plain_seen.get(task)
            if done >= total or last is None or now - last >= PLAIN_EVERY_S:
                self._plain_seen[task] = now
                print(f"[gate]   {task}: {done}/{total} ({now - started:.0f} s)", file=sys.stderr, flush=True)
            if done >= total:
                self._started.pop(task, None)
                self._plain_seen.pop(task, None)
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        if self._bars is None:
            self._bars = Progress(
                TextColumn("  {task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=self.console(),
                transient=True,
            )
            self._bars.start()
        if task not in self._tasks:
            self._tasks[task] = self._bars.add_task(task, total=total)
        self._bars.update(self._tasks[task], completed=done, total=total)
        if done >= total:
            self._bars.remove_task(self._tasks.pop(task))
            self._started.pop(task, None)

    def close(self) -> None:
        if self._bars is not None:
            self._bars.stop()
            self._bars = None
            self._tasks.clear()
