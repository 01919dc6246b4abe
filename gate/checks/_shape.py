"""The shape of a built-in check: one package per check (docs/architecture.md, "The shape of a check").

    gate/checks/<module>/__init__.py   torch-free: CARD (its name and card), PARAMS (its params
                                       model), EVIDENCE (its record, from evidence.py, or None:
                                       shown generically), NEEDS (a frozenset of the
                                       gate.protocols.Capability the candidate must offer),
                                       optionally OPTIONAL (capability -> what offering it adds),
                                       NEEDS_INSTEAD and COVERED_BY (gate.checks._needs), and
                                       `__getattr__ = lazy_body(__name__)`
    gate/checks/<module>/evidence.py   torch-free, pydantic only: its evidence record (when it
                                       has one), on gate.core.evidence's shared records
    gate/checks/<module>/view.py       torch-free: `read(record, views)`, the record into the
                                       dossier (found by gate.report.evidence.readers)
    gate/checks/<module>/body.py       measure (drive the subject -> observations), judge
                                       (observations -> judgement, pure), explain (judgement ->
                                       the Outcome, built once) and the registered check

The package reaches its body lazily (its module `__getattr__`), so the entry
point `gate.checks.<module>:<function>` stays valid and importing the package never imports torch.
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
