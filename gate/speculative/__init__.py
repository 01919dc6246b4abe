"""Speculative (proposal-and-verify) sampling: the sampler, exact output laws, the path, the goodness-of-fit test.

Before the package layout, `gate.speculative` was one module: its names (`SpecStats`,
`SpeculativeSample`, `warp`, ...) still resolve here, with a DeprecationWarning once per
name, until gate 0.2.0 (gate._util.deprecation.REMOVED_IN). Import them from `gate.plugin` (or
`gate.speculative.sampler`).
"""

from __future__ import annotations

import importlib
from typing import Any

from gate._util.deprecation import warn_moved

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
    warn_moved(f"gate.speculative.{name}", "it from gate.plugin (or gate.speculative.sampler)")
    value = getattr(importlib.import_module("gate.speculative.sampler"), name)
    globals()[name] = value  # once per name: `from gate.speculative import warp` looks it up twice
    return value
