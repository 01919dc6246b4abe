"""Ed25519 keys: a pair is two PEM files (PKCS#8 private, mode 0600; SubjectPublicKeyInfo public).
A key id is the sha256 (hex) of the raw 32-byte public key; records carry public keys as base64.

Detached signatures (the ledger, waivers, approvals, revocations, baselines) sign
`DOMAIN || 0x00 || canonical_json(statement)`, so one made for one purpose can never be replayed as
another."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from gate._util.atomic import write_bytes_atomic
from gate._util.limited import KEY_BYTES, read_regular
from gate.errors import InputError


def raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def keyid(public_key: Ed25519PublicKey) -> str:
    return hashlib.sha256(raw_public(public_key)).hexdigest()


def public_key_b64(key: Ed25519PublicKey) -> str:
    return base64.b64encode(raw_public(key)).decode()


def public_key_from_b64(text: str) -> Ed25519PublicKey:
    return Ed25519PublicKey.from_public_bytes(base64.b64decode(text, validate=True))


def write_keypair(private: Path, public: Path, *, replace: bool = False) -> str | None:
    """Write a new pair; return its key id. Without `replace` the private key is only created, never
    overwritten (two processes making the same key cannot both win): None says it already existed."""
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    pub = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    try:
        write_bytes_atomic(private, pem, mode=0o600, exclusive=not replace)
    except FileExistsError:
        return None
    with contextlib.suppress(FileExistsError):  # a public key left beside no private key stays
        write_bytes_atomic(public, pub, mode=0o644, exclusive=not replace)
    return keyid(key.public_key())


def generate_keypair(prefix: Path, force: bool = False) -> tuple[Path, Path, str]:
    """`gate keygen`: PREFIX.key and PREFIX.pub, and the key id; an existing file needs `force`."""
    key_path, pub_path = Path(f"{prefix}.key"), Path(f"{prefix}.pub")
    for path in (key_path, pub_path):
        if path.exists() and not force:
            raise InputError(str(path), "already exists; pass --force to replace it")
    made = write_keypair(key_path, pub_path, replace=force)
    if made is None:  # made by another process since the check above
        raise InputError(str(key_path), "already exists; pass --force to replace it")
    return key_path, pub_path, made


def load_private_key(path: Path) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(read_regular(path, KEY_BYTES, "signing key"), password=None)
    except (ValueError, TypeError) as err:
        raise InputError(str(path), f"not an unencrypted PEM private key ({err})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise InputError(str(path), "signing key is not an Ed25519 key (make one with `gate keygen`)")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(read_regular(path, KEY_BYTES, "public key"))
    except (ValueError, TypeError) as err:
        raise InputError(str(path), f"not a PEM public key ({err})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise InputError(str(path), "public key is not an Ed25519 key")
    return key


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
