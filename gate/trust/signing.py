"""Canonical JSON and detached signatures for the ledger, waivers, approvals and revocations.

Keys and key ids come from gate.trust.keys. A detached signature signs
`DOMAIN || 0x00 || canonical_json(statement)`, so a signature made for one purpose (a waiver) can
never be replayed as another (a checkpoint, an approval).
"""

from __future__ import annotations

import base64
import json
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from gate.trust.keys import keyid, public_key_b64, public_key_from_b64


def canonical_json(obj: Any) -> bytes:
    """Sorted keys, no whitespace, UTF-8, no NaN/Infinity: the bytes hashes and signatures cover."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def _signed_bytes(domain: str, statement: Any) -> bytes:
    return domain.encode() + b"\x00" + canonical_json(statement)


def sign_statement(key: Ed25519PrivateKey, domain: str, statement: Any) -> dict[str, str]:
    pub = key.public_key()
    sig = key.sign(_signed_bytes(domain, statement))
    return {"keyid": keyid(pub), "public_key": public_key_b64(pub), "sig": base64.b64encode(sig).decode()}


def verify_statement(
    signature: dict[str, str], domain: str, statement: Any, trusted_keyids: list[str] | None = None
) -> str | None:
    try:
        pub = public_key_from_b64(signature["public_key"])
        if keyid(pub) != signature["keyid"]:
            return "the signature's keyid does not match its public key"
        if trusted_keyids is not None and signature["keyid"] not in trusted_keyids:
            return f"signed by key {signature['keyid'][:16]}, which is not trusted"
        pub.verify(base64.b64decode(signature["sig"], validate=True), _signed_bytes(domain, statement))
    except (KeyError, ValueError, TypeError):
        return "the signature is malformed"
    except InvalidSignature:
        return "the signature does not verify"
    return None
