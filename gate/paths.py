"""Deprecated: the protocols moved to `gate.protocols` (and the errors to `gate.errors`).

Kept for one release so plugins written against `gate.paths` keep importing; it warns once.
"""

from __future__ import annotations

import warnings

from gate.errors import AdapterUnavailable, UnknownFault
from gate.protocols import *  # noqa: F403
from gate.protocols import __all__ as _protocols_all

warnings.warn(
    "gate.paths is deprecated: import from gate.protocols (or gate.plugin) instead",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = [*_protocols_all, "AdapterUnavailable", "UnknownFault"]
