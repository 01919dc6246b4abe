"""Numbers as their size needs: `significant` keeps a fixed number of significant digits, so an upper
bound of 4.12e-06 is never shown as `0.0000`."""

from __future__ import annotations

import math


def significant(value: float) -> str:
    """0, 12, 0.031, 0.9312, 4.12e-06, 1.20e+07, ∞, NaN: three or four significant digits at any size."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    magnitude = abs(value)
    if magnitude >= 1e5 or magnitude < 1e-3:
        return f"{value:.2e}"
    return f"{value:.4g}"
