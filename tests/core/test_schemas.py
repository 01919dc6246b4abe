"""The committed JSON Schemas under schemas/ match the records (regenerate: `gate schema --out schemas`)."""

from __future__ import annotations

from gate._util.resources import data_dir
from gate.checks.faces import EVIDENCE
from gate.core.schemas import render_schemas


def test_committed_schemas_are_current() -> None:
    directory = data_dir("schemas")
    for name, text in render_schemas(EVIDENCE).items():
        committed = directory / name
        assert committed.is_file(), f"missing {committed}: run `gate schema --out schemas`"
        assert committed.read_text() == text, f"{committed} is stale: run `gate schema --out schemas`"
