"""Plugin registry: checks and adapters are entry points, built-ins included (simonw/llm style).

Listing names reads package metadata only; a plugin module is imported when a run needs it, so
`gate plan` and `gate --help` never import torch.
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any, cast

from gate.errors import UnavailableError

if TYPE_CHECKING:
    from gate.core.check import CheckSpec, Params
    from gate.protocols import Adapter

CHECK_GROUP = "gate.checks"
ADAPTER_GROUP = "gate.adapters"


def _distribution(ep: EntryPoint) -> str:
    dist = ep.dist
    return f"{dist.name} {dist.version}" if dist is not None else "an unknown distribution"


@cache
def _group(group: str) -> dict[str, EntryPoint]:
    """Every entry point of `group` by name; one name registered for two different objects is an error
    (the winner would depend on sys.path), the same object seen twice one registration."""
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=group):
        seen = found.get(ep.name)
        if seen is None:
            found[ep.name] = ep
        elif seen.value != ep.value:
            raise UnavailableError(
                f"{group} {ep.name!r} is registered twice: {seen.value} by {_distribution(seen)} "
                f"and {ep.value} by {_distribution(ep)}; uninstall one of them"
            )
    return found


def check_names() -> list[str]:
    """Names of every registered check."""
    return sorted(_group(CHECK_GROUP))


def adapter_names() -> list[str]:
    """Names of every registered adapter."""
    return sorted(_group(ADAPTER_GROUP))


def entry_point_of(group: str, name: str) -> EntryPoint | None:
    return _group(group).get(name)


def _load(group: str, name: str, what: str) -> Any:
    ep = _group(group).get(name)
    if ep is None:
        known = ", ".join(sorted(_group(group))) or "none"
        raise UnavailableError(f"{what} {name!r} is not available (registered: {known})")
    try:
        return ep.load()
    except ImportError as err:
        raise UnavailableError(
            f"{what} {name!r} could not be imported from {ep.value}: {err}"
            + (f" (try: pip install 'gate[{err.name}]')" if getattr(err, "name", None) else "")
        ) from err


def load_check(name: str) -> CheckSpec[Params]:
    """The CheckSpec registered under `name`."""
    from gate.core.check import CheckSpec

    spec = _load(CHECK_GROUP, name, "check")
    if not isinstance(spec, CheckSpec):
        raise UnavailableError(f"entry point for check {name!r} is not a @check-decorated function")
    return spec


def load_adapter(name: str) -> type[Adapter]:
    """The adapter class registered under `name` (an `Options` model and a `build` method)."""
    adapter = _load(ADAPTER_GROUP, name, "adapter")
    if not (isinstance(adapter, type) and isinstance(getattr(adapter, "Options", None), type)):
        raise UnavailableError(f"entry point for adapter {name!r} is not an adapter class with an Options model")
    return cast("type[Adapter]", adapter)
