"""The shape of a built-in check: one package per check (docs/architecture.md, "The shape of a check"):
a torch-free face (`__init__.py`: CARD, PARAMS, EVIDENCE, NEEDS, ...), its evidence record and view,
and its body. The package reaches its body lazily (its module `__getattr__`), so the entry point
`gate.checks.<module>:<function>` stays valid and importing the package never imports torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_body(package: str) -> Callable[[str], Any]:
    """The module `__getattr__` of a check package (`__getattr__ = lazy_body(__name__)`): a name of
    the package's body module, imported on first use; AttributeError for a name the body lacks."""

    def attribute(name: str) -> Any:
        body = None if name.startswith("__") else importlib.import_module(f"{package}.body")
        if body is not None and hasattr(body, name):
            return getattr(body, name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return attribute
