"""Who is listening to the subject's call regions (`gate.protocols.subject_call`).

`gate run --profile` installs one observer (gate.engine.profile's ForwardClock), told when the
calling thread enters and leaves an outermost region, so time in the subject's own code that is
not a model forward is booked as the subject's, not as gate's.
"""

from __future__ import annotations

from typing import Protocol


class RegionObserver(Protocol):
    """Told about every entry into and exit from a subject call region (nested ones included)."""

    def subject_enter(self) -> None: ...

    def subject_leave(self) -> None: ...


class _Slot:
    observer: RegionObserver | None = None


SLOT = _Slot()
"""The installed observer (at most one; `gate run --profile` sets it for one run)."""


def observe(observer: RegionObserver | None) -> RegionObserver | None:
    """Install `observer` (None: remove it); returns the one it replaced."""
    previous, SLOT.observer = SLOT.observer, observer
    return previous
