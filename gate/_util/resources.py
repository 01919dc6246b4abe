"""Where gate's data directories live: inside the wheel (gate/_data/...) or in a checkout."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent  # gate/
_CHECKOUT = _PACKAGE.parent


def data_dir(name: str) -> Path:
    """The shipped data directory `name` (policies, checks, evals, templates, examples, schemas)."""
    installed = _PACKAGE / "_data" / name
    if installed.is_dir():
        return installed
    return _CHECKOUT / name
