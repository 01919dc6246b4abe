"""Where a run's time goes: wall time, and the part of it spent inside model forward passes.

`ForwardClock` installs torch's global module hooks for the length of a run and adds up the time
between entering and leaving an *outermost* `nn.Module.__call__` (nested modules are not counted
twice). Everything else (planning sweeps, comparing rows, diagnosis bookkeeping, the session
glue of an adapter) is gate's own work or the adapter's, reported as "outside forward". Reading
`elapsed()` around a check or a control gives its share. The hooks put every module call on
torch's slow path (about +10-25% on a tiny model's single-token steps), so the runner installs
the clock only for `gate run --profile`; wall time per check and per control is always recorded.

With no torch installed the clock reads zero and installs nothing.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gate.core.result import GateResult


class ForwardClock:
    """Seconds spent inside outermost model forward passes, while installed (a context manager)."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._lock = threading.Lock()
        self._total = 0.0
        self._handles: list[Any] = []

    def elapsed(self) -> float:
        """Total forward seconds so far (including the one running now, up to this moment)."""
        with self._lock:
            total = self._total
        started = getattr(self._local, "started", None)
        if started is not None and getattr(self._local, "depth", 0) > 0:
            total += time.perf_counter() - started
        return total

    def _enter(self, _module: Any, _args: Any) -> None:
        depth = getattr(self._local, "depth", 0)
        if depth == 0:
            self._local.started = time.perf_counter()
        self._local.depth = depth + 1

    def _leave(self, _module: Any, _args: Any, _output: Any) -> None:
        depth = getattr(self._local, "depth", 0) - 1
        self._local.depth = max(depth, 0)
        if depth == 0:
            spent = time.perf_counter() - self._local.started
            self._local.started = None
            with self._lock:
                self._total += spent

    def __enter__(self) -> ForwardClock:
        try:
            from torch.nn.modules import module
        except ImportError:  # no torch: nothing to time
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


class Stopwatch:
    """Wall and forward seconds of one stretch of a run: `with Stopwatch(clock) as sw: ...`."""

    def __init__(self, clock: ForwardClock | None) -> None:
        self.clock = clock
        self.wall_s = 0.0
        self.forward_s: float | None = None
        self._wall0 = 0.0
        self._fwd0 = 0.0

    def __enter__(self) -> Stopwatch:
        self._wall0 = time.perf_counter()
        self._fwd0 = self.clock.elapsed() if self.clock else 0.0
        return self

    def __exit__(
        self, _type: type[BaseException] | None, _value: BaseException | None, _tb: TracebackType | None
    ) -> None:
        self.wall_s = time.perf_counter() - self._wall0
        if self.clock is not None:
            self.forward_s = min(self.clock.elapsed() - self._fwd0, self.wall_s)


def profile_lines(result: GateResult) -> list[str]:
    """`gate run --profile`: time per check and per control, inside vs outside model forwards."""
    lines = [f"{'':2}{'check / control':<34}{'wall':>9}{'forward':>9}{'outside':>9}  note"]
    total = forward = 0.0
    for check in result.checks:
        fwd = check.forward_s or 0.0  # None: forwards were not timed (a run without --profile)
        total, forward = total + check.duration_s, forward + fwd
        lines.append(_row(check.check, check.duration_s, fwd, check.status.value))
        in_controls = sum(c.forward_s or 0.0 for c in check.controls)
        lines.append(_row("  run (positive)", check.positive_s, min(max(fwd - in_controls, 0.0), check.positive_s), ""))
        for control in check.controls:
            at = f" @ {control.detected_at}" if control.detected_at is not None else ""
            lines.append(
                _row(f"  control {control.fault}", control.duration_s, control.forward_s, control.outcome.value + at)
            )
        spent = sum(c.duration_s for c in check.controls)
        if check.controls and check.positive_s > 0:
            lines.append(f"{'':4}controls / run: {spent / check.positive_s:.2f}")
    share = (total - forward) / total if total else 0.0
    lines.append(_row("all checks", total, forward, f"{100 * share:.1f}% outside model forwards"))
    return lines


def _row(name: str, wall: float, forward: float | None, note: str) -> str:
    fwd = "" if forward is None else f"{forward:8.2f}s"
    out = "" if forward is None else f"{wall - forward:8.2f}s"
    return f"{'':2}{name:<34}{wall:8.2f}s{fwd:>9}{out:>9}  {note}"
