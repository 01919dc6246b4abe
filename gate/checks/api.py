"""Deprecated: the check API moved to `gate.core.check`; plugin authors import from `gate.plugin`.

Kept until gate 0.2.0 (gate._util.deprecation.REMOVED_IN) so checks written against `gate.checks.api` keep
importing; it warns once, at import.
"""

from __future__ import annotations

from gate._util.deprecation import warn_moved
from gate.core.check import CheckContext, CheckSpec, Outcome, Params, check

warn_moved("gate.checks.api", "from gate.plugin")

__all__ = ["CheckContext", "CheckSpec", "Outcome", "Params", "check"]
