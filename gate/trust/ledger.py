"""The audit ledger: an append-only hash chain in SQLite, with a signed checkpoint after every append.

Entry `n` (1, 2, ...) stores its canonical JSON body and

    hash_n = sha256(ENTRY_TAG || n as 8 bytes big-endian || hash_{n-1} (32 bytes) || body)

with hash_0 = 32 zero bytes. The tag, the sequence number and the previous hash have fixed widths,
so the body is whatever follows and no two (n, prev, body) triples hash the same input. Editing,
deleting, reordering or inserting an entry breaks the chain at that entry.

Every append also signs a checkpoint (origin, size, head hash, time) with the ledger's Ed25519 key,
in the same transaction. Anyone holding an earlier checkpoint (exported with `gate audit checkpoint`,
or embedded in a dossier's `ledger.json` or `approval.json`) can check that the ledger still holds
that exact prefix: truncation, or a wholesale rewrite re-signed under a new key, is detected.

Concurrency: appends run in `BEGIN IMMEDIATE` transactions (one writer at a time, others wait up to
`BUSY_TIMEOUT_S`), in WAL mode with `synchronous=FULL`. The ledger sees bytes and digests, never
live objects. It needs a local filesystem (SQLite WAL does not work over NFS).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sqlite3
import struct
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from time import monotonic, sleep
from typing import TYPE_CHECKING, Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import BaseModel, ConfigDict

from gate._util.clock import now_utc
from gate.errors import EXIT_BAD_INPUT, GateError
from gate.trust.signing import (
    canonical_json,
    generate_key_files,
    keyid_of,
    load_private_key,
    public_key_b64,
    public_key_from_b64,
)

if TYPE_CHECKING:
    from gate.core.result import GateResult

LEDGER_VERSION = 1
ENTRY_TAG = b"gate-ledger/v1/entry\x00"
"""Domain separation: an entry hash can never be confused with any other sha256 gate computes."""
CHECKPOINT_HEADER = "gate-ledger/v1"
GENESIS = "00" * 32
BUSY_TIMEOUT_S = 60.0
DEFAULT_LEDGER = Path(".gate") / "ledger.sqlite"
ENV_LEDGER = "GATE_LEDGER"
ENV_LEDGER_KEY = "GATE_LEDGER_KEY"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS entries (
    seq INTEGER PRIMARY KEY, prev TEXT NOT NULL, hash TEXT NOT NULL, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS checkpoints (size INTEGER PRIMARY KEY, note TEXT NOT NULL, signature TEXT NOT NULL);
CREATE TRIGGER IF NOT EXISTS entries_append_only_u BEFORE UPDATE ON entries
    BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER IF NOT EXISTS entries_append_only_d BEFORE DELETE ON entries
    BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER IF NOT EXISTS checkpoints_append_only_u BEFORE UPDATE ON checkpoints
    BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER IF NOT EXISTS checkpoints_append_only_d BEFORE DELETE ON checkpoints
    BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
"""
# The triggers stop accidents through SQL; the hash chain and the signed checkpoints are what detect
# deliberate edits (anyone with the file can drop a trigger).


class LedgerError(GateError):
    """The ledger cannot be opened or written (missing file, wrong key): exit 2."""

    exit_code = EXIT_BAD_INPUT


# --- entry hashes and the ledger key ------------------------------------------------------------


def _use_wal(conn: sqlite3.Connection) -> None:
    """Put the database in WAL mode. Switching the journal mode takes an exclusive lock, and SQLite
    answers "database is locked" at once, without its busy handler, while another process is
    creating or switching the same file: retry that for up to BUSY_TIMEOUT_S."""
    deadline = monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as err:
            if "locked" not in str(err) or monotonic() > deadline:
                raise
            sleep(0.02)


def entry_hash(seq: int, prev: str, body: bytes) -> str:
    """sha256(ENTRY_TAG || seq (u64 big-endian) || prev (32 bytes) || body), hex."""
    return hashlib.sha256(ENTRY_TAG + struct.pack(">Q", seq) + bytes.fromhex(prev) + body).hexdigest()


def ensure_ledger_key(path: Path) -> Ed25519PrivateKey:
    """Load the ledger key at `path`, generating it (mode 0600, with a .pub beside it) on first use.

    Several processes may race here: exactly one file wins and everyone loads it.
    """
    if not path.exists():
        generate_key_files(path, path.with_suffix(".pub"))
    return load_private_key(path)


# --- where the ledger lives ---------------------------------------------------------------------


def resolve_ledger_path(explicit: Path | None, *, must_exist: bool = False) -> Path:
    """--ledger PATH, else $GATE_LEDGER, else ./.gate/ledger.sqlite (`must_exist`: refuse a missing file)."""
    if explicit is not None:
        path = explicit
    elif os.environ.get(ENV_LEDGER):
        path = Path(os.environ[ENV_LEDGER])
    else:
        path = DEFAULT_LEDGER
    if must_exist and not path.is_file():
        raise LedgerError(f"{path}: no ledger here (give --ledger PATH or set {ENV_LEDGER})")
    return path


def run_ledger_path(explicit: Path | None) -> Path | None:
    """The ledger `gate run` records to: --ledger, $GATE_LEDGER, or ./.gate/ledger.sqlite if it exists.

    `gate run` never creates the default ledger: with none of the three, it records nothing.
    """
    if explicit is not None or os.environ.get(ENV_LEDGER):
        return resolve_ledger_path(explicit)
    return DEFAULT_LEDGER if DEFAULT_LEDGER.is_file() else None


def default_key_path(ledger_path: Path) -> Path:
    """The checkpoint key used when neither --ledger-key nor $GATE_LEDGER_KEY is given."""
    return ledger_path.with_suffix(".key")


def resolve_key_path(ledger_path: Path, explicit: Path | None) -> Path:
    if explicit is not None:
        return explicit
    if os.environ.get(ENV_LEDGER_KEY):
        return Path(os.environ[ENV_LEDGER_KEY])
    return default_key_path(ledger_path)


# --- records --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One ledger entry as stored."""

    seq: int
    prev: str
    hash: str
    raw: str
    """The canonical JSON body exactly as stored (the bytes the hash covers)."""

    @property
    def body(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.raw)
        return value

    @property
    def kind(self) -> str:
        return str(self.body.get("kind", ""))

    @property
    def time(self) -> str:
        return str(self.body.get("time", ""))


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
        if keyid_of(key) != self.keyid:
            return "checkpoint keyid does not match its public key"
        try:
            key.verify(base64.b64decode(self.signature), self.note())
        except (InvalidSignature, ValueError, TypeError):
            return f"checkpoint for size {self.size}: signature does not verify"
        return None


def note_bytes(origin: str, size: int, head: str, time: str) -> bytes:
    return f"{CHECKPOINT_HEADER} {origin}\n{size}\n{head}\n{time}\n".encode()


def _parse_note(note: str) -> tuple[str, int, str, str]:
    lines = note.split("\n")
    if len(lines) != 5 or lines[4] != "" or not lines[0].startswith(CHECKPOINT_HEADER + " "):
        raise ValueError("malformed checkpoint note")
    return lines[0][len(CHECKPOINT_HEADER) + 1 :], int(lines[1]), lines[2], lines[3]


# --- the ledger -----------------------------------------------------------------------------------


class Ledger:
    """An open ledger file. Use `Ledger.open(...)` as a context manager."""

    def __init__(self, path: Path, conn: sqlite3.Connection, key: Ed25519PrivateKey | None) -> None:
        self.path = path
        self._conn = conn
        self._key = key

    @classmethod
    def open(cls, path: Path, *, key_path: Path | None = None, create: bool = True, writable: bool = True) -> Ledger:
        """Open (and on first use create) the ledger at `path`.

        `writable` loads the checkpoint key (`key_path`, $GATE_LEDGER_KEY, or `<ledger>.key`
        generated on first use). A read-only open needs no key.
        """
        if (not create or not writable) and not path.is_file():
            raise LedgerError(f"{path}: no ledger here (give --ledger PATH or set {ENV_LEDGER})")
        path.parent.mkdir(parents=True, exist_ok=True)
        key = None
        if writable:
            explicit = key_path is not None or bool(os.environ.get(ENV_LEDGER_KEY))
            resolved = resolve_key_path(path, key_path)
            if not explicit:
                key = ensure_ledger_key(resolved)
            elif not resolved.is_file():
                raise LedgerError(f"{resolved}: ledger key not found")
            else:
                key = load_private_key(resolved)
        # A read-only open cannot write even by accident (the audit commands only read).
        target = str(path) if writable else path.resolve().as_uri() + "?mode=ro"
        conn = sqlite3.connect(target, timeout=BUSY_TIMEOUT_S, isolation_level=None, uri=not writable)
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        ledger = cls(path, conn, key)
        if writable:
            ledger._initialise()
        return ledger

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._conn.close()

    def _initialise(self) -> None:
        """Create the tables and fix the ledger's origin and public key (idempotent, race-safe)."""
        assert self._key is not None
        conn = self._conn
        _use_wal(conn)
        conn.execute("PRAGMA synchronous = FULL")
        conn.executescript(_SCHEMA)
        pub = public_key_b64(self._key.public_key())
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("INSERT OR IGNORE INTO meta VALUES ('version', ?)", (str(LEDGER_VERSION),))
            conn.execute("INSERT OR IGNORE INTO meta VALUES ('origin', ?)", (str(uuid.uuid4()),))
            conn.execute("INSERT OR IGNORE INTO meta VALUES ('public_key', ?)", (pub,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        if self.public_key_b64 != pub:
            raise LedgerError(
                f"{self.path}: its checkpoints are signed by key {self.keyid[:16]}, "
                f"not by the ledger key given ({keyid_of(self._key.public_key())[:16]})"
            )

    # -- metadata

    def _meta(self, key: str) -> str:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        if row is None:
            raise LedgerError(f"{self.path}: not a gate ledger (no {key} recorded)")
        return str(row[0])

    @property
    def origin(self) -> str:
        return self._meta("origin")

    @property
    def public_key_b64(self) -> str:
        return self._meta("public_key")

    @property
    def keyid(self) -> str:
        return keyid_of(public_key_from_b64(self.public_key_b64))

    # -- writing

    def append(self, kind: str, payload: dict[str, Any]) -> tuple[Entry, Checkpoint]:
        """Append one entry and sign a checkpoint over the new head, atomically."""
        if self._key is None:
            raise LedgerError(f"{self.path}: opened read-only")
        if "kind" in payload or "time" in payload:
            raise ValueError("payload keys 'kind' and 'time' are set by the ledger")
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute("SELECT seq, hash FROM entries ORDER BY seq DESC LIMIT 1").fetchone()
            seq, prev = (row[0] + 1, row[1]) if row else (1, GENESIS)
            time = now_utc()
            raw = canonical_json({"kind": kind, "time": time, **payload})
            digest = entry_hash(seq, prev, raw)
            conn.execute(
                "INSERT INTO entries (seq, prev, hash, body) VALUES (?, ?, ?, ?)",
                (seq, prev, digest, raw.decode("utf-8")),
            )
            checkpoint = self._sign(seq, digest, time)
            conn.execute(
                "INSERT INTO checkpoints (size, note, signature) VALUES (?, ?, ?)",
                (seq, checkpoint.note().decode(), checkpoint.signature),
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return Entry(seq, prev, digest, raw.decode("utf-8")), checkpoint

    def _sign(self, size: int, head: str, time: str) -> Checkpoint:
        assert self._key is not None
        origin = self.origin
        signature = self._key.sign(note_bytes(origin, size, head, time))
        return Checkpoint(
            origin=origin,
            size=size,
            head=head,
            time=time,
            keyid=self.keyid,
            public_key=self.public_key_b64,
            signature=base64.b64encode(signature).decode(),
        )

    # -- reading

    def entries(self, kind: str | None = None) -> Iterator[Entry]:
        """Entries in sequence order (unverified: call `verify_chain` to trust them)."""
        for seq, prev, digest, raw in self._conn.execute("SELECT seq, prev, hash, body FROM entries ORDER BY seq"):
            entry = Entry(int(seq), str(prev), str(digest), str(raw))
            if kind is None or entry.kind == kind:
                yield entry

    def get(self, seq: int) -> Entry | None:
        row = self._conn.execute("SELECT seq, prev, hash, body FROM entries WHERE seq = ?", (seq,)).fetchone()
        return Entry(int(row[0]), str(row[1]), str(row[2]), str(row[3])) if row else None

    def size(self) -> int:
        row = self._conn.execute("SELECT COUNT(*) FROM entries").fetchone()
        return int(row[0])

    def checkpoints(self) -> list[Checkpoint]:
        """Every stored checkpoint, oldest first (each re-assembled with the ledger's public key)."""
        out = []
        pub, keyid = self.public_key_b64, self.keyid
        for note, signature in self._conn.execute("SELECT note, signature FROM checkpoints ORDER BY size"):
            origin, size, head, time = _parse_note(str(note))
            out.append(
                Checkpoint(
                    origin=origin,
                    size=size,
                    head=head,
                    time=time,
                    keyid=keyid,
                    public_key=pub,
                    signature=str(signature),
                )
            )
        return out

    def checkpoint(self, size: int | None = None) -> Checkpoint | None:
        """The checkpoint at `size`, or the latest."""
        found = self.checkpoints()
        if size is None:
            return found[-1] if found else None
        return next((c for c in found if c.size == size), None)


# --- recording a run ------------------------------------------------------------------------------

RUN_KIND = "run"
RECEIPT = "ledger.json"
"""Written into a dossier directory after its run is recorded: the entry and a signed checkpoint."""


def receipt(ledger: Ledger, entry: Entry, checkpoint: Checkpoint) -> dict[str, Any]:
    """Proof of inclusion to keep outside the ledger: the entry's number and hash, and the signed
    checkpoint whose head is that hash (`gate audit verify --checkpoint FILE` checks it later)."""
    return {
        "ledger": str(ledger.path.resolve()),
        "origin": ledger.origin,
        "entry": {"seq": entry.seq, "hash": entry.hash, "kind": entry.kind},
        "checkpoint": checkpoint.model_dump(),
    }


def write_receipt(out_dir: Path, ledger: Ledger, entry: Entry, checkpoint: Checkpoint, name: str = RECEIPT) -> Path:
    """Write the receipt of `entry` into the dossier directory (atomically)."""
    from gate._util.atomic import write_bytes_atomic

    return write_bytes_atomic(
        out_dir / name, (json.dumps(receipt(ledger, entry, checkpoint), indent=2) + "\n").encode()
    )


def record_run(
    result: GateResult, out_dir: Path, ledger_path: Path, *, sign_key: Path | None = None, key_path: Path | None = None
) -> tuple[Entry, Path]:
    """Append a run's verdict to the ledger and write the receipt `ledger.json` into its dossier.

    `result` is the run's GateResult; call this after every output (and the attestation) is
    written, so their digests are the final ones.
    """
    from gate.trust.run_record import run_payload

    payload = run_payload(result, out_dir, sign_key)
    with Ledger.open(ledger_path, key_path=key_path) as ledger:
        entry, checkpoint = ledger.append(RUN_KIND, payload)
        return entry, write_receipt(out_dir, ledger, entry, checkpoint)
