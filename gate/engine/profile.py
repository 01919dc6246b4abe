"""Where a run's time goes, in three buckets: model forwards, the subject's other work, gate's own.

`ForwardClock` times outermost `nn.Module.__call__`s through torch's global module hooks (**model
forwards**) and, outside them, the regions `gate.protocols.subject_call` marks (**the subject's
other work**); the rest is **gate's own work**. The hooks slow every module call (about +10-25% on
a tiny model), so the runner installs the clock only for `gate run --profile`. With no torch
installed the clock times subject regions only.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any

from gate._util import regions
from gate.core.result import time_buckets

if TYPE_CHECKING:
    from collections.abc import Callable

    from gate.core.result import GateResult


class ForwardClock:
    """Seconds inside outermost model forwards and inside the subject's call regions outside
    them, while installed (a context manager). Each thread keeps its own nesting. `now`: the
    time source (tests pass a fake one)."""

    def __init__(self, now: Callable[[], float] = time.perf_counter) -> None:
        self.now = now
        self._local = threading.local()
        self._lock = threading.Lock()
        self._total = self._subject = 0.0
        self._handles: list[Any] = []
        self._replaced: regions.RegionObserver | None = None

    def elapsed(self) -> float:
        """Total forward seconds so far, the one running now included."""
        with self._lock:
            total = self._total
        started = getattr(self._local, "started", None)
        if started is not None and getattr(self._local, "depth", 0) > 0:
            total += self.now() - started
        return total

    def subject_elapsed(self) -> float:
        """Seconds so far inside subject call regions but outside model forwards."""
        with self._lock:
            total = self._subject
        opened = getattr(self._local, "opened", None)
        if opened is not None:
            total += self.now() - opened
        return total

    def _book_subject(self, now: float) -> None:
        opened = getattr(self._local, "opened", None)
        if opened is not None:
            self._local.opened = None
            with self._lock:
                self._subject += now - opened

    def _enter(self, _module: Any, _args: Any) -> None:
        depth = getattr(self._local, "depth", 0)
        if depth == 0:
            now = self.now()
            self._book_subject(now)  # a forward inside a subject region is a forward
            self._local.started = now
        self._local.depth = depth + 1

    def _leave(self, _module: Any, _args: Any, _output: Any) -> None:
        depth = getattr(self._local, "depth", 0) - 1
        self._local.depth = max(depth, 0)
        if depth == 0:
            now = self.now()
            spent = now - self._local.started
            self._local.started = None
            with self._lock:
                self._total += spent
            if getattr(self._local, "regions", 0) > 0:  # back in the subject's own code
                self._local.opened = now

    def subject_enter(self) -> None:
        """A subject call region opens (regions.RegionObserver)."""
        depth = getattr(self._local, "regions", 0)
        self._local.regions = depth + 1
        if depth == 0 and getattr(self._local, "depth", 0) == 0:
            self._local.opened = self.now()

    def subject_leave(self) -> None:
        """A subject call region closes."""
        depth = max(getattr(self._local, "regions", 0) - 1, 0)
        self._local.regions = depth
        if depth == 0:
            self._book_subject(self.now())

    def __enter__(self) -> ForwardClock:
        self._replaced = regions.observe(self)
        try:
            from torch.nn.modules import module
        except ImportError:  # no torch: no forwards to time
            return self
        self._handles = [
            module.register_module_forward_pre_hook(self._enter),
            module.register_module_forward_hook(self._leave, always_call=True),
        ]
        return self

    def __exit__(
        self, _type: type[BaseException] | None, _value: BaseException | None, _tb: TracebackType | None
    ) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        regions.observe(self._replaced)


class Stopwatch:
    """Wall, forward and subject seconds of one stretch of a run: `with Stopwatch(clock) as sw: ...`."""

    def __init__(self, clock: ForwardClock | None) -> None:
        self.clock = clock
        self.wall_s = self._wall0 = self._fwd0 = self._subj0 = 0.0
        self.forward_s: float | None = None
        self.subject_s: float | None = None

    def _now(self) -> float:
        return self.clock.now() if self.clock is not None else time.perf_counter()

    def start(self) -> Stopwatch:
        """Start (or restart) timing."""
        self._wall0 = self._now()
        if self.clock is not None:
            self._fwd0, self._subj0 = self.clock.elapsed(), self.clock.subject_elapsed()
        return self

    def stop(self) -> Stopwatch:
        """Read the times since start into wall_s, forward_s and subject_s."""
        self.wall_s = self._now() - self._wall0
        if self.clock is not None:
            self.forward_s = min(self.clock.elapsed() - self._fwd0, self.wall_s)
            self.subject_s = min(self.clock.subject_elapsed() - self._subj0, self.wall_s - self.forward_s)
        return self

    def __enter__(self) -> Stopwatch:
        return self.start()

    def __exit__(
        self, _type: type[BaseException] | None, _value: BaseException | None, _tb: TracebackType | None
    ) -> None:
        self.stop()


def buckets(wall: float, forward_s: float | None, subject_s: float | None) -> tuple[float, float, float] | None:
    """gate.core.result.time_buckets, or None where forwards were not timed (no --profile)."""
    return None if forward_s is None else time_buckets(wall, forward_s, subject_s)


def run_buckets(result: GateResult) -> tuple[float, float, float, float] | None:
    """(wall, model forwards, subject's other work, gate's own work) over all checks of a run."""
    if not result.checks or all(check.forward_s is None for check in result.checks):
        return None
    wall = forward = subject = 0.0
    for check in result.checks:
        split = buckets(check.duration_s, check.forward_s, check.subject_s) or (0.0, 0.0, check.duration_s)
        wall, forward, subject = wall + check.duration_s, forward + split[0], subject + split[1]
    return wall, forward, subject, wall - forward - subject


def profile_lines(result: GateResult, run_s: float | None = None) -> list[str]:
    """`gate run --profile`: time per check and per control, in three buckets. With `run_s` (the whole
    run's wall time), also the time outside every check: set-up and the dossier."""
    lines = [f"{'':2}{'check / control':<34}{'wall':>9}{'forward':>9}{'subject':>9}{'gate':>9}  note"]
    for check in result.checks:
        lines.append(_row(check.check, check.duration_s, check.forward_s, check.subject_s, check.status.value))
        fwd = (check.forward_s or 0.0) - sum(c.forward_s or 0.0 for c in check.controls)
        subj = (check.subject_s or 0.0) - sum(c.subject_s or 0.0 for c in check.controls)
        timed = check.forward_s is not None
        lines.append(_row("  run (positive)", check.positive_s, fwd if timed else None, subj if timed else None, ""))
        for control in check.controls:
            note = control.outcome.value + (f" @ {control.detected_at}" if control.detected_at is not None else "")
            lines.append(
                _row(f"  control {control.fault}", control.duration_s, control.forward_s, control.subject_s, note)
            )
        spent = sum(c.duration_s for c in check.controls)
        if check.controls and check.positive_s > 0:
            lines.append(f"{'':4}controls / run: {spent / check.positive_s:.2f}")
    total = run_buckets(result)
    wall = sum(check.duration_s for check in result.checks)
    if total is None:
        lines.append(_row("all checks", wall, None, None, "forwards not timed"))
    else:
        wall, forward, subject, own = total
        lines.append(
            _row("all checks", wall, forward, subject, f"{100 * own / wall:.1f}% gate's own work" if wall else "")
        )
    if run_s is not None:  # loading policies and check modules (with their libraries), building both paths, outputs
        outside = max(run_s - sum(check.duration_s for check in result.checks), 0.0)
        lines.append(_row("outside the checks", outside, None, None, f"set-up and outputs, of {run_s:.2f}s in all"))
    return lines


def _row(name: str, wall: float, forward: float | None, subject: float | None, note: str) -> str:
    split = buckets(wall, forward, subject)
    cells = "" if split is None else "".join(f"{x:8.2f}s" for x in split)
    return f"{'':2}{name:<34}{wall:8.2f}s{cells}  {note}"
