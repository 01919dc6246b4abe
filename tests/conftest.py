"""Shared test helpers."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)


BASE_MANIFEST = textwrap.dedent(
    """\
    apiVersion: gate/v1
    name: prefix-cache-change
    description: block prefix cache
    intervention: prefix-reuse
    claim:
      level: tolerance
      atol: 0.001
    identity: [token-ids, positions, model-revision, adapter, tokenizer, rope-scaling,
               attention-window, kv-dtype, tenant]
    subject:
      reference:
        adapter: reference
        options: {}
      candidate:
        adapter: reference
        options: {}
      seed: 3
    """
)


@pytest.fixture
def write_manifest(tmp_path: Path):  # type: ignore[no-untyped-def]
    def write(text: str = BASE_MANIFEST, name: str = "m.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Reliability trials (crash trials, concurrent writers) are slow: `.ci/postgres.sh` runs them."""
    import os

    if os.environ.get("GATE_RELIABILITY") == "1":
        return
    skip = pytest.mark.skip(reason="slow reliability trials: run by .ci/postgres.sh (GATE_RELIABILITY=1)")
    for item in items:
        if item.get_closest_marker("reliability") is not None:
            item.add_marker(skip)
