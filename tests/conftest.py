"""Settings for the whole suite: one torch thread, and the slow reliability trials left to CI.

Fixtures live beside the tests that use them (tests/<package>/conftest.py); helpers shared across
folders are plain modules under tests/support/. The one fixture shared across folders is here: a real
PostgreSQL server for the whole session (`pg_server`) and an empty database of it per test (`pg_url`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator

import pytest
import torch

torch.set_num_threads(1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Reliability trials (crash trials, concurrent writers) are slow: `.ci/postgres.sh` runs them."""
    if os.environ.get("GATE_RELIABILITY") == "1":
        return
    skip = pytest.mark.skip(reason="slow reliability trials: run by .ci/postgres.sh (GATE_RELIABILITY=1)")
    for item in items:
        if item.get_closest_marker("reliability") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """One throwaway PostgreSQL server for every test that needs one (tests/support/postgres.py), or a
    skip saying why there is none."""
    from tests.support.postgres import server_or_skip

    yield from server_or_skip()


@pytest.fixture
def pg_url(pg_server: str, request: pytest.FixtureRequest) -> str:
    """An empty database of `pg_server` for this test alone, named after it."""
    from tests.support.postgres import new_database

    test = "".join(ch if ch.isalnum() else "_" for ch in request.node.name.lower())[:40]
    return new_database(pg_server, f"t_{test}_{hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:8]}")
