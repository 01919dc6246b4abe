"""The ledger: hash chain, signed checkpoints, tamper detection, concurrent writers."""

from __future__ import annotations

import hashlib
import multiprocessing
import sqlite3
import struct
from pathlib import Path

import pytest

from gate.trust.keys import canonical_json
from gate.trust.ledger import (
    GENESIS,
    Checkpoint,
    Ledger,
    LedgerError,
    entry_hash,
)
from gate.trust.ledger_verify import verify_chain


def _ledger(tmp_path: Path, n: int = 5) -> Path:
    path = tmp_path / "ledger.sqlite"
    with Ledger.open(path) as ledger:
        for i in range(n):
            ledger.append("test", {"i": i, "text": f"entry {i} – ünïcode"})
    return path


def test_the_default_checkpoint_key_is_the_ledgers_name_with_key_as_the_help_says(tmp_path: Path) -> None:
    """docs/audit.md and --ledger-key's help said `ledger.key` in the ledger's directory; a ledger
    named audit.sqlite makes audit.key and audit.pub (what `gate audit verify --ledger-pub` pins)."""
    from click.testing import CliRunner

    from gate.cli.main import cli

    with Ledger.open(tmp_path / "audit.sqlite") as ledger:
        ledger.append("test", {"i": 0})
    assert sorted(p.name for p in tmp_path.glob("*.key")) == ["audit.key"]
    assert (tmp_path / "audit.pub").is_file() and not (tmp_path / "ledger.pub").exists()
    assert _verify(tmp_path / "audit.sqlite").ok
    shown = " ".join(CliRunner().invoke(cli, ["waive", "--help"], terminal_width=200).output.split())
    assert "else LEDGER with the suffix .key (gate.sqlite: gate.key, its public half gate.pub)" in shown


def _raw(path: Path) -> sqlite3.Connection:
    """A plain connection with the append-only triggers dropped, as an attacker would."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        conn.execute(f"DROP TRIGGER {name}")
    return conn


def _verify(path: Path, **kwargs: object):  # type: ignore[no-untyped-def]
    with Ledger.open(path, writable=False, create=False) as ledger:
        return verify_chain(ledger, **kwargs)  # type: ignore[arg-type]


def test_entry_hash_is_the_documented_formula(tmp_path: Path) -> None:
    path = _ledger(tmp_path, 2)
    with Ledger.open(path, writable=False) as ledger:
        first, second = list(ledger.entries())
    body = canonical_json(first.body)
    assert body == first.raw.encode()
    assert body.startswith(b'{"i":0,"kind":"test","text":"entry 0 \xe2\x80\x93 \xc3\xbcn')  # sorted, compact, UTF-8
    expected = hashlib.sha256(b"gate-ledger/v1/entry\x00" + struct.pack(">Q", 1) + bytes(32) + body).hexdigest()
    assert first.hash == expected == entry_hash(1, GENESIS, body)
    assert second.prev == first.hash
    assert canonical_json({"b": 1, "a": [1.5, "é"]}) == '{"a":[1.5,"é"],"b":1}'.encode()
    with pytest.raises(ValueError):
        canonical_json({"x": float("nan")})


def test_clean_ledger_verifies_and_checkpoints_sign_every_append(tmp_path: Path) -> None:
    path = _ledger(tmp_path)
    report = _verify(path)
    assert report.ok, report.problems
    assert (report.size, report.verified, report.checkpoints) == (5, 5, 5)
    with Ledger.open(path, writable=False) as ledger:
        latest = ledger.checkpoint()
        assert latest is not None and latest.size == 5 and latest.head == report.head
        assert latest.verify_signature() is None
    assert (tmp_path / "ledger.key").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "ledger.pub").is_file()


def test_sql_updates_and_deletes_are_refused(tmp_path: Path) -> None:
    path = _ledger(tmp_path, 2)
    conn = sqlite3.connect(str(path))
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("UPDATE entries SET body = '{}' WHERE seq = 1")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("DELETE FROM checkpoints")


def test_edited_entry_is_detected(tmp_path: Path) -> None:
    path = _ledger(tmp_path)
    conn = _raw(path)
    body = conn.execute("SELECT body FROM entries WHERE seq = 3").fetchone()[0]
    conn.execute("UPDATE entries SET body = ? WHERE seq = 3", (body.replace('"i":2', '"i":7'),))
    report = _verify(path)
    bad = report.first_bad()
    assert bad is not None and bad.seq == 3 and "edited" in bad.message
    assert report.verified == 2


def test_edit_with_recomputed_chain_is_caught_by_the_signed_checkpoints(tmp_path: Path) -> None:
    path = _ledger(tmp_path)
    conn = _raw(path)
    rows = conn.execute("SELECT seq, body FROM entries ORDER BY seq").fetchall()
    prev = GENESIS
    for seq, body in rows:  # a careful forger rewrites entry 2 and re-links everything after it
        if seq == 2:
            body = body.replace('"i":1', '"i":100')
        digest = entry_hash(seq, prev, body.encode())
        conn.execute("UPDATE entries SET body = ?, prev = ?, hash = ? WHERE seq = ?", (body, prev, digest, seq))
        prev = digest
    report = _verify(path)
    bad = report.first_bad()
    assert bad is not None and bad.seq == 2 and "rewritten" in bad.message


def test_deleted_entry_is_detected(tmp_path: Path) -> None:
    path = _ledger(tmp_path)
    _raw(path).execute("DELETE FROM entries WHERE seq = 2")
    bad = _verify(path).first_bad()
    assert bad is not None and bad.seq == 2 and "missing" in bad.message


def test_reordered_entries_are_detected(tmp_path: Path) -> None:
    path = _ledger(tmp_path)
    conn = _raw(path)
    two = conn.execute("SELECT prev, hash, body FROM entries WHERE seq = 2").fetchone()
    three = conn.execute("SELECT prev, hash, body FROM entries WHERE seq = 3").fetchone()
    conn.execute("UPDATE entries SET prev = ?, hash = ?, body = ? WHERE seq = 2", three)
    conn.execute("UPDATE entries SET prev = ?, hash = ?, body = ? WHERE seq = 3", two)
    bad = _verify(path).first_bad()
    assert bad is not None and bad.seq == 2 and "does not link" in bad.message


def test_truncation_is_detected_by_the_stored_checkpoint(tmp_path: Path) -> None:
    path = _ledger(tmp_path)
    _raw(path).execute("DELETE FROM entries WHERE seq > 3")
    bad = _verify(path).first_bad()
    assert bad is not None and bad.seq == 4 and "truncated" in bad.message


def test_truncation_with_its_checkpoints_is_detected_by_a_held_checkpoint(tmp_path: Path) -> None:
    path = _ledger(tmp_path)
    with Ledger.open(path, writable=False) as ledger:
        held = ledger.checkpoint()
    assert held is not None
    exported = Checkpoint.model_validate_json(held.model_dump_json())
    conn = _raw(path)
    conn.execute("DELETE FROM entries WHERE seq > 3")
    conn.execute("DELETE FROM checkpoints WHERE size > 3")
    pinned = _verify(path).first_bad()  # the pin beside the file still says 5...
    assert pinned is not None and "pinned checkpoint 5" in pinned.message and "truncated" in pinned.message
    Path(f"{path}.pin").unlink()  # ...so remove that too
    assert _verify(path).ok  # self-consistent on its own...
    bad = _verify(path, trusted=[exported]).first_bad()  # ...but not against what an auditor holds
    assert bad is not None and bad.seq == 4 and "truncated" in bad.message


def test_wholesale_rewrite_under_a_new_key_is_detected(tmp_path: Path) -> None:
    path = _ledger(tmp_path)
    with Ledger.open(path, writable=False) as ledger:
        held, keyid = ledger.checkpoint(), ledger.keyid
        bodies = [e.body for e in ledger.entries()]
    assert held is not None
    forged_path = tmp_path / "forged" / "ledger.sqlite"
    with Ledger.open(forged_path) as forged:
        for body in bodies:
            payload = {k: v for k, v in body.items() if k not in ("kind", "time")}
            forged.append(body["kind"], payload | ({"i": 99} if body["i"] == 1 else {}))
    assert _verify(forged_path).ok
    bad = _verify(forged_path, trusted=[held]).first_bad()
    assert bad is not None and "re-keyed or replaced" in bad.message
    bad = _verify(forged_path, pinned_keyids=[keyid]).first_bad()
    assert bad is not None and "not a pinned key" in bad.message


def test_forged_checkpoint_signature_is_detected(tmp_path: Path) -> None:
    path = _ledger(tmp_path, 3)
    with Ledger.open(path, writable=False) as ledger:
        held = ledger.checkpoint()
    assert held is not None
    forged = held.model_copy(update={"head": "ab" * 32})
    assert forged.verify_signature() is not None
    bad = _verify(path, trusted=[forged]).first_bad()
    assert bad is not None and "signature does not verify" in bad.message


def test_entry_appended_outside_gate_is_detected(tmp_path: Path) -> None:
    path = _ledger(tmp_path, 3)
    conn = _raw(path)
    prev = conn.execute("SELECT hash FROM entries WHERE seq = 3").fetchone()[0]
    body = canonical_json({"kind": "approval", "time": "2030-01-01T00:00:00+00:00"})
    conn.execute("INSERT INTO entries VALUES (4, ?, ?, ?)", (prev, entry_hash(4, prev, body), body.decode()))
    bad = _verify(path).first_bad()
    assert bad is not None and bad.seq == 4 and "no signed checkpoint" in bad.message


def test_a_ledger_refuses_a_different_signing_key(tmp_path: Path) -> None:
    path = _ledger(tmp_path, 1)
    other = tmp_path / "other.key"
    from gate.trust.ledger import ensure_ledger_key

    ensure_ledger_key(other)
    with pytest.raises(LedgerError, match="signed by key"):
        Ledger.open(path, key_path=other)
    with pytest.raises(LedgerError, match="no ledger"):
        Ledger.open(tmp_path / "absent.sqlite", create=False, writable=False)


def _append_many(path: str, writer: int, count: int, barrier: object) -> None:
    barrier.wait()  # type: ignore[attr-defined]
    for i in range(count):
        with Ledger.open(Path(path)) as ledger:
            ledger.append("test", {"writer": writer, "i": i})


def test_concurrent_writer_processes_lose_nothing(tmp_path: Path) -> None:
    # The ledger does not exist yet: the writers also race to create it and its key.
    path = tmp_path / "shared" / "ledger.sqlite"
    writers, count = 4, 15
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(writers)
    procs = [ctx.Process(target=_append_many, args=(str(path), w, count, barrier)) for w in range(writers)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
    assert [p.exitcode for p in procs] == [0] * writers
    report = _verify(path)
    assert report.ok, report.problems
    assert report.size == writers * count and report.checkpoints == writers * count
    with Ledger.open(path, writable=False) as ledger:
        seen = sorted((e.body["writer"], e.body["i"]) for e in ledger.entries())
    assert seen == [(w, i) for w in range(writers) for i in range(count)]


def test_checking_only_the_latest_signature_still_catches_a_relinked_edit(tmp_path: Path) -> None:
    path = _ledger(tmp_path)
    conn = _raw(path)
    prev = GENESIS
    for seq, body in conn.execute("SELECT seq, body FROM entries ORDER BY seq").fetchall():
        body = body.replace('"i":1', '"i":100') if seq == 2 else body
        digest = entry_hash(seq, prev, body.encode())
        conn.execute("UPDATE entries SET body = ?, prev = ?, hash = ? WHERE seq = ?", (body, prev, digest, seq))
        prev = digest
    with Ledger.open(path, writable=False) as ledger:
        quick = verify_chain(ledger, every_checkpoint=False)
    assert quick.checkpoints == 0 and not quick.ok and "rewritten" in quick.problems[0].message


def test_the_wal_switch_retries_a_lock_sqlite_reports_without_waiting() -> None:
    # SQLite may answer "database is locked" to a journal-mode switch at once, bypassing its busy
    # handler, while another process creates the same ledger (seen once in CI under load)
    import sqlite3

    from gate.trust.ledger_store import _use_wal

    class Racing:
        def __init__(self, failures: int, message: str = "database is locked") -> None:
            self.failures, self.message, self.calls = failures, message, 0

        def execute(self, sql: str) -> sqlite3.Cursor:
            self.calls += 1
            if self.failures:
                self.failures -= 1
                raise sqlite3.OperationalError(self.message)
            return sqlite3.connect(":memory:").execute("SELECT 'wal'")

    racing = Racing(failures=3)
    _use_wal(racing)  # type: ignore[arg-type]
    assert racing.calls == 4
    with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
        _use_wal(Racing(failures=1, message="disk I/O error"))  # type: ignore[arg-type]


def test_a_receipt_is_written_as_before_and_read_back_by_its_model(tmp_path: Path) -> None:
    import json

    from gate.trust.ledger import RECEIPT, Receipt, write_receipt

    path = _ledger(tmp_path, 2)
    with Ledger.open(path, writable=False) as ledger:
        entry, checkpoint = ledger.get(2), ledger.checkpoint(2)
        assert entry is not None and checkpoint is not None
        written = write_receipt(tmp_path, ledger, entry, checkpoint)
    assert written == tmp_path / RECEIPT
    # the shape every earlier gate wrote, key for key, in this order
    before = {
        "ledger": str(path.resolve()),
        "origin": checkpoint.origin,
        "entry": {"seq": 2, "hash": entry.hash, "kind": entry.kind},
        "checkpoint": checkpoint.model_dump(),
    }
    assert written.read_bytes() == (json.dumps(before, indent=2) + "\n").encode()
    read = Receipt.model_validate_json(written.read_bytes())
    assert read.checkpoint == checkpoint and read.entry.seq == 2 and read.dump() == before
