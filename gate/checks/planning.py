"""What the rest of gate needs of the built-in checks without running one: the public face of the
checks' private helpers (no module outside gate.checks imports a `gate.checks._*` module, an
import-linter contract in pyproject.toml holds it). The params models, length coverage and declared
needs are torch-free and imported at once; the names in `_LAZY` need torch and load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from gate.checks._coverage import planned_coverage
from gate.checks._needs import ABSENT, DECLARED, Declared, capability_table, offered_capabilities, path_offers
from gate.checks._params import BUILTIN_PARAMS

if TYPE_CHECKING:
    from gate.checks._diagnosis import diagnosis_table
    from gate.checks._prefix_store import LEGACY_METHODS, LegacyStore
    from gate.checks._prefix_support import WHY as IDENTITY_WHY

_LAZY = {
    "LegacyStore": ("_prefix_store", "LegacyStore"),
    "LEGACY_METHODS": ("_prefix_store", "LEGACY_METHODS"),
    "IDENTITY_WHY": ("_prefix_support", "WHY"),
    "diagnosis_table": ("_diagnosis", "diagnosis_table"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(f"gate.checks.{module}"), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ABSENT",
    "BUILTIN_PARAMS",
    "DECLARED",
    "IDENTITY_WHY",
    "LEGACY_METHODS",
    "Declared",
    "LegacyStore",
    "capability_table",
    "diagnosis_table",
    "offered_capabilities",
    "path_offers",
    "planned_coverage",
]
