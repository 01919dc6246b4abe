"""A gate run's envelope verifies with an independent DSSE implementation (securesystemslib)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gate.trust.attest import ENVELOPE_NAME
from gate.trust.keys import keyid, load_public_key, raw_public
from gate.trust.statement import PAYLOAD_TYPE, STATEMENT_TYPE
from tests.trust.runs import quant_manifest, signed_run
from tests.trust.trusted import make_keys

dsse = pytest.importorskip("securesystemslib.dsse", reason="securesystemslib (dev extra) is not installed")
signer = pytest.importorskip("securesystemslib.signer")
exceptions = pytest.importorskip("securesystemslib.exceptions")


def test_securesystemslib_verifies_a_gate_envelope_and_rejects_an_edited_one(tmp_path: Path) -> None:
    keys = make_keys(tmp_path / "keys", ("ci", "mallory"))
    out, _ = signed_run(tmp_path / "out", quant_manifest(tmp_path / "m.yaml", "ab12cd34" * 5), keys["ci.key"])

    def key(name: str) -> object:
        pub = load_public_key(keys[f"{name}.pub"])
        return signer.SSlibKey(keyid(pub), "ed25519", "ed25519", {"public": raw_public(pub).hex()})

    envelope = dsse.Envelope.from_dict(json.loads((out / ENVELOPE_NAME).read_text()))
    assert envelope.payload_type == PAYLOAD_TYPE
    accepted = envelope.verify([key("ci")], 1)
    assert list(accepted) == [keyid(load_public_key(keys["ci.pub"]))]
    assert json.loads(envelope.pae().split(b" ", 4)[4])["_type"] == STATEMENT_TYPE
    with pytest.raises(exceptions.VerificationError):
        envelope.verify([key("mallory")], 1)
    edited = envelope.payload.replace(b'"verdict":"awaiting-approval"', b'"verdict":"pass"')
    assert edited != envelope.payload
    envelope.payload = edited
    with pytest.raises(exceptions.VerificationError):
        envelope.verify([key("ci")], 1)
