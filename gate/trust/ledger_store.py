"""Where the ledger's rows live: SQLite (embedded default) or PostgreSQL (psycopg 3, shared by a CI fleet).

A store keeps three tables (meta, entries, checkpoints) and runs one append at a time:
`store.append(build)` calls build(last_seq, last_hash) in one transaction under the writer lock and
inserts both rows. SQLite (docs/reliability.md): WAL, `synchronous=FULL` and a
`wal_checkpoint(TRUNCATE)` after every append; a WAL removed while open, or foreign to the database,
is refused. Every SQLite error becomes one LedgerError line, exit 2. PostgreSQL appends take a
transaction-scoped advisory lock (writers queue in the database; readers never wait), commits are
synchronous, triggers refuse UPDATE, DELETE and TRUNCATE, and a team grants its CI role INSERT and
SELECT only.
"""

from __future__ import annotations

import os
import re
import sqlite3
import struct
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager, suppress
from pathlib import Path, PosixPath
from time import monotonic, sleep
from typing import Any, Protocol

from gate.errors import EXIT_BAD_INPUT, GateError

BUSY_TIMEOUT_S = 60.0
Row = tuple[int, str, str, str]
"""(seq, prev, hash, body) of one entry."""
Build = Callable[[int, str | None], tuple[Row, tuple[int, str, str]]]
"""(last seq or 0, last hash or None) -> (entry row, checkpoint row (size, note, signature))."""
URL_SCHEMES = ("postgresql://", "postgres://")


class LedgerError(GateError):
    """The ledger cannot be opened or written (missing file, wrong key, corrupt, lost entries): exit 2."""

    exit_code = EXIT_BAD_INPUT


class LedgerURL(PosixPath):
    """A database URL carried where a ledger path goes (`--ledger postgresql://...`); `url` is the
    URL exactly as given (a Path would fold its `//`)."""

    url: str = ""


def ledger_location(text: str) -> Path:
    """A ledger path, or a LedgerURL for `postgresql://...`."""
    if text.startswith(URL_SCHEMES):
        location = LedgerURL(text)
        location.url = text
        return location
    return Path(text)


def is_url(path: Path) -> bool:
    return isinstance(path, LedgerURL)


_PASSWORD = re.compile(r"(://[^:/@]+):[^@]*@")


def without_password(url: str) -> str:
    """The URL with no password in it, for a command to print: libpq takes the password from
    PGPASSWORD or ~/.pgpass, so the printed command runs as printed and leaks nothing."""
    return _PASSWORD.sub(r"\1@", url)


def redacted(url: str) -> str:
    return _PASSWORD.sub(r"\1:***@", url)


class LedgerStore(Protocol):
    """The storage a Ledger needs; each method is one transaction."""

    location: str

    def initialise(self, meta: dict[str, str]) -> None: ...
    def meta(self, key: str) -> str | None: ...
    def append(self, build: Build) -> None: ...
    def entries(self) -> Iterator[Row]: ...
    def get(self, seq: int) -> Row | None: ...
    def size(self) -> int: ...
    def checkpoints(self) -> list[tuple[str, str]]: ...
    def close(self) -> None: ...


class SqlTables:
    """What both stores read and write the same way: tables prefixed `_tables`, parameters written
    `_marker` (SQLite `?`, psycopg `%s`), reads through `_fetch` (one transaction)."""

    _conn: Any
    _tables: str
    _marker: str

    def _fetch(self, sql: str, *params: object) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _insert_next(self, build: Build) -> None:
        t, m = self._tables, self._marker
        row = self._conn.execute(f"SELECT seq, hash FROM {t}entries ORDER BY seq DESC LIMIT 1").fetchone()
        entry, checkpoint = build(int(row[0]) if row else 0, str(row[1]) if row else None)
        self._conn.execute(f"INSERT INTO {t}entries (seq, prev, hash, body) VALUES ({m}, {m}, {m}, {m})", entry)
        self._conn.execute(f"INSERT INTO {t}checkpoints (size, note, signature) VALUES ({m}, {m}, {m})", checkpoint)

    def meta(self, key: str) -> str | None:
        rows = self._fetch(f"SELECT value FROM {self._tables}meta WHERE key = {self._marker}", key)
        return str(rows[0][0]) if rows else None

    def entries(self) -> Iterator[Row]:
        for row in self._fetch(f"SELECT seq, prev, hash, body FROM {self._tables}entries ORDER BY seq"):
            yield _row(row)

    def get(self, seq: int) -> Row | None:
        rows = self._fetch(f"SELECT seq, prev, hash, body FROM {self._tables}entries WHERE seq = {self._marker}", seq)
        return _row(rows[0]) if rows else None

    def size(self) -> int:
        rows = self._fetch(f"SELECT COUNT(*) FROM {self._tables}entries")
        return int(rows[0][0]) if rows else 0

    def checkpoints(self) -> list[tuple[str, str]]:
        rows = self._fetch(f"SELECT note, signature FROM {self._tables}checkpoints ORDER BY size")
        return [(str(n), str(s)) for n, s in rows]


def _row(raw: tuple[Any, ...]) -> Row:
    seq, prev, digest, body = raw
    return int(seq), str(prev), str(digest), str(body)


_SQLITE_SCHEMA = """
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

_WAL_MAGIC = (0x377F0682, 0x377F0683)


def _use_wal(conn: sqlite3.Connection) -> None:
    """Put the database in WAL mode, retrying "database is locked" (answered at once, without the busy
    handler, while another process switches the same file) for up to BUSY_TIMEOUT_S."""
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


def foreign_wal(path: Path) -> str | None:
    """Why `<path>-wal` cannot belong to the database at `path` (None when it may): bad magic, a
    format SQLite does not write, or a page size other than the database's."""
    wal = Path(f"{path}-wal")
    try:
        with wal.open("rb") as fh:
            header = fh.read(32)
        with path.open("rb") as fh:
            db_header = fh.read(100)
    except OSError:
        return None
    if len(header) == 0 or len(db_header) < 100:
        return None
    if len(header) < 32:
        return f"{wal.name} is {len(header)} bytes, shorter than a WAL header"
    magic, version, page_size = struct.unpack(">III", header[:12])
    if magic not in _WAL_MAGIC or version != 3007000:
        return f"{wal.name} is not an SQLite write-ahead log"
    db_page = struct.unpack(">H", db_header[16:18])[0]
    db_page = 65536 if db_page == 1 else db_page
    if page_size != db_page:
        return f"{wal.name} has {page_size}-byte pages, {path.name} {db_page}: it belongs to another database"
    return None


def _malformed_page(path: Path) -> str:
    try:
        with closing(sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)) as conn:
            rows = conn.execute("PRAGMA quick_check(5)").fetchall()
    except sqlite3.Error:
        return ""
    for (line,) in rows:
        if found := re.search(r"[Pp]age (\d+)", str(line)):
            return f" at page {found.group(1)}"
    return ""


class SqliteStore(SqlTables):
    """The ledger in one SQLite file (local file system: WAL does not work over NFS)."""

    def __init__(self, path: Path, *, writable: bool) -> None:
        self.path = path
        self.location = str(path)
        self._tables, self._marker = "", "?"
        self._wal_ino: int | None = None
        with _sqlite_errors(self.path):
            if why := foreign_wal(path):
                raise LedgerError(
                    f"{path}: foreign WAL: {why}; move {path.name}-wal away (it would be replayed into the ledger)"
                )
            target = str(path) if writable else path.resolve().as_uri() + "?mode=ro"
            self._conn = sqlite3.connect(target, timeout=BUSY_TIMEOUT_S, isolation_level=None, uri=not writable)
            self._conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            if writable:
                _use_wal(self._conn)
                self._conn.execute("PRAGMA synchronous = FULL")
                self._remember_wal()

    def _current_wal(self) -> int | None:
        try:
            return os.stat(f"{self.path}-wal").st_ino
        except FileNotFoundError:
            return None

    def _remember_wal(self) -> None:
        """Note the WAL file this connection writes (once: a WAL that vanishes later stays noticed)."""
        if self._wal_ino is None:
            self._wal_ino = self._current_wal()

    def _wal_still_ours(self) -> None:
        """Refuse to write when the WAL this connection uses was removed or replaced under it: SQLite
        would go on writing into a file no other process can see."""
        if self._wal_ino is not None and (ino := self._current_wal()) != self._wal_ino:
            state = "was removed" if ino is None else "was replaced by another file"
            raise LedgerError(
                f"{self.path}: {self.path.name}-wal {state} while the ledger was open; nothing more is "
                "written (entries appended before were checkpointed into the database; run `gate audit verify`)"
            )

    def initialise(self, meta: dict[str, str]) -> None:
        with _sqlite_errors(self.path):
            # schema and meta in one transaction: a creation cut short leaves no half-made ledger
            self._conn.executescript("BEGIN IMMEDIATE;\n" + _SQLITE_SCHEMA)
            try:
                for key, value in meta.items():
                    self._conn.execute("INSERT OR IGNORE INTO meta VALUES (?, ?)", (key, value))
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._checkpoint()

    def append(self, build: Build) -> None:
        with _sqlite_errors(self.path):
            self._wal_still_ours()
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                self._insert_next(build)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            self._checkpoint()

    def _checkpoint(self) -> None:
        """Copy the WAL into the database file and empty it; a reader can hold it off: retry briefly, then
        leave it to the next append (the commit is already durable)."""
        deadline = monotonic() + 5.0
        while True:
            busy, log, done = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if (not busy and log == done) or monotonic() > deadline:
                break
            sleep(0.01)
        self._remember_wal()

    def _fetch(self, sql: str, *params: object) -> list[tuple[Any, ...]]:
        with _sqlite_errors(self.path):
            rows: list[tuple[Any, ...]] = self._conn.execute(sql, params).fetchall()
        return rows

    def close(self) -> None:
        if (conn := getattr(self, "_conn", None)) is not None:
            with suppress(sqlite3.Error):
                conn.close()


@contextmanager
def _sqlite_errors(path: Path) -> Iterator[None]:
    try:
        yield
    except sqlite3.Error as err:
        message = str(err)
        if "malformed" in message:
            message += _malformed_page(path)
        elif "no such table" in message:
            message = f"not a gate ledger ({message})"
        raise LedgerError(f"{path}: {message}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise LedgerError(f"{path}: {err.__class__.__name__}: {err}") from None


_PG_SCHEMA = """
CREATE TABLE IF NOT EXISTS gate_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS gate_entries (
    seq BIGINT PRIMARY KEY, prev TEXT NOT NULL, hash TEXT NOT NULL, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS gate_checkpoints (size BIGINT PRIMARY KEY, note TEXT NOT NULL, signature TEXT NOT NULL);
CREATE OR REPLACE FUNCTION gate_append_only() RETURNS trigger LANGUAGE plpgsql AS
    $$ BEGIN RAISE EXCEPTION 'the ledger is append-only'; END $$;
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'gate_entries_append_only') THEN
        CREATE TRIGGER gate_entries_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON gate_entries
            FOR EACH STATEMENT EXECUTE FUNCTION gate_append_only();
        CREATE TRIGGER gate_checkpoints_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON gate_checkpoints
            FOR EACH STATEMENT EXECUTE FUNCTION gate_append_only();
    END IF;
END $$;
"""
_SCHEMA_LOCK = 0x6761_7465  # "gate": one session creates the schema at a time
_APPEND_LOCK = 0x6761_7466  # one session appends at a time


class PostgresStore(SqlTables):
    """The ledger in a PostgreSQL database (tables gate_meta, gate_entries, gate_checkpoints)."""

    def __init__(self, url: str, *, writable: bool) -> None:
        self.location = redacted(url)
        self._tables, self._marker = "gate_", "%s"
        try:
            import psycopg
        except ImportError as err:
            raise LedgerError(
                f"{self.location}: a PostgreSQL ledger needs psycopg: pip install 'gate[postgres]'"
            ) from err
        self._psycopg = psycopg
        with _pg_errors(self):
            self._conn = psycopg.connect(url, autocommit=False, connect_timeout=10)
            self._conn.read_only = not writable
            self._conn.execute("SET synchronous_commit = on")  # acknowledged means on the server's disk
            self._conn.commit()

    def initialise(self, meta: dict[str, str]) -> None:
        with _pg_errors(self), self._conn.transaction():
            self._conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            row = self._conn.execute("SELECT to_regclass('gate_checkpoints') IS NOT NULL").fetchone()
            if not (row and row[0]):  # the owner creates the schema once; a CI role (INSERT, SELECT) never can
                self._conn.execute(_PG_SCHEMA)
            for key, value in meta.items():
                self._conn.execute("INSERT INTO gate_meta VALUES (%s, %s) ON CONFLICT (key) DO NOTHING", (key, value))

    def _fetch(self, sql: str, *params: object) -> list[tuple[Any, ...]]:
        with _pg_errors(self), self._conn.transaction():
            rows: list[tuple[Any, ...]] = self._conn.execute(sql, params or None).fetchall()
        return rows

    def append(self, build: Build) -> None:
        with _pg_errors(self), self._conn.transaction():
            # one appender at a time; needs no privilege beyond INSERT and SELECT (a LOCK TABLE that
            # excludes writers would need UPDATE or DELETE); the primary key refuses a duplicate anyway
            self._conn.execute("SELECT pg_advisory_xact_lock(%s)", (_APPEND_LOCK,))
            self._insert_next(build)

    def close(self) -> None:
        if (conn := getattr(self, "_conn", None)) is not None:
            conn.close()


@contextmanager
def _pg_errors(store: PostgresStore) -> Iterator[None]:
    try:
        yield
    except store._psycopg.Error as err:
        first = " ".join(str(err).split())
        if "gate_meta" in first and "does not exist" in first:
            first = f"not a gate ledger ({first})"
        raise LedgerError(f"{store.location}: {redacted(first)}") from None
