"""Speculative (proposal-and-verify) sampling: the sampler, exact output laws, the path, the goodness-of-fit test.

Before the package layout, `gate.speculative` was one module: its names (`SpecStats`,
`SpeculativeSample`, `warp`, ...) still resolve here, with a DeprecationWarning, for at least one
minor release. Import them from `gate.plugin` (or `gate.speculative.sampler`).
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

MOVED = (
    "CORRECT",
    "SpecStats",
    "SpeculativeSample",
    "SpeculativeSampler",
    "VerifyRules",
    "accept_ratio",
    "apply_fault",
    "bonus_from_target",
    "residual_positive_part",
    "target_only_sample",
    "warp",
)
"""The old module's public names, now in gate.speculative.sampler."""


def __getattr__(name: str) -> Any:
    if name not in MOVED:
        raise AttributeError(f"module 'gate.speculative' has no attribute {name!r}")
    warnings.warn(
        f"gate.speculative.{name} is deprecated: import it from gate.plugin (or gate.speculative.sampler)",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module("gate.speculative.sampler"), name)
