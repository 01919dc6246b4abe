"""Fixtures of the attack tests: this tree's `gate` as an executable, one real passing dossier."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.security.play import PASSING, ROOT, gate_env


@pytest.fixture(scope="session")
def gate_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An executable `gate` that runs this tree's code (the Action calls `$GATE_BIN`)."""
    path = tmp_path_factory.mktemp("bin") / "gate"
    path.write_text(f'#!/bin/sh\nPYTHONPATH="{ROOT}" exec "{sys.executable}" -m gate "$@"\n')
    path.chmod(0o755)
    return path


@pytest.fixture(scope="session")
def passing_dossier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real, complete run of a passing manifest (its results.json says pass)."""
    out = tmp_path_factory.mktemp("passing") / "out"
    done = subprocess.run(
        [sys.executable, "-m", "gate", "run", str(PASSING), "--out", str(out), "-q"],
        env=gate_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return out
