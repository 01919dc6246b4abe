"""Approvals: bound to the dossier's digest, signed by an independent key, refused when anything is off."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from gate.cli.main import cli
from gate.trust.approval_predicate import APPROVAL_FILE, ApprovalRefused, read_run_statement
from gate.trust.approvals import (
    RECORD_FIELDS,
    ApprovalFile,
    ApprovalRecord,
    approval_record,
    approval_statement,
    load_approvals,
    verify_approval,
)
from gate.trust.approve import APPROVED_HTML, approve
from gate.trust.attest import ENVELOPE_NAME, envelope_for, verify_envelope
from gate.trust.keys import generate_keypair, keyid, load_private_key
from gate.trust.ledger import Ledger
from tests.trust.runs import quant_manifest, signed_run
from tests.trust.trusted import write_trust

COMMIT = "3f2c1a9e8b7d6c5f4e3d2c1b0a9f8e7d6c5b4a39"


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("keys")
    found = {}
    for name in ("gate", "alice", "mallory"):
        key, pub, _ = generate_keypair(root / name)
        found[f"{name}.key"], found[f"{name}.pub"] = key, pub
    return found


@pytest.fixture(autouse=True)
def trust(tmp_path: Path, keys: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> Path:
    """trust.yaml ($GATE_TRUST): gate signs runs, alice approves; mallory is a stranger."""
    path = write_trust(tmp_path / "trust.yaml", keys, run_signers=("gate",), approvers=("alice",))
    monkeypatch.setenv("GATE_TRUST", str(path))
    return path


def _run(
    tmp_path: Path,
    keys: dict[str, Path],
    ledger: Path | None,
    name: str = "run",
    quality: str = "pass",
    commit: str = COMMIT,
) -> Path:
    manifest = quant_manifest(tmp_path / name / "kv-int8.yaml", commit)
    out, _ = signed_run(tmp_path / name / "out", manifest, keys["gate.key"], ledger=ledger, quality=quality)
    return out


def _approve(out: Path, keys: dict[str, Path], ledger: Path, who: str = "alice", **kw: object):  # type: ignore[no-untyped-def]
    return approve(
        out,
        approver=who,
        reason="retrieval bound 0.962 holds; memory -47%",
        key_path=keys[f"{who}.key"],
        ledger_path=ledger,
        **kw,
    )  # type: ignore[arg-type]


def test_approval_is_a_second_signature_a_signed_statement_a_ledger_entry_and_shown(
    tmp_path: Path, keys: dict[str, Path], ledger: Path
) -> None:
    out = _run(tmp_path, keys, ledger)
    assert read_run_statement(out).predicate.verdict == "awaiting-approval"
    done = _approve(out, keys, ledger)
    assert not done.reused and done.entry.kind == "approval"
    # 1. a second signature over the same run statement
    both = verify_envelope(out, [keys["gate.pub"], keys["alice.pub"]], require_all=True)
    assert both.valid, both.failures
    assert len(json.loads((out / ENVELOPE_NAME).read_text())["signatures"]) == 2
    # 2. its own signed statement in approval.json, bound to the dossier digest
    (record,) = load_approvals(out)
    check = verify_approval(
        record,
        expected_statement=read_run_statement(out).sha256,
        directory=out,
        trusted_keyids=[keyid(load_private_key(keys["alice.key"]).public_key())],
    )
    assert check.ok, check.problems
    assert (check.approver, record.ledger.entry.seq if record.ledger else None) == ("alice", done.entry.seq)
    # 3. the ledger entry carries the same envelope
    with Ledger.open(ledger, writable=False) as opened:
        body = opened.get(done.entry.seq).body  # type: ignore[union-attr]
    assert body["envelope"] == record.envelope.dump() and body["commit"] == COMMIT and body["run_entry"] == 1
    # 4. the dossier shows it (the signed dossier.html itself is unchanged and still verifies)
    html = (out / APPROVED_HTML).read_text()
    assert "APPROVED" in html and "alice" in html and "retrieval bound 0.962 holds" in html
    markdown = (out / "dossier.approved.md").read_text()
    assert "### Approvals" in markdown and "approver: alice" in markdown and "retrieval bound 0.962" in markdown
    cli_verify = CliRunner().invoke(
        cli, ["verify", str(out), "--run-key", str(keys["gate.pub"]), "--approver-key", str(keys["alice.pub"])]
    )
    assert cli_verify.exit_code == 0, cli_verify.output
    # approving twice with the same key appends nothing
    again = _approve(out, keys, ledger)
    assert again.reused and again.entry.seq == done.entry.seq and len(load_approvals(out)) == 1


def test_a_failed_run_cannot_be_approved(tmp_path: Path, keys: dict[str, Path], ledger: Path) -> None:
    out = _run(tmp_path, keys, ledger, quality="fail")
    with pytest.raises(ApprovalRefused, match="'fail': it failed"):
        _approve(out, keys, ledger)
    assert not (out / APPROVAL_FILE).exists()
    assert len(json.loads((out / ENVELOPE_NAME).read_text())["signatures"]) == 1


def test_a_dossier_that_does_not_verify_cannot_be_approved(tmp_path: Path, keys: dict[str, Path], ledger: Path) -> None:
    out = _run(tmp_path, keys, ledger)
    results = out / "results.json"
    results.write_text(results.read_text().replace('"awaiting-approval"', '"awaiting-approval" '))
    with pytest.raises(ApprovalRefused, match=r"does not verify.*results\.json"):
        _approve(out, keys, ledger)
    (out / ENVELOPE_NAME).unlink()
    with pytest.raises(ApprovalRefused, match="UNSIGNED"):
        _approve(out, keys, ledger)


def test_the_run_must_be_signed_by_a_run_signer(tmp_path: Path, keys: dict[str, Path], ledger: Path) -> None:
    manifest = quant_manifest(tmp_path / "m" / "kv-int8.yaml", COMMIT)
    out, _ = signed_run(tmp_path / "m" / "out", manifest, keys["mallory.key"], ledger=ledger)
    with pytest.raises(ApprovalRefused, match="does not verify"):
        _approve(out, keys, ledger)
    unrecorded = _run(tmp_path, keys, None)  # the trust policy, not the ledger, names the run signers
    assert _approve(unrecorded, keys, ledger).record.approver == "alice"


def test_the_run_signing_key_cannot_approve_its_own_run(
    tmp_path: Path, keys: dict[str, Path], ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    both = write_trust(tmp_path / "both.yaml", keys, run_signers=("gate",), approvers=("alice", "gate"))
    monkeypatch.setenv("GATE_TRUST", str(both))
    out = _run(tmp_path, keys, ledger)
    with pytest.raises(ApprovalRefused, match="second, independent key"):
        _approve(out, keys, ledger, who="gate")


def test_forged_approvals_are_refused(tmp_path: Path, keys: dict[str, Path], ledger: Path) -> None:
    out = _run(tmp_path, keys, ledger)
    _approve(out, keys, ledger)
    (record,) = load_approvals(out)
    digest = read_run_statement(out).sha256
    alice, mallory = load_private_key(keys["alice.key"]), load_private_key(keys["mallory.key"])
    alice_id = keyid(alice.public_key())

    # mallory signs a statement naming alice, and presents alice's public key: the signature fails
    statement = approval_statement(
        read_run_statement(out), approver="alice", reason="ship it", approved_at="now", run_signers=[]
    )
    forged = approval_record(envelope_for(statement, mallory), alice, statement)
    check = verify_approval(forged, expected_statement=digest)
    assert not check.ok and "forged or wrong key" in " ".join(check.problems)

    # mallory signs with her own key: self-consistent, but not a trusted approver
    own = approval_record(envelope_for(statement, mallory), mallory, statement)
    assert verify_approval(own, expected_statement=digest).ok
    check = verify_approval(own, expected_statement=digest, trusted_keyids=[alice_id], directory=out)
    assert "not a trusted approver key" in " ".join(check.problems)
    assert "no signature by the approver's key" in " ".join(check.problems)

    # the genuine record with its reason edited
    edited = record.model_copy(update={"reason": "approved by the CTO"})
    assert "differs from the signed statement" in " ".join(verify_approval(edited).problems)


def test_an_approval_does_not_transfer_to_another_dossier(tmp_path: Path, keys: dict[str, Path], ledger: Path) -> None:
    first = _run(tmp_path, keys, ledger, name="a")
    second = _run(tmp_path, keys, ledger, name="b", commit="b" * 40)
    _approve(first, keys, ledger)
    shutil.copy(first / APPROVAL_FILE, second / APPROVAL_FILE)
    (record,) = load_approvals(second)
    check = verify_approval(record, expected_statement=read_run_statement(second).sha256, directory=second)
    assert not check.ok
    problems = " ".join(check.problems)
    assert "for another dossier" in problems and "not the one approved" in problems


def test_gate_approve_command(tmp_path: Path, keys: dict[str, Path], ledger: Path) -> None:
    out = _run(tmp_path, keys, ledger)
    args = [
        "approve",
        str(out),
        "--approver",
        "alice",
        "--key",
        str(keys["alice.key"]),
        "--reason",
        "ok",
        "--ledger",
        str(ledger),
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "approved:" in result.output and "dossier digest sha256:" in result.output
    failed = _run(tmp_path, keys, ledger, name="failed", quality="fail")
    args[1] = str(failed)
    refused = CliRunner().invoke(cli, args)
    assert refused.exit_code == 1 and "only an awaiting-approval run can be approved" in refused.output


def test_a_rerun_into_the_same_directory_drops_the_old_approval(
    tmp_path: Path, keys: dict[str, Path], ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gate.engine import runner

    out = _run(tmp_path, keys, ledger)
    _approve(out, keys, ledger)
    assert (out / APPROVAL_FILE).is_file() and (out / APPROVED_HTML).is_file()
    manifest = tmp_path / "run" / "kv-int8.yaml"
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GATE_LEDGER", raising=False)
    monkeypatch.setattr(
        runner, "run_manifest", lambda path, out_dir, *_args, **_sinks: signed_run(out_dir, path, keys["gate.key"])[1]
    )
    rerun = CliRunner().invoke(cli, ["run", str(manifest), "--out", str(out), "--sign-key", str(keys["gate.key"])])
    assert rerun.exit_code == 4, rerun.output
    assert not (out / APPROVAL_FILE).exists() and not (out / APPROVED_HTML).exists()
    assert not (out / "ledger.json").exists()  # this run was not recorded: no receipt from the last one


def test_approval_records_keep_their_bytes_in_approval_json_and_the_ledger(
    tmp_path: Path, keys: dict[str, Path], ledger: Path
) -> None:
    out = _run(tmp_path, keys, ledger)
    done = _approve(out, keys, ledger)
    written = (out / APPROVAL_FILE).read_bytes()
    (record,) = load_approvals(out)
    assert ApprovalFile(approvals=[record]).dump() == written
    # the ledger entry holds the record's fields (and more about the run); read back, they are the same
    with Ledger.open(ledger, writable=False) as opened:
        body = opened.get(done.entry.seq).body  # type: ignore[union-attr]
    from_entry = ApprovalRecord.of_entry(body)
    assert from_entry is not None and from_entry.dump() == {k: body[k] for k in RECORD_FIELDS}
    assert from_entry.dump() == {k: v for k, v in record.dump().items() if k != "ledger"}
    # a record written before approvals bound evidence has no evidence_sha256: it is written back without one
    old = json.loads(written)
    del old["approvals"][0]["evidence_sha256"]
    older = (json.dumps(old, indent=2) + "\n").encode()
    (out / APPROVAL_FILE).write_bytes(older)
    (record,) = load_approvals(out)
    assert record.evidence_sha256 is None and ApprovalFile(approvals=[record]).dump() == older
    assert verify_approval(record, expected_statement=read_run_statement(out).sha256, directory=out).ok
    # an unknown key is refused (extra=forbid), as is a record whose envelope is not one
    for bad in ({**old["approvals"][0], "approved": True}, {**old["approvals"][0], "envelope": {"payload": 1}}):
        (out / APPROVAL_FILE).write_text(json.dumps({"approvals": [bad]}))
        with pytest.raises(ApprovalRefused, match="not a readable approval file"):
            load_approvals(out)
    assert ApprovalRecord.of_entry({**body, "envelope": "x"}) is None
    assert "the approval record is malformed" in verify_approval(None).problems
