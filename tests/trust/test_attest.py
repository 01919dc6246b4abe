"""The signed attestation: keys, DSSE/PAE, and offline verification that rejects every tampering."""

from __future__ import annotations

import base64
import hashlib
import json
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

import tests.report.results as fx
from gate.cli.keygen import command as keygen
from gate.cli.verify import command as verify
from gate.core.result import GateResult
from gate.engine.pipeline import write_outputs
from gate.errors import InputError
from gate.trust.attest import ENVELOPE_NAME, add_signature, pae, verify_envelope
from gate.trust.keys import generate_keypair, keyid, load_private_key
from gate.trust.statement import PAYLOAD_TYPE, PREDICATE_TYPE, STATEMENT_TYPE

SIGNED_FILES = ("manifest.yaml", "results.json", "dossier.html", "dossier.md", "junit.xml")


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("keys")
    found = {}
    for name in ("gate", "reviewer", "stranger"):
        key, pub, _ = generate_keypair(root / name)
        found[f"{name}.key"], found[f"{name}.pub"] = key, pub
    return found


def signed_run(root: Path, key: Path, result: GateResult | None = None, manifest_text: str = "name: a\n") -> Path:
    """A run directory as `gate run --sign-key` leaves it (results.json first, then the outputs)."""
    result = result or fx.failing_parity_run()
    root.mkdir(parents=True, exist_ok=True)
    manifest = root / "change.yaml"
    manifest.write_text(manifest_text)
    digest = hashlib.sha256(manifest.read_bytes()).hexdigest()
    result = result.model_copy(update={"manifest_digest": result.manifest_digest.model_copy(update={"sha256": digest})})
    out = root / "out"
    out.mkdir()
    (out / "results.json").write_text(result.model_dump_json(indent=2))
    write_outputs(result, out, manifest, key, environ={})
    return out


def failures(out: Path, *pubs: Path) -> list[str]:
    return verify_envelope(out, list(pubs)).problems


# Keys and encoding ------------------------------------------------------------------------------


def test_pae_matches_the_dsse_spec_example() -> None:
    # https://github.com/secure-systems-lab/dsse/blob/master/protocol.md (test vector)
    assert pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )
    assert pae("t", "é".encode()) == b"DSSEv1 1 t 2 " + "é".encode()  # lengths are in bytes


def test_keygen_writes_private_0600_and_public_pem(tmp_path: Path) -> None:
    result = CliRunner().invoke(keygen, ["--out", str(tmp_path / "ci")])
    assert result.exit_code == 0, result.output
    key, pub = tmp_path / "ci.key", tmp_path / "ci.pub"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert key.read_text().startswith("-----BEGIN PRIVATE KEY-----")
    public = serialization.load_pem_public_key(pub.read_bytes())
    assert isinstance(public, Ed25519PublicKey)
    assert keyid(public) == keyid(load_private_key(key).public_key()) and keyid(public) in result.output
    again = CliRunner().invoke(keygen, ["--out", str(tmp_path / "ci")])
    assert again.exit_code == 2 and "already exists" in again.output
    assert CliRunner().invoke(keygen, ["--out", str(tmp_path / "ci"), "--force"]).exit_code == 0
    assert keyid(load_private_key(key).public_key()) != keyid(public)


def test_load_private_key_rejects_other_keys(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives.asymmetric import ec

    other = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    (tmp_path / "ec.key").write_bytes(other)
    with pytest.raises(InputError, match="not an Ed25519 key"):
        load_private_key(tmp_path / "ec.key")


# A valid attestation ----------------------------------------------------------------------------


def test_signed_run_verifies(tmp_path: Path, keys: dict[str, Path]) -> None:
    out = signed_run(tmp_path, keys["gate.key"])
    report = verify_envelope(out, [keys["gate.pub"]])
    assert report.valid, report.failures
    assert [s.keyid for s in report.signed_by] == [keyid(load_private_key(keys["gate.key"]).public_key())]
    assert sorted(report.matched) == sorted(SIGNED_FILES)
    for name in ("dossier.html", "dossier.md", "junit.xml"):
        assert "UNSIGNED" not in (out / name).read_text()
    result = CliRunner().invoke(verify, [str(out), "--run-key", str(keys["gate.pub"])])
    assert result.exit_code == 7, result.output  # authentic, but an ERROR is not deployable
    assert "verified:" in result.output and "verdict ERROR" in result.output and "NOT DEPLOYABLE" in result.output
    authentic = CliRunner().invoke(verify, [str(out), "--run-key", str(keys["gate.pub"]), "--any-verdict"])
    assert authentic.exit_code == 0, authentic.output


def test_statement_shape(tmp_path: Path, keys: dict[str, Path]) -> None:
    out = signed_run(tmp_path, keys["gate.key"])
    envelope = json.loads((out / ENVELOPE_NAME).read_text())
    assert envelope["payloadType"] == PAYLOAD_TYPE
    statement = json.loads(base64.b64decode(envelope["payload"]))
    assert statement["_type"] == STATEMENT_TYPE and statement["predicateType"] == PREDICATE_TYPE
    names = {s["name"]: s["digest"] for s in statement["subject"]}
    assert names["example/engine"] == {"gitCommit": "0123456789abcdef0123456789abcdef01234567"}
    assert set(SIGNED_FILES) <= set(names)
    predicate = statement["predicate"]
    assert predicate["verdict"] == "error" and predicate["intervention"] == "layout"
    assert predicate["claim"]["level"] == "tolerance"
    assert predicate["policies"] == [{"path": "policies/layout.yaml", "sha256": "22" * 32}]
    assert predicate["counts"] == {"pass": 1, "fail": 2, "error": 1, "waived": 1}
    assert predicate["checks"][2]["controls"]["wrong-start-pos"] == "detected"


def test_signature_checks_independently_of_gate_attest(tmp_path: Path, keys: dict[str, Path]) -> None:
    """Rebuild the PAE by hand from the spec and check the signature with `cryptography` alone."""
    out = signed_run(tmp_path, keys["gate.key"])
    envelope = json.loads((out / ENVELOPE_NAME).read_text())
    body = base64.b64decode(envelope["payload"])
    message = b"DSSEv1 %d %s %d %s" % (len(PAYLOAD_TYPE), PAYLOAD_TYPE.encode(), len(body), body)
    public = serialization.load_pem_public_key(keys["gate.pub"].read_bytes())
    assert isinstance(public, Ed25519PublicKey)
    public.verify(base64.b64decode(envelope["signatures"][0]["sig"]), message)  # raises if invalid


# Everything that must be rejected ---------------------------------------------------------------


@pytest.mark.parametrize("name", SIGNED_FILES)
def test_one_byte_tampering_of_any_signed_file_is_rejected(tmp_path: Path, keys: dict[str, Path], name: str) -> None:
    out = signed_run(tmp_path, keys["gate.key"])
    path = out / name
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    problems = failures(out, keys["gate.pub"])
    assert any(p.startswith(f"{name}: sha256") for p in problems), problems
    result = CliRunner().invoke(verify, [str(out), "--run-key", str(keys["gate.pub"])])
    assert result.exit_code == 1 and f"FAIL attestation: {name}: sha256" in result.output


def test_a_deleted_signed_file_is_rejected(tmp_path: Path, keys: dict[str, Path]) -> None:
    out = signed_run(tmp_path, keys["gate.key"])
    (out / "dossier.md").unlink()
    assert "dossier.md: signed file is missing" in failures(out, keys["gate.pub"])


def test_wrong_key_is_rejected(tmp_path: Path, keys: dict[str, Path]) -> None:
    out = signed_run(tmp_path, keys["gate.key"])
    report = verify_envelope(out, [keys["stranger.pub"]])
    assert not report.valid and report.other_signatures and not report.signed_by
    assert any("no valid signature by" in f for f in report.problems)
    result = CliRunner().invoke(verify, [str(out), "--run-key", str(keys["stranger.pub"])])
    assert result.exit_code == 1 and "not signed by a run signer" in result.output


def test_envelope_swapped_from_another_run_is_rejected(tmp_path: Path, keys: dict[str, Path]) -> None:
    first = signed_run(tmp_path / "a", keys["gate.key"], fx.failing_parity_run())
    second = signed_run(tmp_path / "b", keys["gate.key"], fx.passing_run())
    (first / ENVELOPE_NAME).write_bytes((second / ENVELOPE_NAME).read_bytes())
    report = verify_envelope(first, [keys["gate.pub"]])
    assert report.signed_by, "the swapped envelope is genuinely signed; its subjects must still fail"
    assert any(f.startswith("results.json: sha256") for f in report.problems)
    assert any(f.startswith("dossier.html: sha256") for f in report.problems)


def test_same_manifest_other_results_is_rejected(tmp_path: Path, keys: dict[str, Path]) -> None:
    """A genuine envelope whose manifest matches but whose results differ (e.g. a rerun)."""
    first = signed_run(tmp_path / "a", keys["gate.key"], fx.failing_parity_run())
    second = signed_run(tmp_path / "b", keys["gate.key"], fx.failing_parity_run())
    (first / "results.json").write_bytes((second / "results.json").read_bytes())  # identical: still valid
    assert verify_envelope(first, [keys["gate.pub"]]).valid
    rerun = fx.failing_parity_run().model_copy(update={"finished_at": "2025-01-02T03:05:07Z"})
    third = signed_run(tmp_path / "c", keys["gate.key"], rerun)
    (first / "results.json").write_bytes((third / "results.json").read_bytes())
    assert any(f.startswith("results.json: sha256") for f in failures(first, keys["gate.pub"]))


def test_truncated_signature_is_rejected(tmp_path: Path, keys: dict[str, Path]) -> None:
    out = signed_run(tmp_path, keys["gate.key"])
    path = out / ENVELOPE_NAME
    envelope = json.loads(path.read_text())
    raw = base64.b64decode(envelope["signatures"][0]["sig"])
    envelope["signatures"][0]["sig"] = base64.b64encode(raw[:-1]).decode()
    path.write_text(json.dumps(envelope))
    assert any("no valid signature by" in f for f in failures(out, keys["gate.pub"]))
    envelope["signatures"][0]["sig"] = envelope["signatures"][0]["sig"][:-6]  # not even valid base64
    path.write_text(json.dumps(envelope))
    assert any("no valid signature by" in f for f in failures(out, keys["gate.pub"]))


def test_edited_payload_is_rejected(tmp_path: Path, keys: dict[str, Path]) -> None:
    out = signed_run(tmp_path, keys["gate.key"])
    path = out / ENVELOPE_NAME
    envelope = json.loads(path.read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["verdict"] = "pass"
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    path.write_text(json.dumps(envelope))
    problems = failures(out, keys["gate.pub"])
    assert any("no valid signature" in f for f in problems)
    assert any("predicate verdict 'pass' differs" in f for f in problems)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("payloadType", "application/json", "payloadType is 'application/json'"),
        ("payload", "!!!", "payload is not valid base64"),
        ("signatures", [], "carries no signatures"),
    ],
)
def test_malformed_envelopes_are_rejected(
    tmp_path: Path, keys: dict[str, Path], field: str, value: object, message: str
) -> None:
    out = signed_run(tmp_path, keys["gate.key"])
    path = out / ENVELOPE_NAME
    envelope = json.loads(path.read_text())
    envelope[field] = value
    path.write_text(json.dumps(envelope))
    problems = failures(out, keys["gate.pub"])
    assert any(message in p for p in problems), problems


def test_statement_and_predicate_types_are_checked(tmp_path: Path, keys: dict[str, Path]) -> None:
    """A correctly signed envelope over the wrong kind of statement is still invalid."""
    out = signed_run(tmp_path, keys["gate.key"])
    path = out / ENVELOPE_NAME
    envelope = json.loads(path.read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["_type"], statement["predicateType"] = (
        "https://in-toto.io/Statement/v0.1",
        "https://slsa.dev/provenance/v1",
    )
    body = json.dumps(statement).encode()
    envelope["payload"] = base64.b64encode(body).decode()
    envelope["signatures"] = [
        {
            "keyid": "",
            "sig": base64.b64encode(load_private_key(keys["gate.key"]).sign(pae(PAYLOAD_TYPE, body))).decode(),
        }
    ]
    path.write_text(json.dumps(envelope))
    report = verify_envelope(out, [keys["gate.pub"]])
    assert report.signed_by and any("statement _type" in f for f in report.problems)
    assert any("predicateType" in f for f in report.problems)


def test_unsigned_run_does_not_verify(tmp_path: Path, keys: dict[str, Path]) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "m.yaml").write_text("name: a\n")
    result = fx.passing_run()
    (out / "results.json").write_text(result.model_dump_json())
    write_outputs(result, out, tmp_path / "m.yaml", None, environ={})
    cli = CliRunner().invoke(verify, [str(out), "--run-key", str(keys["gate.pub"])])
    assert cli.exit_code == 1 and "UNSIGNED" in cli.output


def test_verify_usage_errors_exit_2(tmp_path: Path, keys: dict[str, Path]) -> None:
    out = signed_run(tmp_path, keys["gate.key"])
    assert CliRunner().invoke(verify, [str(out)]).exit_code == 2  # no --key
    assert CliRunner().invoke(verify, [str(tmp_path / "nope"), "--run-key", str(keys["gate.pub"])]).exit_code == 2
    junk = tmp_path / "junk.pub"
    junk.write_text("junk")
    bad = CliRunner().invoke(verify, [str(out), "--run-key", str(junk)])
    assert bad.exit_code == 2 and "not a PEM public key" in bad.output


# More signatures --------------------------------------------------------------------------------


def test_a_reviewer_signature_can_be_appended(tmp_path: Path, keys: dict[str, Path]) -> None:
    out = signed_run(tmp_path, keys["gate.key"])
    path = out / ENVELOPE_NAME
    payload = json.loads(path.read_text())["payload"]
    reviewer = add_signature(path, keys["reviewer.key"])
    assert add_signature(path, keys["reviewer.key"]) == reviewer  # idempotent
    envelope = json.loads(path.read_text())
    assert envelope["payload"] == payload and len(envelope["signatures"]) == 2
    both = verify_envelope(out, {"gate": keys["gate.pub"], "reviewer": keys["reviewer.pub"]})
    assert both.valid and [s.label for s in both.signed_by] == ["gate", "reviewer"]
    only_gate = verify_envelope(out, [keys["gate.pub"]])
    assert only_gate.valid and only_gate.other_signatures == [reviewer]
    cli = CliRunner().invoke(
        verify,
        [str(out), "--run-key", str(keys["gate.pub"]), "--approver-key", str(keys["reviewer.pub"]), "--any-verdict"],
    )
    assert cli.exit_code == 0, cli.output


def test_a_key_counts_only_for_its_role(tmp_path: Path, keys: dict[str, Path]) -> None:
    out = signed_run(tmp_path, keys["gate.key"])
    as_approver = CliRunner().invoke(
        verify, [str(out), "--run-key", str(keys["reviewer.pub"]), "--approver-key", str(keys["gate.pub"])]
    )
    assert as_approver.exit_code == 1 and "not signed by a run signer" in as_approver.output
    as_run_signer = CliRunner().invoke(verify, [str(out), "--run-key", str(keys["gate.pub"]), "--any-verdict"])
    assert as_run_signer.exit_code == 0, as_run_signer.output
    report = verify_envelope(out, [keys["reviewer.pub"], keys["stranger.pub"]], require_all=False)
    assert not report.valid
