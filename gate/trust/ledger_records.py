"""What a ledger (gate.trust.ledger) stores and pins: its entries, the signed checkpoints (C2SP-style
signed notes), the receipts kept outside it, and the pin file holding its latest checkpoint."""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from pydantic import BaseModel, ConfigDict

from gate._util.atomic import write_bytes_atomic
from gate._util.limited import read_regular
from gate.errors import InputError
from gate.trust.keys import keyid, public_key_from_b64
from gate.trust.ledger_store import LedgerError, is_url

CHECKPOINT_HEADER = "gate-ledger/v1"
ENTRY_TAG = b"gate-ledger/v1/entry\x00"
"""Domain separation: an entry hash can never be confused with any other sha256 gate computes."""
PIN_SUFFIX = ".pin"
ENV_LEDGER_PIN = "GATE_LEDGER_PIN"
ENV_LEDGER_ORIGIN = "GATE_LEDGER_ORIGIN"


@dataclass(frozen=True)
class Entry:
    """One ledger entry as stored."""

    seq: int
    prev: str
    hash: str
    raw: str
    """The canonical JSON body exactly as stored (the bytes the hash covers)."""
    ledger: str = field(default="", compare=False)

    @property
    def body(self) -> dict[str, Any]:
        try:
            value = json.loads(self.raw)
        except ValueError:
            raise LedgerError(f"{self.ledger or 'ledger'}: entry {self.seq}: its body is not JSON (corrupt)") from None
        if not isinstance(value, dict):
            raise LedgerError(f"{self.ledger or 'ledger'}: entry {self.seq}: its body is not a JSON object (corrupt)")
        return value

    @property
    def kind(self) -> str:
        return str(self.body.get("kind", ""))

    @property
    def time(self) -> str:
        return str(self.body.get("time", ""))

    @property
    def dossier(self) -> dict[str, Any]:
        return self.body.get("dossier") or {}


class Checkpoint(BaseModel):
    """A signed statement that the ledger `origin` held `size` entries ending in `head`.

    The signed bytes are the note: "gate-ledger/v1 ORIGIN\\nSIZE\\nHEAD\\nTIME\\n" (after C2SP
    signed notes), signed with Ed25519 by the ledger key.
    """

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    origin: str
    """The ledger's random id, fixed at creation."""
    size: int
    """Number of entries the checkpoint covers."""
    head: str
    """Hash of entry `size` (hex), or 64 zeros for an empty ledger."""
    time: str
    """UTC ISO-8601 time of signing."""
    keyid: str
    """sha256 of the raw public key (hex)."""
    public_key: str
    """The raw Ed25519 public key, base64."""
    signature: str
    """Ed25519 signature over `note()`, base64."""

    def note(self) -> bytes:
        return note_bytes(self.origin, self.size, self.head, self.time)

    def verify_signature(self) -> str | None:
        """None when the signature is valid under the embedded key and keyid; else why not."""
        try:
            key = public_key_from_b64(self.public_key)
        except (ValueError, TypeError):
            return "checkpoint public key is malformed"
        if keyid(key) != self.keyid:
            return "checkpoint keyid does not match its public key"
        try:
            key.verify(base64.b64decode(self.signature), self.note())
        except (InvalidSignature, ValueError, TypeError):
            return f"checkpoint for size {self.size}: signature does not verify"
        return None


def note_bytes(origin: str, size: int, head: str, time: str) -> bytes:
    return f"{CHECKPOINT_HEADER} {origin}\n{size}\n{head}\n{time}\n".encode()


def parse_note(note: str) -> tuple[str, int, str, str]:
    lines = note.split("\n")
    if len(lines) != 5 or lines[4] != "" or not lines[0].startswith(CHECKPOINT_HEADER + " "):
        raise ValueError("malformed checkpoint note")
    return lines[0][len(CHECKPOINT_HEADER) + 1 :], int(lines[1]), lines[2], lines[3]


def pin_path(ledger_path: Path) -> Path | None:
    if is_url(ledger_path):
        explicit = os.environ.get(ENV_LEDGER_PIN)
        return Path(explicit) if explicit else None
    return Path(f"{ledger_path}{PIN_SUFFIX}")


def pinned_origin(ledger_path: Path) -> str | None:
    return (os.environ.get(ENV_LEDGER_ORIGIN) or None) if is_url(ledger_path) else None


def read_pin(ledger_path: Path) -> Checkpoint | None:
    if (path := pin_path(ledger_path)) is None:
        return None
    if not path.exists() and not path.is_symlink():
        return None
    try:
        return Checkpoint.model_validate_json(read_regular(path, 1024 * 1024, "ledger pin"))
    except (InputError, ValueError) as err:
        raise LedgerError(
            f"{path}: unreadable ledger pin ({err.__class__.__name__}); restore it or move it away"
        ) from None


def advance_pin(ledger_path: Path, checkpoint: Checkpoint) -> None:
    """Write `checkpoint` as the pin unless it already covers more (appends race; the pin only grows)."""
    if (path := pin_path(ledger_path)) is None:
        return
    with open(f"{path}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        current = read_pin(ledger_path)
        if current is None or current.origin != checkpoint.origin or current.size < checkpoint.size:
            write_bytes_atomic(path, (checkpoint.model_dump_json(indent=2) + "\n").encode())


def entry_hash(seq: int, prev: str, body: bytes) -> str:
    """sha256(ENTRY_TAG || seq (u64 big-endian) || prev (32 bytes) || body), hex."""
    return hashlib.sha256(ENTRY_TAG + struct.pack(">Q", seq) + bytes.fromhex(prev) + body).hexdigest()


RECEIPT = "ledger.json"


class ReceiptEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seq: int
    hash: str
    kind: str


class Receipt(BaseModel):
    """Proof of inclusion kept outside the ledger (DIR/ledger.json, an approval record's `ledger`)."""

    model_config = ConfigDict(extra="forbid")

    ledger: str
    """Where the ledger is (a resolved path, or its URL)."""
    origin: str
    entry: ReceiptEntry
    checkpoint: Checkpoint
    """A signed checkpoint whose head is the entry's hash."""

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json")
