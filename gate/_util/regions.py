"""Who is listening to the subject's call regions (`gate.protocols.subject_call`).

`gate run --profile` installs one observer for the length of a run (gate.engine.profile's
ForwardClock): it is told when the calling thread enters and leaves an outermost region, so that
time inside the subject's own code that is not a model forward (its prefix store, block hashing,
sampler, cache copies) is booked as the subject's, not as gate's. With no observer installed
`subject_call` costs one attribute read.
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
