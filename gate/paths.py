"""Deprecated: the protocols moved to `gate.protocols` (and the errors to `gate.errors`).

Kept until gate 0.2.0 (gate._util.deprecation.REMOVED_IN) so plugins written against `gate.paths` keep
importing; it warns once, at import.
"""

from __future__ import annotations

from gate._util.deprecation import warn_moved
from gate.errors import AdapterUnavailable, UnknownFault
from gate.protocols import *  # noqa: F403
from gate.protocols import __all__ as _protocols_all

warn_moved("gate.paths", "from gate.protocols (or gate.plugin)")

__all__ = [*_protocols_all, "AdapterUnavailable", "UnknownFault"]
