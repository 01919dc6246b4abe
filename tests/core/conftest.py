"""Fixtures of the record, loading and planning tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.manifests import manifest_writer


@pytest.fixture
def write_manifest(tmp_path: Path) -> Callable[..., Path]:
    """Writes a manifest (BASE_MANIFEST unless given) under tmp_path."""
    return manifest_writer(tmp_path)
