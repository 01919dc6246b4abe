"""Plugin import paths from before the layout keep working for one release, with a warning."""

from __future__ import annotations

import importlib
import sys

import pytest


@pytest.mark.parametrize(
    "old, names, new",
    [
        ("gate.paths", ["DecodePath", "Session", "AdapterUnavailable", "UnknownFault"], "gate.plugin"),
        ("gate.checks.api", ["CheckContext", "Outcome", "Params", "check"], "gate.plugin"),
        ("gate.prefix_cache", ["CacheIdentity", "PrefixReply", "RequestStats", "RestoreReport"], "gate.plugin"),
        ("gate.prefix_cache", ["PrefixCache", "CachedBlock", "chained_key"], "gate.prefix.cache"),
    ],
)
def test_old_import_path_warns_and_gives_the_same_objects(old: str, names: list[str], new: str) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated"):
        module = importlib.import_module(old)
    current = importlib.import_module(new)
    for name in names:
        assert getattr(module, name) is getattr(current, name)


def test_plugin_surface_imports_no_torch() -> None:
    import subprocess

    code = "import sys, gate.plugin; sys.exit(1 if 'torch' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
