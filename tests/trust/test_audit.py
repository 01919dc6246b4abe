"""End to end: waive, run, approve from the command line; then, from a commit alone, find and verify
the dossier, the approval and the waiver offline; and see tampering named."""

from __future__ import annotations

import json
import sqlite3
from datetime import date, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from gate.cli.main import cli
from gate.core.result import GateResult
from gate.trust.keys import generate_keypair
from tests.trust.runs import quant_manifest, signed_run
from tests.trust.trusted import write_trust

COMMIT = "9c0ffee1d2e3f405162738495a6b7c8d9e0f1a2b"


def gate(*args: str | Path) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A reviewed approximate change: a waiver, a signed awaiting-approval run, an approval.

    trust.yaml ($GATE_TRUST): gate signs runs, alice approves, bob waives quality-slices."""
    keys = {}
    for name in ("gate", "alice", "bob"):
        keys[name + ".key"], keys[name + ".pub"], _ = generate_keypair(tmp_path / "keys" / name)
    trust = write_trust(tmp_path / "trust.yaml", keys, run_signers=("gate",), approvers=("alice",))
    monkeypatch.setenv("GATE_TRUST", str(trust))
    ledger = tmp_path / "audit" / "ledger.sqlite"
    manifest = quant_manifest(tmp_path / "change" / "kv-int8.yaml", COMMIT)
    expires = (date.today() + timedelta(days=14)).isoformat()
    waived = gate(
        "waive",
        "quality-slices",
        "--manifest",
        manifest,
        "--reason",
        "retrieval slice re-labelled; tracked in #812",
        "--approver",
        "bob",
        "--key",
        keys["bob.key"],
        "--expires",
        expires,
        "--ledger",
        ledger,
    )
    assert waived.exit_code == 0, waived.output
    # `gate run kv-int8.yaml --sign-key gate.key --ledger ledger.sqlite`, with the check results stubbed
    out, result = signed_run(tmp_path / "ci" / "dossier", manifest, keys["gate.key"], ledger=ledger, quality="fail")
    assert result.verdict.value == "awaiting-approval" and "1 waived: quality-slices" in result.summary
    approved = gate(
        "approve",
        out,
        "--approver",
        "alice",
        "--key",
        keys["alice.key"],
        "--reason",
        "envelope holds on the relabelled slice; memory -47%",
        "--ledger",
        ledger,
    )
    assert approved.exit_code == 0, approved.output
    return {**keys, "ledger": ledger, "out": out, "manifest": manifest}


def test_from_a_commit_alone_an_auditor_finds_and_verifies_everything(world: dict[str, Path]) -> None:
    traced = gate(
        "audit",
        "trace",
        COMMIT[:10],
        "--ledger",
        world["ledger"],
    )
    assert traced.exit_code == 0, traced.output
    text = traced.output
    assert f"dossier   {world['out'].resolve()}" in text
    assert "ok   results.json: sha256 matches the ledger" in text
    assert "ok   manifest.yaml: sha256 matches the ledger" in text
    assert "ok   run signed by gate" in text
    assert "ok   approval #3: approval by alice" in text and "status    APPROVED by alice" in text
    assert "waiver #1: WAIVER" in text and "quality-slices of kv-int8 by bob" in text and "(applied)" in text
    assert "3 entries, chain and 5 checkpoints verify" in text and text.rstrip().endswith("VERIFIED")

    verified = gate(
        "audit",
        "verify",
        "--ledger",
        world["ledger"],
        "--checkpoint",
        world["out"],
        "--ledger-pub",
        world["ledger"].with_suffix(".pub"),
    )
    assert verified.exit_code == 0, verified.output
    assert "3 entries" in verified.output and "(2 held outside the ledger)" in verified.output

    # the waived check shows as waived in results, dossier and JUnit
    results = json.loads((world["out"] / "results.json").read_text())
    quality = next(c for c in results["checks"] if c["check"] == "quality-slices")
    assert quality["status"] == "waived" and quality["waiver"]["ledger_id"] == 1
    assert 'skipped="1"' in (world["out"] / "junit.xml").read_text()
    assert "Waived: retrieval slice re-labelled" in (world["out"] / "dossier.md").read_text()

    # the same dossier also verifies with the plain attestation verifier, both signers required
    assert (
        gate(
            "verify",
            world["out"],
            "--run-key",
            world["gate.pub"],
            "--approver-key",
            world["alice.pub"],
            "--any-verdict",
        ).exit_code
        == 0
    )

    # the dossier digest works as a reference too
    digest = json.loads((world["out"] / "approval.json").read_text())["approvals"][0]["statement_sha256"]
    assert gate("audit", "trace", f"sha256:{digest[:16]}", "--ledger", world["ledger"]).exit_code == 0


def test_list_and_show(world: dict[str, Path]) -> None:
    listed = gate("audit", "list", "--ledger", world["ledger"])
    lines = listed.output.strip().splitlines()
    assert listed.exit_code == 0 and len(lines) == 3
    assert "waiver" in lines[0] and "AWAITING-APPROVAL" in lines[1] and "APPROVED" in lines[2]
    assert "approximate" in lines[1] and "commit 9c0ffee1d2e3" in lines[1]
    assert len(gate("audit", "list", "--approximate", "--ledger", world["ledger"]).output.strip().splitlines()) == 3
    assert gate("audit", "list", "--since", "2999-01-01", "--ledger", world["ledger"]).output == ""
    assert gate("audit", "list", "--kind", "approval", "--json", "--ledger", world["ledger"]).output.count("\n") == 1
    shown = gate("audit", "show", "2", "--ledger", world["ledger"])
    assert (
        shown.exit_code == 0
        and '"verdict": "awaiting-approval"' in shown.output
        and "checkpoint size 2" in shown.output
    )
    assert gate("audit", "show", "99", "--ledger", world["ledger"]).exit_code == 2


def test_a_tampered_dossier_fails_the_trace(world: dict[str, Path]) -> None:
    results = world["out"] / "results.json"
    text = results.read_text()
    assert '"status": "waived"' in text
    results.write_text(text.replace('"status": "waived"', '"status": "pass"'))
    traced = gate("audit", "trace", COMMIT, "--ledger", world["ledger"])
    assert traced.exit_code == 1
    assert "FAIL results.json: differs from the sha256 the ledger recorded" in traced.output
    assert traced.output.rstrip().endswith("NOT VERIFIED")


def test_removing_the_approval_from_the_ledger_is_caught_by_the_dossier_receipt(world: dict[str, Path]) -> None:
    conn = sqlite3.connect(str(world["ledger"]), isolation_level=None)
    for trigger in ("entries_append_only_d", "checkpoints_append_only_d"):
        conn.execute(f"DROP TRIGGER {trigger}")
    conn.execute("DELETE FROM entries WHERE seq = 3")
    conn.execute("DELETE FROM checkpoints WHERE size = 3")
    conn.close()
    pinned = gate("audit", "verify", "--ledger", world["ledger"])  # the pin beside the file caught it
    assert pinned.exit_code == 1 and "the pinned checkpoint 3" in pinned.output and "truncated" in pinned.output
    Path(f"{world['ledger']}.pin").unlink()  # an attacker who also removes the pin...
    assert gate("audit", "verify", "--ledger", world["ledger"]).exit_code == 0  # consistent on its own
    verified = gate("audit", "verify", "--ledger", world["ledger"], "--checkpoint", world["out"])
    assert verified.exit_code == 1
    assert "first bad: entry #3" in verified.output and "truncated" in verified.output
    traced = gate("audit", "trace", COMMIT, "--ledger", world["ledger"])
    assert traced.exit_code == 1 and "truncated" in traced.output


def test_an_edited_waiver_is_named_as_the_first_bad_entry(world: dict[str, Path]) -> None:
    conn = sqlite3.connect(str(world["ledger"]), isolation_level=None)
    conn.execute("DROP TRIGGER entries_append_only_u")
    conn.execute('UPDATE entries SET body = replace(body, \'"approver":"bob"\', \'"approver":"cto"\') WHERE seq = 1')
    conn.close()
    verified = gate("audit", "verify", "--ledger", world["ledger"])
    assert verified.exit_code == 1 and "first bad: entry #1: entry 1 was edited" in verified.output


def test_a_moved_dossier_is_traced_with_dossier(world: dict[str, Path], tmp_path: Path) -> None:
    moved = tmp_path / "artifacts" / "dossier"
    world["out"].rename(moved.parent.mkdir(parents=True) or moved)
    assert gate("audit", "trace", COMMIT, "--ledger", world["ledger"]).exit_code == 1
    traced = gate("audit", "trace", COMMIT, "--ledger", world["ledger"], "--dossier", moved)
    assert traced.exit_code == 0, traced.output


def test_gate_run_records_to_the_ledger_only_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI wiring: --ledger / $GATE_LEDGER / an existing ./.gate/ledger.sqlite, else nothing."""
    from gate.engine import runner
    from gate.engine.options import RunOptions

    manifest = quant_manifest(tmp_path / "m.yaml", COMMIT)
    seen: list[Path | None] = []

    def fake_run(path: Path, out_dir: Path, options: RunOptions, **_sinks: object) -> GateResult:
        seen.append(options.ledger_path)
        _out, result = signed_run(out_dir, path, generate_keypair(tmp_path / f"k{len(seen)}")[0])
        return result

    monkeypatch.setattr(runner, "run_manifest", fake_run)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GATE_LEDGER", raising=False)
    assert gate("run", manifest, "--out", tmp_path / "o1").exit_code == 4
    assert seen == [None] and not (tmp_path / ".gate").exists()

    ledger = tmp_path / "l.sqlite"
    ran = gate("run", manifest, "--out", tmp_path / "o2", "--ledger", ledger)
    assert ran.exit_code == 4, ran.output
    assert seen[-1] == ledger and (tmp_path / "o2" / "ledger.json").is_file()
    receipt = json.loads((tmp_path / "o2" / "ledger.json").read_text())
    assert receipt["entry"] == {"seq": 1, "hash": receipt["checkpoint"]["head"], "kind": "run"}

    monkeypatch.setenv("GATE_LEDGER", str(ledger))
    assert gate("run", manifest, "--out", tmp_path / "o3").exit_code == 4 and seen[-1] == ledger
    listed = gate("audit", "list")
    assert listed.output.count("AWAITING-APPROVAL") == 2

    monkeypatch.delenv("GATE_LEDGER")
    from gate.trust.ledger import Ledger
    from gate.trust.ledger_paths import DEFAULT_LEDGER

    Ledger.open(DEFAULT_LEDGER).close()  # an existing ./.gate/ledger.sqlite is used...
    assert gate("run", manifest, "--out", tmp_path / "o4").exit_code == 4
    assert seen[-1] == DEFAULT_LEDGER and "AWAITING-APPROVAL" in gate("audit", "list").output


def test_trace_flags_an_approval_made_with_the_run_key(world: dict[str, Path]) -> None:
    from gate.trust.approval_predicate import read_run_statement
    from gate.trust.approvals import approval_record, approval_statement
    from gate.trust.attest import envelope_for
    from gate.trust.keys import load_private_key
    from gate.trust.ledger import Ledger

    run_key = load_private_key(world["gate.key"])  # written straight into the ledger, bypassing `gate approve`
    statement = approval_statement(
        read_run_statement(world["out"]),
        approver="ci",
        reason="self-approved",
        approved_at="2030-06-01T11:00:00+00:00",
        run_signers=[],
    )
    record = approval_record(envelope_for(statement, run_key), run_key, statement)
    with Ledger.open(world["ledger"]) as ledger:
        ledger.append("approval", {**record.dump(), "run_entry": 2})
    traced = gate("audit", "trace", COMMIT, "--ledger", world["ledger"])
    assert traced.exit_code == 0, traced.output  # reported and ignored: it cannot block the audit
    assert "approval #4: approval by ci" in traced.output and "approved by the key that signed the run" in traced.output
    assert "status    APPROVED by alice" in traced.output  # alice's approval still stands
