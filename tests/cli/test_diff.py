"""`gate diff`: real dossiers from a real ledger (tests/cli/ledger_history.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.cli.ledger_history import BROKEN_SHA, FAIL_SHA, PASS_SHA, Built, built, gate

__all__ = ["built"]


def test_the_diff_shows_the_verdict_change_and_the_first_failing_check_and_length(built: Built) -> None:
    code, text = gate("diff", str(built.passed), str(built.failed))
    assert code == 0, text
    assert "verdict: PASS -> FAIL" in text
    lines = text.splitlines()
    status = next(line for line in lines if "prefix-reuse-parity" in line and "status" in line)
    assert status.split()[-3:] == ["pass", "->", "fail"]
    first = next(line for line in lines if "prefix-reuse-parity" in line and "first failing" in line)
    assert first.split()[-4:] == ["—", "->", "index", "4"], first
    assert any("identity" in line and "commit" in line and PASS_SHA in line and FAIL_SHA in line for line in lines)
    assert any(line.strip().startswith("unchanged check: 1: invalidation") for line in lines)
    assert not any("invalidation" in line for line in lines if not line.strip().startswith("unchanged"))


def test_with_a_ledger_the_base_is_the_newest_run_of_the_manifest_on_another_commit(built: Built) -> None:
    code, text = gate("diff", str(built.failed), "--ledger", str(built.ledger), "--format", "json")
    assert code == 0, text
    diff = json.loads(text)
    assert (diff["verdict_a"], diff["verdict_b"]) == ("pass", "fail")
    assert diff["a"] == str(built.passed.resolve()) and f"commit {PASS_SHA}" in diff["a_label"]
    changed = {(c["item"], c["field"]): (c["a"], c["b"]) for c in diff["changes"]}
    assert changed[("prefix-reuse-parity", "status")] == ("pass", "fail")
    assert changed[("prefix-reuse-parity", "first failing")] == ("—", "index 4")
    assert changed[("commit", "")] == (PASS_SHA, FAIL_SHA)
    assert "invalidation" in diff["unchanged"]["check"]


def test_markdown_is_a_pr_comment_with_a_table_of_changes(built: Built) -> None:
    code, text = gate("diff", str(built.passed), str(built.failed), "--format", "md")
    assert code == 0, text
    assert "- verdict: **PASS** → **FAIL**" in text
    assert "| check | `prefix-reuse-parity` | status | `pass` | `fail` |" in text
    assert "| check | `prefix-reuse-parity` | first failing | `—` | `index 4` |" in text
    assert "<details><summary>unchanged</summary>" in text and "invalidation" in text.split("<details>")[1]


def test_a_plan_change_names_the_checks_added_and_removed_and_the_claim(built: Built) -> None:
    code, text = gate("diff", str(built.approved), str(built.passed), "--format", "json")
    assert code == 0, text
    changes = json.loads(text)["changes"]
    plan = {c["item"]: (c["a"], c["b"]) for c in changes if c["section"] == "plan"}
    assert plan["check quality-slices"] == ("planned", None)
    assert plan["check prefix-reuse-parity"] == (None, "planned")
    assert plan["claim"][0] == "bounded-degradation" and plan["claim"][1] != plan["claim"][0]
    added = next(c for c in changes if c["section"] == "check" and c["item"] == "prefix-reuse-parity")
    assert (added["a"], added["b"]) == (None, "pass")


def test_a_changed_parameter_and_policy_digest_are_plan_lines(built: Built, tmp_path: Path) -> None:
    """B: A's record as a run under an edited policy would have it (prefix-reuse.yaml's digest and
    the sweep's parameter changed)."""
    edited = tmp_path / "edited"
    shutil.copytree(built.passed, edited)
    document = json.loads((edited / "results.json").read_text())
    policy = next(p for p in document["policies"] if p["path"].endswith("prefix-reuse.yaml"))
    before, policy["sha256"] = policy["sha256"], "f" * 64
    document["plan"]["checks"][0]["params"] = {"requests": 12}
    (edited / "results.json").write_text(json.dumps(document))
    code, text = gate("diff", str(built.passed), str(edited))
    assert code == 0 and "verdict: PASS (unchanged)" in text, text
    lines = [line.split() for line in text.splitlines() if line.startswith("  plan")]
    assert ["plan", "policy", "prefix-reuse.yaml", before[:12], "->", "f" * 12] in lines
    assert ["plan", "check", "prefix-reuse-parity.params", "{}", "->", '{"requests":', "12}"] in lines


def test_bad_input_is_one_located_line_and_exit_2(built: Built, tmp_path: Path) -> None:
    code, text = gate("diff", str(tmp_path), str(built.failed))
    assert code == 2 and text.strip().splitlines() == [
        f"gate: {tmp_path / 'results.json'}: no results.json here (give a dossier directory from `gate run --out`)"
    ]
    broken = tmp_path / "broken"
    shutil.copytree(built.passed, broken)
    document = json.loads((broken / "results.json").read_text())
    document["verdict"] = "maybe"
    (broken / "results.json").write_text(json.dumps(document))
    code, text = gate("diff", str(broken), str(built.failed))
    assert code == 2 and len(text.strip().splitlines()) == 1 and "verdict" in text, text
    code, text = gate("diff", str(built.failed))
    assert code == 2 and "give two dossiers A B, or one dossier A and --ledger L" in text


def test_a_ledger_base_whose_dossier_is_gone_is_one_line_and_exit_2(built: Built) -> None:
    moved = built.broken.with_name("moved")
    built.broken.rename(moved)
    try:
        code, text = gate("diff", str(built.approved), "--ledger", str(built.ledger))
    finally:
        moved.rename(built.broken)
    assert code == 2 and len(text.strip().splitlines()) == 1, text
    assert f"entry #6: dossier not found ({built.broken.resolve()})" in text
    code, text = gate("diff", str(built.approved), "--ledger", str(built.ledger))
    assert code == 0 and f"commit {BROKEN_SHA}" in text and "verdict: FAIL -> AWAITING-APPROVAL" in text


def test_markdown_keeps_a_hostile_value_inert(built: Built, tmp_path: Path) -> None:
    """A check message or subject field is text from a run: in the PR comment it stays a code span
    on its row, whatever it holds (backticks, pipes, HTML, a mention, a line break)."""
    hostile = tmp_path / "hostile"
    shutil.copytree(built.passed, hostile)
    document = json.loads((hostile / "results.json").read_text())
    document["subjects"]["candidate"]["path"] = "x` | <img src=y> @admin\n| row"
    (hostile / "results.json").write_text(json.dumps(document))
    code, text = gate("diff", str(built.passed), str(hostile), "--format", "md")
    row = next(line for line in text.splitlines() if "subjects.candidate.path" in line)
    assert code == 0 and row.endswith("| `x' \\| <img src=y> @admin \\| row` |"), row
    assert row.replace("\\|", "").count("|") == 6  # five cells, one row


def _with_performance(source: Path, out: Path, low: float, high: float) -> Path:
    """A copy of `source` whose record also holds a phase-performance result (a wall-clock check:
    its clocks differ between any two runs) with a TPOT p95 ratio in [low, high]."""
    shutil.copytree(source, out)
    document = json.loads((out / "results.json").read_text())
    ratio = (low + high) / 2
    metrics = {"tpot_p95_ratio": ratio, "tpot_p95_low": low, "tpot_p95_high": high, "samples_per_s": 10 * ratio}
    document["checks"].append(
        {"check": "phase-performance", "status": "pass", "severity": "warn", "step": 6, "metrics": metrics}
    )
    (out / "results.json").write_text(json.dumps(document))
    return out


def test_a_wall_clock_interval_is_a_change_only_when_the_two_do_not_overlap(built: Built, tmp_path: Path) -> None:
    base = _with_performance(built.passed, tmp_path / "base", 1.1, 1.3)
    overlapping = _with_performance(built.passed, tmp_path / "overlapping", 1.2, 1.5)
    slower = _with_performance(built.passed, tmp_path / "slower", 1.6, 2.4)
    code, text = gate("diff", str(base), str(overlapping))
    assert code == 0 and "phase-performance" in next(line for line in text.splitlines() if "unchanged check" in line)
    code, text = gate("diff", str(base), str(slower))
    row = next(line for line in text.splitlines() if "phase-performance" in line and "unchanged" not in line)
    assert code == 0 and row.split()[2:] == ["tpot_p95_ratio", "1.2", "[1.1,", "1.3]", "->", "2", "[1.6,", "2.4]"], row
