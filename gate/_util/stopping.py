"""Things to stop when a run ends, however it ends: servers gate started, worker processes.

An adapter that starts something outside the Python process registers how to stop it
(`handle = on_stop(f"vllm server pid {server.pid}", server.terminate)`, later `handle.stop()`).
`stop_all()` runs every stopper still registered, newest first, each at most once; the pipeline
calls it when a run ends (SIGINT and SIGTERM included) and an `atexit` hook otherwise. A stopper
that raises is reported and the others still run. SIGKILL cannot be caught: a server an adapter
starts should also die with its parent (e.g. `prctl(PR_SET_PDEATHSIG)`).
"""

from __future__ import annotations

import atexit
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

_lock = threading.Lock()
_stoppers: dict[int, Stopper] = {}
_next_id = 0


@dataclass
class Stopper:
    """One registered thing to stop; `stop()` runs it now (once) and unregisters it."""

    label: str
    fn: Callable[[], object]
    ident: int
    done: bool = field(default=False)

    def stop(self) -> None:
        with _lock:
            if self.done:
                return
            self.done = True
            _stoppers.pop(self.ident, None)
        try:
            self.fn()
        except Exception as err:  # one bad stopper must not keep the others from running
            print(f"gate: could not stop {self.label}: {err.__class__.__name__}: {err}", file=sys.stderr)

    def forget(self) -> None:
        """Unregister without running (the thing already stopped by itself)."""
        with _lock:
            self.done = True
            _stoppers.pop(self.ident, None)


def on_stop(label: str, fn: Callable[[], object]) -> Stopper:
    """Register `fn` to run when the run ends; `label` names the thing in messages."""
    global _next_id
    with _lock:
        _next_id += 1
        stopper = Stopper(label, fn, _next_id)
        _stoppers[stopper.ident] = stopper
    return stopper


def pending() -> list[str]:
    """Labels of the stoppers still registered, oldest first."""
    with _lock:
        return [s.label for s in sorted(_stoppers.values(), key=lambda s: s.ident)]


def stop_all() -> list[str]:
    """Run every registered stopper, newest first; returns the labels stopped."""
    with _lock:
        todo = sorted(_stoppers.values(), key=lambda s: -s.ident)
    for stopper in todo:
        stopper.stop()
    return [s.label for s in todo]


atexit.register(stop_all)

__all__ = ["Stopper", "on_stop", "pending", "stop_all"]
