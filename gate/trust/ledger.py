"""The audit ledger: an append-only hash chain, with a signed checkpoint after every append.

Entry `n` stores its canonical JSON body and hash_n = sha256(ENTRY_TAG || n (u64 big-endian) ||
hash_{n-1} || body), hash_0 = 32 zero bytes: editing, deleting, reordering or inserting an entry
breaks the chain there. Every append also signs a checkpoint (origin, size, head, time) with the
ledger's Ed25519 key in the same transaction; anyone holding an earlier one can check the ledger
still holds that prefix. Storage is gate.trust.ledger_store.

The origin is pinned (`<ledger>.pin` beside an SQLite file; `$GATE_LEDGER_PIN` and/or
`$GATE_LEDGER_ORIGIN` for PostgreSQL): a ledger that is gone, empty, another, shorter than the pin
or with another head is refused with one line naming what was lost, never silently started anew
(docs/reliability.md, "What each pin catches").
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from gate._util.atomic import write_bytes_atomic
from gate._util.clock import now_utc
from gate.trust.keys import canonical_json, keyid, load_private_key, public_key_b64, public_key_from_b64
from gate.trust.ledger_paths import ENV_LEDGER, ENV_LEDGER_KEY, resolve_key_path
from gate.trust.ledger_paths import ensure_ledger_key as ensure_ledger_key
from gate.trust.ledger_paths import run_ledger_choice as run_ledger_choice
from gate.trust.ledger_records import (
    ENV_LEDGER_ORIGIN,
    PIN_SUFFIX,
    ReceiptEntry,
    advance_pin,
    note_bytes,
    parse_note,
    pin_path,
    pinned_origin,
)
from gate.trust.ledger_records import RECEIPT as RECEIPT
from gate.trust.ledger_records import Checkpoint as Checkpoint
from gate.trust.ledger_records import Entry as Entry
from gate.trust.ledger_records import Receipt as Receipt
from gate.trust.ledger_records import entry_hash as entry_hash
from gate.trust.ledger_records import read_pin as read_pin
from gate.trust.ledger_store import LedgerError as LedgerError
from gate.trust.ledger_store import LedgerStore, LedgerURL, PostgresStore, SqliteStore, is_url

LEDGER_VERSION = 1
GENESIS = "00" * 32


class Ledger:
    """An open ledger (SQLite file or PostgreSQL database). Use `Ledger.open(...)` as a context manager."""

    def __init__(self, path: Path, store: LedgerStore, key: Ed25519PrivateKey | None) -> None:
        self.path = path
        self.location = store.location
        self._store = store
        self._key = key

    @classmethod
    def open(cls, path: Path, *, key_path: Path | None = None, create: bool = True, writable: bool = True) -> Ledger:
        """Open (and on first use create) the ledger at `path` (a file, or `postgresql://...`); `writable`
        loads the checkpoint key (`key_path`, $GATE_LEDGER_KEY, or `<ledger>.key` made on first use)."""
        if not is_url(path):
            if (pinned := read_pin(path)) is not None and (not path.is_file() or path.stat().st_size == 0):
                raise LedgerError(
                    f"{path}: the ledger is missing or empty, but {path.name}{PIN_SUFFIX} pins ledger {pinned.origin} "
                    f"at {pinned.size} entries: refusing to start a new one (restore the file, or move the pin "
                    "away to start a new ledger on purpose)"
                )
            if (not create or not writable) and not path.is_file():
                raise LedgerError(f"{path}: no ledger here (give --ledger PATH or set {ENV_LEDGER})")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise LedgerError(f"{path}: cannot create its directory: {err.strerror or err}") from None
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
        store: LedgerStore = (
            PostgresStore(path.url, writable=writable)
            if isinstance(path, LedgerURL)
            else SqliteStore(path, writable=writable)
        )
        ledger = cls(path, store, key)
        try:
            if is_url(path):
                ledger._check_database_pin()
            if writable:
                ledger._initialise()
            ledger.origin  # noqa: B018  (a file or database that is not a gate ledger says so now)
            ledger._check_pin(writable)
        except BaseException:
            store.close()
            raise
        return ledger

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._store.close()

    def _initialise(self) -> None:
        assert self._key is not None
        pub = public_key_b64(self._key.public_key())
        self._store.initialise({"version": str(LEDGER_VERSION), "origin": str(uuid.uuid4()), "public_key": pub})
        if self.public_key_b64 != pub:
            raise LedgerError(
                f"{self.location}: its checkpoints are signed by key {self.keyid[:16]}, "
                f"not by the ledger key given ({keyid(self._key.public_key())[:16]})"
            )

    def _check_database_pin(self) -> None:
        """Before a database ledger is used (or created): where a pin or an origin is kept, the database
        must hold that ledger, never none (emptied, dropped, a mistyped URL) nor another."""
        pinned = read_pin(self.path)
        wanted = pinned_origin(self.path)
        said = f"{ENV_LEDGER_ORIGIN} pins ledger {wanted}" if wanted else None
        if pinned is not None:
            said = f"{pin_path(self.path)} pins ledger {pinned.origin} at {pinned.size} entries"
            if wanted and wanted != pinned.origin:
                raise LedgerError(f"{self.location}: {ENV_LEDGER_ORIGIN} is {wanted}, but {said}")
        if said is None:
            return
        try:
            origin = self._store.meta("origin")
        except LedgerError:
            origin = None
        if origin is None:
            raise LedgerError(
                f"{self.location}: the database holds no gate ledger, but {said}: refusing to start a new one "
                "(a mistyped URL, or the ledger emptied or dropped: restore it, or unset the pin to start anew)"
            )
        if origin != (pinned.origin if pinned is not None else wanted):
            raise LedgerError(f"{self.location}: this is ledger {origin}, but {said}: another ledger")
        if pinned is None and self._store.size() == 0:
            # an origin is pinned from a ledger's checkpoints (`gate audit checkpoint`), so this one
            # held entries: they and their checkpoints were deleted, and gate_meta alone survived
            raise LedgerError(
                f"{self.location}: ledger {origin} holds no entries, but {said}: its entries were deleted "
                "(an origin is only known from a ledger that held some); refusing to start it again from entry 1"
            )

    def pinned(self) -> Checkpoint | None:
        return read_pin(self.path)

    def _check_pin(self, writable: bool) -> None:
        """Before writing, compare the ledger with its pin: same origin, at least the acknowledged
        entries, same head. (A read-only open lets `verify_chain` report the same as problems.)"""
        if not writable or pin_path(self.path) is None:
            return
        pinned = read_pin(self.path)
        where = str(pin_path(self.path)) if is_url(self.path) else f"{self.path.name}{PIN_SUFFIX}"
        if pinned is None:  # a new ledger, or one from before pins: pin what it holds now
            advance_pin(self.path, self.checkpoint() or self._sign(0, GENESIS, now_utc()))
            return
        if pinned.origin != self.origin:
            raise LedgerError(
                f"{self.location}: this is ledger {self.origin}, but {where} pins ledger {pinned.origin}: "
                "the file was replaced (or a foreign WAL replayed into it)"
            )
        size = self.size()
        if size < pinned.size:
            raise LedgerError(
                f"{self.location}: holds {size} entries, but {where} acknowledged {pinned.size} "
                f"(signed {pinned.time}): {pinned.size - size} acknowledged entries were lost "
                "(its WAL lost, or the file restored from an older copy)"
            )
        if pinned.size:
            entry = self.get(pinned.size)
            if entry is None or entry.hash != pinned.head:
                raise LedgerError(
                    f"{self.location}: entry {pinned.size} is not the one {where} acknowledged: history was rewritten"
                )

    def _meta(self, key: str) -> str:
        if (value := self._store.meta(key)) is None:
            raise LedgerError(f"{self.location}: not a gate ledger (no {key} recorded)")
        return value

    @property
    def origin(self) -> str:
        return self._meta("origin")

    @property
    def public_key_b64(self) -> str:
        return self._meta("public_key")

    @property
    def keyid(self) -> str:
        try:
            return keyid(public_key_from_b64(self.public_key_b64))
        except (ValueError, TypeError):
            raise LedgerError(f"{self.location}: its recorded public key is malformed (corrupt ledger)") from None

    def append(self, kind: str, payload: dict[str, Any]) -> tuple[Entry, Checkpoint]:
        """Append one entry and sign a checkpoint over the new head, atomically; durable on return."""
        if self._key is None:
            raise LedgerError(f"{self.location}: opened read-only")
        if "kind" in payload or "time" in payload:
            raise ValueError("payload keys 'kind' and 'time' are set by the ledger")
        made: list[tuple[Entry, Checkpoint]] = []

        def build(last: int, last_hash: str | None) -> tuple[tuple[int, str, str, str], tuple[int, str, str]]:
            seq, prev = last + 1, last_hash or GENESIS
            time = now_utc()
            raw = canonical_json({"kind": kind, "time": time, **payload})
            digest = entry_hash(seq, prev, raw)
            checkpoint = self._sign(seq, digest, time)
            made[:] = [(Entry(seq, prev, digest, raw.decode("utf-8")), checkpoint)]
            return (seq, prev, digest, raw.decode("utf-8")), (seq, checkpoint.note().decode(), checkpoint.signature)

        self._store.append(build)
        entry, checkpoint = made[0]
        advance_pin(self.path, checkpoint)  # beside the file, or $GATE_LEDGER_PIN for a database
        return entry, checkpoint

    def _sign(self, size: int, head: str, time: str) -> Checkpoint:
        assert self._key is not None
        origin = self.origin
        signature = self._key.sign(note_bytes(origin, size, head, time))
        signed = self._under_key()
        return signed(origin=origin, size=size, head=head, time=time, signature=base64.b64encode(signature).decode())

    def _under_key(self) -> partial[Checkpoint]:
        return partial(Checkpoint, keyid=self.keyid, public_key=self.public_key_b64)

    def entries(self, kind: str | None = None) -> Iterator[Entry]:
        """Entries in sequence order (unverified: see `verify_chain`)."""
        for row in self._store.entries():
            entry = Entry(*row, ledger=self.location)
            if kind is None or entry.kind == kind:
                yield entry

    def get(self, seq: int) -> Entry | None:
        row = self._store.get(seq)
        return Entry(*row, ledger=self.location) if row else None

    def size(self) -> int:
        return self._store.size()

    def checkpoints(self) -> list[Checkpoint]:
        out = []
        signed = self._under_key()
        for note, signature in self._store.checkpoints():
            try:
                origin, size, head, time = parse_note(note)
            except ValueError:
                raise LedgerError(f"{self.location}: a stored checkpoint is malformed (corrupt ledger)") from None
            out.append(signed(origin=origin, size=size, head=head, time=time, signature=signature))
        return out

    def checkpoint(self, size: int | None = None) -> Checkpoint | None:
        found = self.checkpoints()
        if size is None:
            return found[-1] if found else None
        return next((c for c in found if c.size == size), None)


RUN_KIND = "run"


def receipt(ledger: Ledger, entry: Entry, checkpoint: Checkpoint) -> Receipt:
    """Proof of inclusion to keep outside the ledger (`gate audit verify --checkpoint FILE`)."""
    return Receipt(
        ledger=ledger.location if is_url(ledger.path) else str(ledger.path.resolve()),
        origin=ledger.origin,
        entry=ReceiptEntry(seq=entry.seq, hash=entry.hash, kind=entry.kind),
        checkpoint=checkpoint,
    )


def write_receipt(out_dir: Path, ledger: Ledger, entry: Entry, checkpoint: Checkpoint, name: str = RECEIPT) -> Path:
    return write_bytes_atomic(
        out_dir / name, (json.dumps(receipt(ledger, entry, checkpoint).dump(), indent=2) + "\n").encode()
    )
