"""gate.trust.keys: one keygen, one key id, and what the code before it signed still verifies.

`fixtures/signed-before-keys/` was made by main 101d41f's code (gate.trust.attest's keygen and
sign_directory, gate.trust.signing's sign_statement) before keys moved here and the predicate became
a model: a signed run directory (`run/`), its public key, its key id and a detached signature.
"""

from __future__ import annotations

import base64
import json
import shutil
import stat
from pathlib import Path

import pytest

from gate.trust.attest import ENVELOPE_NAME, read_envelope, statement, verify_envelope
from gate.trust.keys import (
    generate_keypair,
    keyid,
    load_private_key,
    load_public_key,
    public_key_b64,
    public_key_from_b64,
    sign_statement,
    verify_statement,
    write_keypair,
)
from gate.trust.statement import RunPredicate, parse_statement

OLD = Path(__file__).parent / "fixtures" / "signed-before-keys"


def test_a_run_signed_before_the_change_still_verifies() -> None:
    report = verify_envelope(OLD / "run", [OLD / "gate.pub"])
    assert report.valid, report.problems
    assert [s.keyid for s in report.signed_by] == [(OLD / "keyid").read_text().strip()]
    assert report.predicate is not None and report.predicate.verdict == "error"
    assert report.predicate.manifest.file == "manifest.yaml"
    assert report.predicate.claim_level == "tolerance"


def test_the_predicate_model_writes_the_bytes_the_old_code_signed(tmp_path: Path) -> None:
    _envelope, signed = read_envelope(OLD / "run" / ENVELOPE_NAME)
    old = parse_statement(signed)
    again = statement(OLD / "run", list(old.files()), "manifest.yaml")
    assert again.canonical() == signed  # same statement, same predicate, byte for byte
    assert RunPredicate.read(old).dump() == old.predicate


def test_a_tampered_old_run_fails(tmp_path: Path) -> None:
    shutil.copytree(OLD / "run", tmp_path / "run")
    results = tmp_path / "run" / "results.json"
    results.write_text(results.read_text().replace('"verdict": "error"', '"verdict": "pass"', 1))
    problems = verify_envelope(tmp_path / "run", [OLD / "gate.pub"]).problems
    assert any("results.json: sha256" in p for p in problems), problems


def test_a_detached_signature_made_before_the_change_still_verifies() -> None:
    made = json.loads((OLD / "detached.json").read_text())
    assert verify_statement(made["signature"], made["domain"], made["statement"]) is None
    assert verify_statement(made["signature"], made["domain"], {**made["statement"], "reason": "x"}) is not None
    assert made["signature"]["keyid"] == keyid(load_public_key(OLD / "gate.pub"))


def test_a_malformed_predicate_is_a_failure_not_a_crash(tmp_path: Path) -> None:
    shutil.copytree(OLD / "run", tmp_path / "run")
    path = tmp_path / "run" / ENVELOPE_NAME
    envelope = json.loads(path.read_text())
    body = json.loads(base64.b64decode(envelope["payload"]))
    body["predicate"]["manifest"] = "not a mapping"
    envelope["payload"] = base64.b64encode(json.dumps(body).encode()).decode()
    path.write_text(json.dumps(envelope))
    report = verify_envelope(tmp_path / "run", [OLD / "gate.pub"])
    assert report.predicate is None and not report.valid
    assert any(p.startswith("predicate is not a gate run predicate (manifest:") for p in report.problems)


def test_one_keygen_for_the_cli_and_the_ledger(tmp_path: Path) -> None:
    key, pub, kid = generate_keypair(tmp_path / "ci")
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and stat.S_IMODE(pub.stat().st_mode) == 0o644
    assert keyid(load_private_key(key).public_key()) == kid == keyid(load_public_key(pub))
    with pytest.raises(Exception, match="already exists"):
        generate_keypair(tmp_path / "ci")
    assert generate_keypair(tmp_path / "ci", force=True)[2] != kid
    # the ledger's race-safe form: the first writer wins, the second learns it lost
    first = write_keypair(tmp_path / "l.key", tmp_path / "l.pub")
    assert first is not None and write_keypair(tmp_path / "l.key", tmp_path / "l.pub") is None
    assert keyid(load_private_key(tmp_path / "l.key").public_key()) == first
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp file left


def test_the_key_id_is_the_same_from_pem_and_from_base64(tmp_path: Path) -> None:
    _key, pub, kid = generate_keypair(tmp_path / "k")
    assert keyid(public_key_from_b64(public_key_b64(load_public_key(pub)))) == kid
    signature = sign_statement(load_private_key(_key), "gate/test", {"a": 1})
    assert signature["keyid"] == kid and verify_statement(signature, "gate/test", {"a": 1}, [kid]) is None


def test_the_approval_predicate_model_writes_the_keys_the_old_code_wrote() -> None:
    from gate.trust.approval_predicate import RunStatement
    from gate.trust.approvals import approval_statement

    _envelope, signed = read_envelope(OLD / "run" / ENVELOPE_NAME)
    old = parse_statement(signed)
    run = RunStatement(signed, "ab" * 32, old, RunPredicate.read(old))
    made = approval_statement(run, approver="ana", reason="ok", approved_at="2025-01-01T00:00:00Z", run_signers=[])
    assert set(made.predicate) == {
        *("decision", "approver", "reason", "approvedAt", "runStatementSha256", "runPredicateType", "verdict"),
        *("manifest", "intervention", "claim", "commit", "runSigners", "trustPolicySha256", "evidenceSha256"),
        *("policies", "sitePolicy"),
    }
    assert made.predicate["manifest"] == {"name": "layout change", "sha256": old.predicate["manifest"]["sha256"]}
    assert (
        made.predicate["claim"] == "tolerance" and made.predicate["evidenceSha256"] == old.predicate["evidenceSha256"]
    )
