"""Where gate's data lives: inside the wheel (gate/_data/<kind>) or in a checkout (<folder>)."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent  # gate/
_CHECKOUT = _PACKAGE.parent

KINDS: dict[str, str] = {
    "policies": "policies",
    "check-cards": "checks",
    "slices": "evals",
    "templates": "templates",
    "examples": "examples",
    "schemas": "schemas",
    "scenarios": "scenarios",
}
"""Data kind (its folder name in the wheel) -> its folder in a checkout."""


def data_dir(kind: str) -> Path:
    """The shipped data directory of `kind` (policies, check-cards, slices, templates, examples, schemas, scenarios)."""
    if kind not in KINDS:
        raise KeyError(f"unknown data kind {kind!r} (known: {', '.join(KINDS)})")
    installed = _PACKAGE / "_data" / kind
    if installed.is_dir():
        return installed
    return _CHECKOUT / KINDS[kind]
