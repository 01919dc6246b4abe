"""Deprecated: the check API moved to `gate.core.check`; plugin authors import from `gate.plugin`.

Kept for one release so checks written against `gate.checks.api` keep importing; it warns once.
"""

from __future__ import annotations

import warnings

from gate.core.check import CheckContext, CheckSpec, Outcome, Params, check

warnings.warn(
    "gate.checks.api is deprecated: import from gate.plugin instead",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["CheckContext", "CheckSpec", "Outcome", "Params", "check"]
