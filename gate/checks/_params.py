"""The params of every built-in check, in one module that imports no torch.

`gate validate` and `gate plan` validate a manifest's `checks.<name>.params` (and the policy's) with
these models without importing the checks' bodies, so planning stays instant. Every built-in check
is a package (gate.checks._shape) that defines its model in its torch-free `__init__`; this module
serves them from there by name. A plugin check's params are validated by importing the plugin.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

import gate.checks
from gate.core.check import Params

PACKAGES: tuple[ModuleType, ...] = tuple(
    importlib.import_module(f"gate.checks.{module.name}")
    for module in pkgutil.iter_modules(gate.checks.__path__)
    if module.ispkg and not module.name.startswith("_")
)
"""Every built-in check's torch-free face (never a body), found by listing gate/checks/ (a private
package, such as _diagnosis, is a helper)."""

BUILTIN_PARAMS: dict[str, type[Params]] = {package.CARD: package.PARAMS for package in PACKAGES}
"""Check name -> its params model, for the built-in checks."""
