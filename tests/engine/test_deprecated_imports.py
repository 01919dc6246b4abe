"""Plugin import paths from before the layout keep working until the release that removes them, each
warning once per name and naming that release."""

from __future__ import annotations

import importlib
import sys
import warnings

import pytest

from gate._util.deprecation import REMOVED_IN


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
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
        importlib.import_module(old)  # a second import is the same module: no second warning
    (warning,) = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert f"{old} is deprecated and is removed in gate {REMOVED_IN}: import from " in str(warning.message)
    current = importlib.import_module(new)
    for name in names:
        assert getattr(module, name) is getattr(current, name)


def test_plugin_surface_imports_no_torch() -> None:
    import subprocess

    code = "import sys, gate.plugin; sys.exit(1 if 'torch' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_each_old_speculative_name_warns_once_naming_the_release_that_removes_it() -> None:
    """`from gate.speculative import warp` looks the name up twice (hasattr, then getattr): one warning,
    and none for later uses of the same name; another name warns on its own first use."""
    import gate.speculative as package

    for name in package.MOVED:
        vars(package).pop(name, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec("from gate.speculative import warp", {})
        exec("from gate.speculative import warp", {})
        assert package.warp is importlib.import_module("gate.speculative.sampler").warp
        exec("from gate.speculative import SpecStats", {})
    said = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    assert said == [
        f"gate.speculative.warp is deprecated and is removed in gate {REMOVED_IN}: import it from gate.plugin "
        "(or gate.speculative.sampler) instead",
        f"gate.speculative.SpecStats is deprecated and is removed in gate {REMOVED_IN}: import it from gate.plugin "
        "(or gate.speculative.sampler) instead",
    ]


def test_the_plugin_doc_names_the_release_that_removes_the_shims() -> None:
    from tests.support.repo import REPO

    assert f"until gate {REMOVED_IN}" in (REPO / "docs" / "plugins.md").read_text()
