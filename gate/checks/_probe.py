"""The order a run probes its cases in: as declared, except that a control probes first where its
fault's name points (reset-keeps-position: the reset case; pad-attended: the padded batches;
key-ignores-tenant: the tenant field), where its failure is likely.

One rule of order for every check; what "points at" means is the check's own (`points_at`, passed
in). A positive run (no control) probes everything in the declared order; a control still probes
every case until its first failure, only the likely ones first (a stable sort).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def probe_order(items: Sequence[T], control: str | None, points_at: Callable[[str, T], bool]) -> list[int]:
    """Indices into `items` in the order a run probes them: declared order, the items `control`'s
    fault name points at (by `points_at(control, item)`) first."""
    order = list(range(len(items)))
    if control is None:
        return order
    return sorted(order, key=lambda i: not points_at(control, items[i]))
