"""What planning needs of the built-in checks without running one (torch-free).

`validate`, `plan` and the runner read each built-in check's params model from here, and `gate
plan`'s coverage (gate.engine.capabilities) the lengths a sweep will reach. This is the public face
of the checks' private helpers for the rest of gate: no module outside gate.checks imports a
`gate.checks._*` module (an import-linter contract in pyproject.toml holds it).
"""

from __future__ import annotations

from gate.checks._coverage import planned_coverage
from gate.checks._params import BUILTIN_PARAMS

__all__ = ["BUILTIN_PARAMS", "planned_coverage"]
