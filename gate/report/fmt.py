"""Display formatting of record values: one place, so HTML, Markdown and JUnit say the same thing.
Non-finite floats may arrive as strings ("Infinity", "NaN"), so every reader goes through `as_float`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gate._util.numbers import significant


def as_float(value: Any) -> float | None:
    """A float from a record value, or None when it is not a number (bools are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        return float(value)  # a string too: "Infinity", "-inf", "NaN" in any case, surrounding space
    except ValueError:
        return None


def as_mapping(value: Any) -> Mapping[str, Any]:
    """A record value that should be a mapping, or an empty one (records written by other runners)."""
    return value if isinstance(value, Mapping) else {}


number = significant
"""A compact, stable rendering as the value's size needs: 0, 12, 0.031, 4.12e-06, ∞."""


def display(value: Any, limit: int = 300) -> str:
    """Any JSON value as one line of text, truncated to `limit` characters."""
    if value is None:
        text = "—"
    elif isinstance(value, bool):
        text = "yes" if value else "no"
    elif isinstance(value, (int, float)):
        text = number(float(value))
    elif isinstance(value, str):
        text = value
    elif isinstance(value, list) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        shown = ", ".join(number(float(v)) for v in value[:20])
        text = f"[{shown}{', …' if len(value) > 20 else ''}]"
    else:
        text = json.dumps(value, sort_keys=True, default=str)
    text = " ".join(text.split()) if "\n" in text else text
    return text if len(text) <= limit else text[: limit - 1] + "…"


def duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min"
