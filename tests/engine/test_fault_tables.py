"""docs/faults.md's generated tables stay current with gate/models/faults.py: the catalogue is
regenerated here and compared (cheap); the fault x check and confusion tables take minutes to
generate (benchmarks/fault_matrix.py), so here every planted fault must have its row in each of
them, and a fault added to the catalogue without regenerating them fails this test."""

from __future__ import annotations

from benchmarks.fault_matrix import SECTIONS, catalogue, marked, replace_marked
from gate.models.faults import FAULT_NAMES
from tests.support.repo import REPO

DOC = (REPO / "docs" / "faults.md").read_text()


def _rows(table: str) -> list[str]:
    """The first cell of every body row of the markdown tables in `table`."""
    cells = [line.strip().strip("|").split("|")[0].strip() for line in table.splitlines() if line.startswith("| ")]
    return [c for c in cells if c not in ("fault", "**all**")]


def test_the_catalogue_in_docs_faults_is_generated_from_the_faults() -> None:
    assert marked(DOC, "fault-catalogue") == catalogue()


def test_every_planted_fault_has_its_row_in_each_fault_x_check_table_and_the_confusion_table() -> None:
    matrix = marked(DOC, "fault-matrix")
    presets = matrix.count("### Preset `")
    assert presets == 2
    assert sorted(_rows(matrix)) == sorted(FAULT_NAMES * presets)
    assert _rows(marked(DOC, "fault-confusion")) == list(FAULT_NAMES)
    assert matrix.count("in every seed: ") == presets and f"of {len(FAULT_NAMES)}." in matrix


def test_regenerating_replaces_only_the_marked_sections() -> None:
    text = DOC
    for name in SECTIONS:
        text = replace_marked(text, name, f"new {name}\n")
    for name in SECTIONS:
        assert marked(text, name) == f"new {name}\n"
    outside = DOC
    for name in SECTIONS:
        outside = outside.replace(marked(DOC, name), "")
    kept = text
    for name in SECTIONS:
        kept = kept.replace(f"new {name}\n", "")
    assert kept == outside  # the hand-written prose around the tables is untouched
