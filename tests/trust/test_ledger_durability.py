"""The SQLite ledger survives its disk: corrupt files named in one line, a lost or foreign WAL, the pin."""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from gate.cli.main import cli
from gate.trust.ledger import Ledger, LedgerError, read_pin
from gate.trust.ledger_store import foreign_wal
from gate.trust.ledger_verify import verify_chain


def _ledger(tmp_path: Path, n: int = 6) -> Path:
    path = tmp_path / "ledger.sqlite"
    with Ledger.open(path) as ledger:
        for i in range(n):
            ledger.append("test", {"i": i})
    return path


def _flip(offset: int, data: bytes = b"\xff" * 64) -> Callable[[Path], None]:
    def corrupt(path: Path) -> None:
        with path.open("r+b") as fh:
            fh.seek(offset)
            fh.write(data)

    return corrupt


def _sql(statement: str) -> Callable[[Path], None]:
    def corrupt(path: Path) -> None:
        conn = sqlite3.connect(str(path), isolation_level=None)
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
            conn.execute(f"DROP TRIGGER {name}")
        conn.execute(statement)
        conn.close()

    return corrupt


def _truncate(size: int) -> Callable[[Path], None]:
    return lambda path: os.truncate(path, size)


def _replace_with(data: bytes) -> Callable[[Path], None]:
    return lambda path: path.write_bytes(data)


def _directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


CORRUPTIONS: dict[str, Callable[[Path], None]] = {
    "random bytes": _replace_with(os.urandom(8192)),
    "text file": _replace_with(b"not a database at all\n" * 100),
    "header overwritten": _flip(0, b"\x00" * 100),
    "page 2 overwritten": _flip(4096),
    "last page overwritten": lambda p: _flip(p.stat().st_size - 4096, b"\xa5" * 4096)(p),
    "truncated mid-page": lambda p: _truncate(p.stat().st_size - 1000)(p),
    "meta table dropped": _sql("DROP TABLE meta"),
    "entry body not JSON": _sql("UPDATE entries SET body = '{not json' WHERE seq = 2"),
    "checkpoint note mangled": _sql("UPDATE checkpoints SET note = 'garbage' WHERE size = 1"),
    "public key mangled": _sql("UPDATE meta SET value = '!!' WHERE key = 'public_key'"),
    "a directory": _directory,
}
"""Eleven ways a ledger file goes bad: `audit verify` answers each with one line and exit 2, or exit 1
(it read the ledger and names what does not verify); `audit list` (which does not verify) never
answers with a traceback."""


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
@pytest.mark.parametrize("command", [["audit", "verify"], ["audit", "list"]])
def test_a_corrupt_ledger_is_one_line_never_a_traceback(tmp_path: Path, kind: str, command: list[str]) -> None:
    path = _ledger(tmp_path)
    CORRUPTIONS[kind](path)
    result = CliRunner().invoke(cli, [*command, "--ledger", str(path)])
    assert result.exception is None or isinstance(result.exception, SystemExit), (kind, result.exception)
    assert result.exit_code in ((1, 2) if command[1] == "verify" else (0, 2)), (kind, result.output)
    if result.exit_code == 2:
        lines = [line for line in result.output.splitlines() if line.startswith("gate:")]
        assert len(lines) == 1 and str(path) in lines[0], (kind, result.output)


def test_a_malformed_page_is_named(tmp_path: Path) -> None:
    path = _ledger(tmp_path, 40)
    _flip(4096 * 2, b"\x0d" + b"\xff" * 200)(path)
    result = CliRunner().invoke(cli, ["audit", "verify", "--ledger", str(path)])
    assert result.exit_code == 2
    assert "database disk image is malformed" in result.output and "at page" in result.output


def test_appending_to_a_corrupt_ledger_is_refused_in_one_line(tmp_path: Path) -> None:
    path = _ledger(tmp_path)
    CORRUPTIONS["random bytes"](path)
    with pytest.raises(LedgerError, match=r"ledger\.sqlite: file is not a database"):
        Ledger.open(path)


def test_every_acknowledged_entry_is_in_the_database_file_not_only_the_wal(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    with Ledger.open(path) as ledger:
        for i in range(25):
            ledger.append("test", {"i": i})
        wal = Path(f"{path}-wal")
        assert not wal.exists() or wal.stat().st_size == 0  # checkpointed and truncated after each append
        copy = tmp_path / "copy.sqlite"
        shutil.copyfile(path, copy)  # the database file alone, as if the WAL were lost now
    with Ledger.open(copy, writable=False) as alone:
        assert alone.size() == 25 and verify_chain(alone).ok


def test_a_wal_removed_under_an_open_ledger_stops_the_next_append(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    with Ledger.open(path) as ledger:
        for i in range(3):
            ledger.append("test", {"i": i})
        Path(f"{path}-wal").unlink()
        with pytest.raises(LedgerError, match=r"ledger\.sqlite-wal was removed while the ledger was open"):
            ledger.append("test", {"i": 3})
    with Ledger.open(path, writable=False) as reopened:
        assert reopened.size() == 3 and verify_chain(reopened).ok  # nothing acknowledged was lost


def test_a_foreign_wal_is_named_before_sqlite_replays_it(tmp_path: Path) -> None:
    path = _ledger(tmp_path)
    wal = Path(f"{path}-wal")
    wal.write_bytes(b"\x37\x7f\x06\x82" + (3007000).to_bytes(4, "big") + (1024).to_bytes(4, "big") + b"\x00" * 20)
    assert foreign_wal(path) is not None
    with pytest.raises(LedgerError, match=r"foreign WAL: ledger\.sqlite-wal has 1024-byte pages"):
        Ledger.open(path)
    wal.write_bytes(b"this is not a WAL at all, just bytes")
    result = CliRunner().invoke(cli, ["audit", "verify", "--ledger", str(path)])
    assert result.exit_code == 2 and "not an SQLite write-ahead log" in result.output


def test_a_lost_ledger_is_never_silently_replaced(tmp_path: Path) -> None:
    path = _ledger(tmp_path)
    pinned = read_pin(path)
    assert pinned is not None and pinned.size == 6
    path.unlink()
    with pytest.raises(LedgerError, match="refusing to start a new one"):
        Ledger.open(path)
    path.write_bytes(b"")  # emptied: SQLite would take it for a new database
    with pytest.raises(LedgerError, match="missing or empty"):
        Ledger.open(path)
    result = CliRunner().invoke(cli, ["audit", "verify", "--ledger", str(path)])
    assert result.exit_code == 2 and "refusing to start a new one" in result.output


def test_an_older_copy_restored_over_the_ledger_is_named_with_what_was_lost(tmp_path: Path) -> None:
    path = _ledger(tmp_path, 3)
    backup = tmp_path / "backup.sqlite"
    shutil.copyfile(path, backup)
    with Ledger.open(path) as ledger:
        for i in range(4):
            ledger.append("test", {"i": 10 + i})
    shutil.copyfile(backup, path)
    with pytest.raises(LedgerError, match=r"holds 3 entries, but ledger\.sqlite\.pin acknowledged 7.*4 acknowledged"):
        Ledger.open(path)
    with Ledger.open(path, writable=False) as ledger:
        report = verify_chain(ledger)
    assert not report.ok and "the pinned checkpoint 7" in report.problems[0].message


def test_another_ledger_moved_into_place_is_named(tmp_path: Path) -> None:
    path = _ledger(tmp_path)
    other = _ledger(tmp_path / "other")
    shutil.copyfile(other, path)
    with pytest.raises(LedgerError, match=r"but ledger\.sqlite\.pin pins ledger"):
        Ledger.open(path, key_path=tmp_path / "other" / "ledger.key")


@pytest.mark.parametrize("where", ["envelope", "payload"])
def test_a_deeply_nested_attestation_is_invalid_not_a_traceback(tmp_path: Path, where: str) -> None:
    import base64
    import json

    from gate.trust.keys import write_keypair

    write_keypair(tmp_path / "k.key", tmp_path / "k.pub")
    deep = "[" * 200_000 + "]" * 200_000
    dossier = tmp_path / "dossier"
    dossier.mkdir()
    envelope = (
        deep
        if where == "envelope"
        else json.dumps(
            {
                "payloadType": "application/vnd.in-toto+json",
                "payload": base64.b64encode(deep.encode()).decode(),
                "signatures": [],
            }
        )
    )
    (dossier / "attestation.dsse.json").write_text(envelope)
    result = CliRunner().invoke(cli, ["verify", str(dossier), "--run-key", str(tmp_path / "k.pub")])
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.exit_code == 1 and "INVALID" in result.output
    assert "not a DSSE envelope" in result.output or "recursion limit" in result.output
