"""The ledger's rows in a PostgreSQL database (`postgresql://...`, psycopg 3), shared by a CI fleet: see
gate.trust.ledger_store for the store's contract. Appends take a transaction-scoped advisory lock
(writers queue in the database; readers never wait), commits are synchronous; triggers refuse UPDATE,
DELETE and TRUNCATE, and a team grants its CI role INSERT and SELECT only."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gate.trust.ledger_store import Build, LedgerError, SqlTables, redacted

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
        self.url = url
        self.location = redacted(url)
        self.writable = writable
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
        conn = getattr(self, "_conn", None)
        if conn is not None:
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
