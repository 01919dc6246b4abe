"""Known bugs of the subject declared as expected failures (`known_bugs`, gate.core.known_bugs).

The planted fault `reset-keeps-position` (examples/reference-fault-reset-keeps-position.yaml)
fails reset-isolation with class reset-leak on the reference adapter: it stands in for an upstream
library's reset bug. Each case runs the real CLI on a copy of that manifest with a declaration."""

from __future__ import annotations

import json
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from gate.cli.main import cli
from gate.errors import EXIT_BAD_INPUT, EXIT_GATE_FAILED, EXIT_PARTIAL, EXIT_PASS
from gate.trust.evidence import evidence_document
from gate.trust.keys import generate_keypair
from tests.support.repo import REPO
from tests.trust.trusted import write_trust

EXAMPLE = REPO / "examples" / "reference-fault-reset-keeps-position.yaml"
LINK = "https://example.org/upstream/issues/1"
LATER = (date.today() + timedelta(days=30)).isoformat()
AFFECTED = "pydantic>=2,<3"  # installed here, so the declaration applies
UNAFFECTED = "pydantic<2"


def _bug(check: str = "reset-isolation", bug_class: str = "reset-leak", **over: Any) -> dict[str, Any]:
    bug = {"id": f"{check}-{bug_class}", "link": LINK, "affects": AFFECTED, "check": check, "class": bug_class}
    return {**bug, "expires": LATER, "reason": "the library's reset keeps its length", **over}


def _manifest(tmp_path: Path, bugs: list[dict[str, Any]], fault: bool = True) -> Path:
    doc = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    doc["known_bugs"] = bugs
    if not fault:
        doc["subject"]["candidate"]["options"].pop("fault")
    path = tmp_path / "manifest.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def _run(tmp_path: Path, manifest: Path, *only: str, sign: Path | None = None) -> tuple[int, dict[str, Any], str]:
    out = tmp_path / "out"
    signing = ["--sign-key", str(sign)] if sign else []
    result = CliRunner().invoke(
        cli, ["run", str(manifest), "--out", str(out), *signing, *(a for name in only for a in ("--check", name))]
    )
    assert result.exit_code != EXIT_BAD_INPUT, result.output
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    return result.exit_code, results, (out / "dossier.md").read_text(encoding="utf-8")


def _check(results: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in results["checks"] if c["check"] == name)


def test_declared_and_matching_failures_read_as_known_bugs_and_the_verdict_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every failure of the planted reset bug declared (mask-oracle's and reset-isolation's reset-leak,
    schedule-fuzz's uncertain): PASS, each reads "known bug, expected (LINK)", shown on the dossier's
    first screen, in the plan, in the evidence digest an approver signs and by `gate verify`."""
    monkeypatch.delenv("GATE_TRUST", raising=False)
    monkeypatch.delenv("GATE_LEDGER", raising=False)
    monkeypatch.chdir(tmp_path)
    keys = {}
    for name in ("ci", "alice", "bob"):
        keys[f"{name}.key"], keys[f"{name}.pub"], _ = generate_keypair(tmp_path / "keys" / name)
    trust = write_trust(tmp_path / "policy" / "trust.yaml", keys, approvers=("alice",))
    bugs = [_bug(), _bug("mask-oracle"), _bug("schedule-fuzz", "uncertain")]
    manifest = _manifest(tmp_path, bugs)
    plan = CliRunner().invoke(cli, ["plan", str(manifest)])
    assert plan.exit_code == 0 and "known bugs (declared by the manifest" in plan.output, plan.output
    assert "reset-isolation-reset-leak: applies" in plan.output
    code, results, dossier = _run(tmp_path, manifest, sign=keys["ci.key"])
    assert code == EXIT_PASS and results["verdict"] == "pass", results["summary"]
    isolation = _check(results, "reset-isolation")
    assert isolation["status"] == "warn" and isolation["known_bug"] == "reset-isolation-reset-leak"
    assert isolation["message"].startswith(f"known bug, expected ({LINK})")
    assert isolation["diagnosis"]["bug_class"] == "reset-leak"  # the failure itself stays on the record
    assert [b["disposition"] for b in results["known_bugs"]] == ["expected"] * 3
    assert f"known bug, expected ({LINK})" in results["summary"]
    assert f"> known bug, expected ({LINK}): reset-isolation failed with class reset-leak" in dossier
    assert f"known bug, expected ({LINK})" in (tmp_path / "out" / "dossier.html").read_text(encoding="utf-8")
    evidence = evidence_document(results, {})
    assert [b["id"] for b in evidence["known_bugs"]] == [b["id"] for b in bugs]
    rows = {row["check"]: row for row in evidence["checks"]}
    assert rows["reset-isolation"]["known_bug"] == "reset-isolation-reset-leak"
    # the declaration is the change's own word: the deploy ships it only when main's trust policy names it
    verified = CliRunner().invoke(cli, ["verify", str(tmp_path / "out"), "--trust", str(trust)])
    held = "known bug reset-isolation-reset-leak declared by the manifest held reset-isolation"
    assert verified.exit_code == 7 and held in verified.output, verified.output
    assert "a relaxation the change wrote itself, not among" in verified.output, verified.output
    ids = ", ".join(b["id"] for b in bugs)
    trust.write_text(trust.read_text(encoding="utf-8") + f"known-bugs: [{ids}]\n", encoding="utf-8")
    accepted = CliRunner().invoke(cli, ["verify", str(tmp_path / "out"), "--trust", str(trust)])
    assert accepted.exit_code == 0 and f"{held} (class reset-leak" in accepted.output, accepted.output
    assert "(known-bugs)" in accepted.output, accepted.output


def test_an_undeclared_failure_still_fails(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, [_bug("reset-isolation", "uncertain")])  # another class: not this failure
    code, results, _ = _run(tmp_path, manifest, "reset-isolation")
    assert code == EXIT_GATE_FAILED and _check(results, "reset-isolation")["status"] == "fail"
    assert _check(results, "reset-isolation")["known_bug"] is None
    assert results["known_bugs"][0]["disposition"] == "not-showing"
    assert "fixed upstream? remove the declaration" in results["known_bugs"][0]["note"]


def test_a_declaration_whose_versions_are_not_installed_does_not_apply(tmp_path: Path) -> None:
    code, results, dossier = _run(tmp_path, _manifest(tmp_path, [_bug(affects=UNAFFECTED)]), "reset-isolation")
    assert code == EXIT_GATE_FAILED and _check(results, "reset-isolation")["status"] == "fail"
    bug = results["known_bugs"][0]
    assert bug["disposition"] == "not-affected" and bug["installed"] and bug["installed"].startswith("2.")
    assert "does not apply: pydantic 2." in dossier


def test_an_expired_declaration_is_ignored_with_a_warning(tmp_path: Path) -> None:
    expired = (date.today() - timedelta(days=2)).isoformat()
    manifest = _manifest(tmp_path, [_bug(expires=expired)])
    plan = CliRunner().invoke(cli, ["plan", str(manifest)])
    assert plan.exit_code == 0 and f"expired on {expired}: ignored" in plan.output, plan.output
    code, results, dossier = _run(tmp_path, manifest, "reset-isolation")
    assert code == EXIT_GATE_FAILED and _check(results, "reset-isolation")["status"] == "fail"
    assert results["known_bugs"][0]["disposition"] == "expired"
    assert f"known bug reset-isolation-reset-leak expired on {expired}: ignored" in dossier


def test_a_declared_bug_that_no_longer_shows_is_a_note_to_remove_it(tmp_path: Path) -> None:
    code, results, dossier = _run(tmp_path, _manifest(tmp_path, [_bug()], fault=False), "reset-isolation")
    assert code == EXIT_PARTIAL and _check(results, "reset-isolation")["status"] == "pass", results["summary"]
    bug = results["known_bugs"][0]
    assert bug["disposition"] == "not-showing" and "is pass" in bug["note"]
    assert "fixed upstream? remove the declaration" in dossier


def test_a_declaration_must_name_a_planned_check_and_a_package_range(tmp_path: Path) -> None:
    for bug, words in (
        (_bug("no-such-check"), "known_bugs[0].check"),
        (_bug(affects="transformers"), "must be one package and a version range"),
        (_bug(affects="not a requirement!"), "is not a package requirement"),
        (_bug(expires="soon"), "known_bugs[0].expires"),
    ):
        result = CliRunner().invoke(cli, ["validate", str(_manifest(tmp_path, [bug]))])
        assert result.exit_code == EXIT_BAD_INPUT and words in result.output, result.output
    twice = CliRunner().invoke(cli, ["validate", str(_manifest(tmp_path, [_bug(), _bug()]))])
    assert twice.exit_code == EXIT_BAD_INPUT and "must not repeat" in twice.output, twice.output
