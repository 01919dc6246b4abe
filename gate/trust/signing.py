"""Canonical JSON, Ed25519 key files and detached signatures for the ledger, waivers and approvals.

Keys are the PEM files `gate keygen` writes (gate.trust.attest: PKCS#8 private keys, mode 0600, and
SubjectPublicKeyInfo public keys); a key id is the sha256 of the raw 32-byte public key, in hex.
A detached signature signs `DOMAIN || 0x00 || canonical_json(statement)`, so a signature made for
one purpose (a waiver) can never be replayed as another (a checkpoint, an approval).
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from gate.trust.attest import keyid as keyid_of
from gate.trust.attest import load_private_key, load_public_key, sha256_file


def canonical_json(obj: Any) -> bytes:
    """Sorted keys, no whitespace, UTF-8, no NaN/Infinity: the bytes hashes and signatures cover."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def public_key_b64(key: Ed25519PublicKey) -> str:
    return base64.b64encode(raw_public(key)).decode()


def public_key_from_b64(text: str) -> Ed25519PublicKey:
    return Ed25519PublicKey.from_public_bytes(base64.b64decode(text, validate=True))


def write_new_file(path: Path, data: bytes, mode: int) -> bool:
    """Create `path` with `data` atomically, only if absent (tmp file + link). True if we created it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        return True
    finally:
        Path(tmp).unlink(missing_ok=True)


def generate_key_files(private: Path, public: Path) -> bool:
    """Write a new Ed25519 key pair, unless `private` exists (race-safe). True if this call created it."""
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    if not write_new_file(private, pem, 0o600):
        return False
    pub = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    write_new_file(public, pub, 0o644)
    return True


def _signed_bytes(domain: str, statement: Any) -> bytes:
    return domain.encode() + b"\x00" + canonical_json(statement)


def sign_statement(key: Ed25519PrivateKey, domain: str, statement: Any) -> dict[str, str]:
    """A detached signature {keyid, public_key, sig} over DOMAIN || 0x00 || canonical_json(statement)."""
    pub = key.public_key()
    sig = key.sign(_signed_bytes(domain, statement))
    return {"keyid": keyid_of(pub), "public_key": public_key_b64(pub), "sig": base64.b64encode(sig).decode()}


def verify_statement(
    signature: dict[str, str], domain: str, statement: Any, trusted_keyids: list[str] | None = None
) -> str | None:
    """None when `signature` verifies over the statement (and its key is trusted, if a list is given)."""
    try:
        pub = public_key_from_b64(signature["public_key"])
        if keyid_of(pub) != signature["keyid"]:
            return "the signature's keyid does not match its public key"
        if trusted_keyids is not None and signature["keyid"] not in trusted_keyids:
            return f"signed by key {signature['keyid'][:16]}, which is not trusted"
        pub.verify(base64.b64decode(signature["sig"], validate=True), _signed_bytes(domain, statement))
    except (KeyError, ValueError, TypeError):
        return "the signature is malformed"
    except InvalidSignature:
        return "the signature does not verify"
    return None


__all__ = [
    "canonical_json",
    "generate_key_files",
    "keyid_of",
    "load_private_key",
    "load_public_key",
    "public_key_b64",
    "public_key_from_b64",
    "sha256_file",
    "sign_statement",
    "verify_statement",
]
