"""gate's import graph has no circle, type-only imports (`if TYPE_CHECKING:`) included: issue 50's
target, measured by benchmarks/house.py (whose `circles` this uses)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.house import circles


def test_gate_has_no_import_circle() -> None:
    found = circles("gate", type_only=True)
    assert found == [], "import circles in gate: " + "; ".join(" <-> ".join(c) for c in found)


def test_a_type_only_circle_is_one_circle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "circ"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from circ import b\n")
    (package / "b.py").write_text("from circ import a\n")
    (package / "c.py").write_text("from circ import b\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert circles("circ", type_only=True) == [["circ.a", "circ.b"]]
    assert circles("circ", type_only=False) == []
