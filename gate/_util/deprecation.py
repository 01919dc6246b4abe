"""The deprecation shims' one rule: each old name warns once, naming the release that removes it."""

from __future__ import annotations

import warnings

REMOVED_IN = "0.2.0"
"""The release that removes every shim of the old plugin API (gate.paths, gate.checks.api,
gate.prefix_cache, gate.speculative's old names): one minor release after the layout moved them."""


def warn_moved(old: str, new: str, *, stacklevel: int = 3) -> None:
    """A DeprecationWarning for the old import path `old`, naming where it went and when it goes.
    A module shim calls it once, at import; a name shim once per name (it caches the name after)."""
    warnings.warn(
        f"{old} is deprecated and is removed in gate {REMOVED_IN}: import {new} instead",
        DeprecationWarning,
        stacklevel=stacklevel,
    )


__all__ = ["REMOVED_IN", "warn_moved"]
