"""`gate history`: a real ledger's runs (tests/cli/ledger_history.py), in the terminal and as HTML."""

from __future__ import annotations

import re
from pathlib import Path

from tests.cli.ledger_history import APPROVED_SHA, BOUND, BROKEN_SHA, FAIL_SHA, LOST_SHA, PASS_SHA, Built, built, gate

__all__ = ["built"]


def test_a_manifest_history_names_the_first_failing_commit(built: Built) -> None:
    code, text = gate("history", "reference-prefix-basic", "--ledger", str(built.ledger))
    assert code == 0, text
    assert f"first failing commit: {FAIL_SHA} (run #2): prefix-reuse-parity at index 4" in text
    rows = [line for line in text.splitlines() if line.strip().startswith("#")]
    assert [row.split()[1] for row in rows] == [PASS_SHA[:12], FAIL_SHA[:12]]
    assert rows[0].split()[3] == "pass" and rows[1].split()[3] == "fail"
    assert (
        rows[1].split()[4] == "fail" and float(rows[1].split()[5]) > 1
    )  # prefix-reuse-parity: max |Δ| on the faulty run
    assert "  measures: prefix-reuse-parity: max_abs_delta; cache-identity: violations;" in text


def test_a_manifest_file_and_a_check_name_select_too(built: Built, tmp_path: Path) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text("name: kv-int8\n")
    code, text = gate("history", str(manifest), "--ledger", str(built.ledger))
    assert code == 0 and f"first failing commit: {BROKEN_SHA} (run #6): quality-slices\n" in text, text
    assert f"latest run: #7 {APPROVED_SHA[:12]} (awaiting-approval), not failing" in text
    code, text = gate("history", "prefix-reuse-parity", "--ledger", str(built.ledger))
    assert (
        code == 0
        and text.startswith("gate history: check prefix-reuse-parity")
        and f"first failing commit: {FAIL_SHA}" in text
    )


def test_a_lost_dossier_is_said_and_its_ledger_status_kept(built: Built) -> None:
    code, text = gate("history", "kv-int8", "--ledger", str(built.ledger))
    assert code == 0, text
    lost = next(line for line in text.splitlines() if line.strip().startswith("#") and LOST_SHA[:12] in line)
    assert lost.split()[-1] == "pass"  # the ledger's status, no measure
    assert re.search(r"run #\d+: dossier not found \(.*quant-c3/out\): statuses from the ledger only", text)
    assert "0.962" in next(line for line in text.splitlines() if APPROVED_SHA[:12] in line)
    assert re.search(r"run #4: approved by alice \(#5\)$", text, re.M)
    assert re.search(r"run #7: approved by alice \(#5, same evidence\)$", text, re.M)


def test_the_html_has_one_plot_per_measure_and_marks_the_approval(built: Built, tmp_path: Path) -> None:
    page = tmp_path / "history.html"
    code, text = gate("history", "kv-int8", "--ledger", str(built.ledger), "--html", str(page))
    assert code == 0 and str(page) in text
    html = page.read_text()
    assert html.count("<svg") == 1 and f'data-measure="quality-slices {BOUND}"' in html
    assert html.count('class="approval"') == 2 and html.count(">approved</text>") == 2  # run #4, and #7 carrying it
    assert "approved by alice (#5, same evidence)" in html
    assert ">threshold 0.95</text>" in html and html.count('class="first-fail"') == 1
    assert f'first failing commit: <span class="mono">{BROKEN_SHA}</span>' in html
    assert "<script" not in html and "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    code, _ = gate("history", "reference-prefix-basic", "--ledger", str(built.ledger), "--html", str(page))
    html = page.read_text()
    measures = re.findall(r'data-measure="([^"]+)"', html)
    assert code == 0 and len(measures) == len(set(measures)) == html.count("<svg") >= 4
    assert "prefix-reuse-parity max_abs_delta" in measures and not any("phase-performance" in m for m in measures)


def test_an_unknown_name_or_ledger_is_one_line_and_exit_2(built: Built, tmp_path: Path) -> None:
    code, text = gate("history", "no-such-thing", "--ledger", str(built.ledger))
    assert (
        code == 2
        and text.strip()
        == f"gate: {built.ledger}: no run of a manifest or check named 'no-such-thing' is recorded in this ledger"
    )
    code, text = gate("history", "kv-int8", "--ledger", str(tmp_path / "none.sqlite"))
    assert code == 2 and len(text.strip().splitlines()) == 1 and "no ledger here" in text


def test_a_dossier_directory_reused_by_a_later_run_is_not_read_as_this_run(built: Built, tmp_path: Path) -> None:
    """The ledger recorded results.json's sha256: another run's record in the same directory is
    named as replaced, and its measures are not shown as this run's."""
    saved = tmp_path / "saved.json"
    record = built.passed / "results.json"
    saved.write_bytes(record.read_bytes())
    record.write_bytes((built.failed / "results.json").read_bytes())
    try:
        code, text = gate("history", "reference-prefix-basic", "--ledger", str(built.ledger))
        diff_code, diff_text = gate("diff", str(built.failed), "--ledger", str(built.ledger))
    finally:
        record.write_bytes(saved.read_bytes())
    assert code == 0 and f"run #1: dossier replaced: {record.resolve()} is not the results.json" in text, text
    first = next(line for line in text.splitlines() if line.strip().startswith("#1 "))
    assert first.split()[4:] == ["pass"] * 5  # the ledger's statuses, no measure from the other run
    assert diff_code == 2 and "entry #1: dossier replaced" in diff_text
