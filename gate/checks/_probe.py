"""The order a run probes its cases in: as declared, except that a control probes first where its
fault's name points (reset-keeps-position: the reset case), where its failure is likely; it still
probes every case until its first failure (a stable sort)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def probe_order(items: Sequence[T], control: str | None, points_at: Callable[[str, T], bool]) -> list[int]:
    """Indices into `items`, those `points_at(control, item)` first."""
    order = list(range(len(items)))
    return order if control is None else sorted(order, key=lambda i: not points_at(control, items[i]))
