"""Settings for the whole suite: one torch thread, and the slow reliability trials left to CI.

Fixtures live beside the tests that use them (tests/<package>/conftest.py); helpers shared across
folders are plain modules under tests/support/.
"""

from __future__ import annotations

import os

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
