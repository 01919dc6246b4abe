"""Engine tests need llama.cpp's server, built by `make engine` into .cache/engine/ (or $GATE_LLAMA_SERVER).

Tests marked `engine` are skipped, with that reason, when it is not built, so `make test` stays fast
on a fresh clone; .ci/engine.sh runs them with GATE_LLAMA_SERVER set to a prebuilt build's wrapper
(benchmarks/engine_builds.py). Those also marked `xllamacpp` run llama.cpp's
server from a prebuilt wheel instead (test_xllamacpp_server.py) and skip on their own condition.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gate._util.stopping import stop_all
from tests.support.repo import REPO


def llama_server() -> Path | None:
    explicit = os.environ.get("GATE_LLAMA_SERVER")
    candidate = Path(explicit) if explicit else REPO / ".cache" / "engine" / "llama-server"
    return candidate if candidate.is_file() and os.access(candidate, os.X_OK) else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if llama_server() is not None:
        return
    skip = pytest.mark.skip(
        reason="llama-server is not built: run `make engine` (or set GATE_LLAMA_SERVER, e.g. to a prebuilt "
        "build's wrapper: python benchmarks/engine_builds.py --builds b11549 --install-only)"
    )
    for item in items:
        # the marker, not `"engine" in item.keywords`: keywords also hold folder names (tests/engine)
        if item.get_closest_marker("engine") is not None and item.get_closest_marker("xllamacpp") is None:
            item.add_marker(skip)


@pytest.fixture
def engine_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment a `gate run` of an engine example needs: llama-server on PATH, one thread."""
    server = llama_server()
    assert server is not None
    path = f"{server.parent}{os.pathsep}{os.environ.get('PATH', '')}"
    monkeypatch.setenv("PATH", path)
    return {**os.environ, "PATH": path, "GATE_THREADS": "1", "OMP_NUM_THREADS": "1"}


@pytest.fixture(autouse=True)
def _stop_servers_after_each_test() -> Iterator[None]:
    """Servers a path keeps for the rest of a run (gate.adapters.openai.path) end with the test,
    as they end with a `gate run`."""
    yield
    stop_all()
