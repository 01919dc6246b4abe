"""Fixtures of the trust tests. Keys and trust policies differ per module (who signs, approves,
waives), so each module keeps its own `keys` and `trust`; see tests/trust/trusted.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.manifests import manifest_writer


@pytest.fixture
def write_manifest(tmp_path: Path) -> Callable[..., Path]:
    """Writes a manifest (BASE_MANIFEST unless given) under tmp_path."""
    return manifest_writer(tmp_path)


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    """Where a test's ledger lives (created on first use, parent folder included)."""
    return tmp_path / "audit" / "ledger.sqlite"
