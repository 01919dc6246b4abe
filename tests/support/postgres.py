"""A real PostgreSQL server for a test session: initdb and pg_ctl on a temp dir, 127.0.0.1, a free port.

The server binaries come from the Debian package `postgresql` (`.ci/postgres.sh` installs it). As
root, the server runs as the `postgres` user (PostgreSQL refuses to run as root). Where PostgreSQL
is not installed the tests that need it skip, saying so.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def bindir() -> Path | None:
    """Where initdb and pg_ctl are (Debian keeps them under /usr/lib/postgresql/N/bin)."""
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(candidate, "initdb").is_file() and Path(candidate, "pg_ctl").is_file():
            return Path(candidate)
    found = shutil.which("initdb")
    return Path(found).parent if found and shutil.which("pg_ctl") else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_server_user(cmd: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return cmd
    return ["runuser", "-u", "postgres", "--", *cmd]


@contextmanager
def postgres_server(database: str = "ledger") -> Iterator[str]:
    """Start a throwaway server; yield a URL for `database` (created empty) as superuser `gate`."""
    bins = bindir()
    if bins is None:
        raise FileNotFoundError("PostgreSQL is not installed (apt-get install postgresql)")
    data = Path(tempfile.mkdtemp(prefix="gate-pg-"))
    if os.geteuid() == 0:
        shutil.chown(data, "postgres", "postgres")
    port = _free_port()
    run = {"check": True, "capture_output": True, "text": True}
    subprocess.run(_as_server_user([str(bins / "initdb"), "-D", str(data / "db"), "-U", "gate", "-A", "trust"]), **run)  # type: ignore[call-overload]
    options = f"-p {port} -k {data} -c listen_addresses=127.0.0.1 -c fsync=on -c synchronous_commit=on"
    subprocess.run(
        _as_server_user(
            [str(bins / "pg_ctl"), "-D", str(data / "db"), "-o", options, "-l", str(data / "log"), "-w", "start"]
        ),
        **run,  # type: ignore[call-overload]
    )
    try:
        import psycopg

        with psycopg.connect(f"postgresql://gate@127.0.0.1:{port}/postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{database}"')  # type: ignore[arg-type]
        yield f"postgresql://gate@127.0.0.1:{port}/{database}"
    finally:
        subprocess.run(
            _as_server_user([str(bins / "pg_ctl"), "-D", str(data / "db"), "-m", "fast", "-w", "stop"]),
            capture_output=True,
        )
        shutil.rmtree(data, ignore_errors=True)


def new_database(url: str, name: str) -> str:
    """Create another empty database on the same server; its URL."""
    import psycopg

    base = url.rsplit("/", 1)[0]
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]
    return f"{base}/{name}"


def server_or_skip() -> Iterator[str]:
    """For a module-scoped fixture: a running server's URL, or a skip that says why there is none."""
    import pytest

    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed (pip install 'gate[postgres]')")
    if bindir() is None:
        pytest.skip("PostgreSQL is not installed here (.ci/postgres.sh installs the Debian package)")
    with postgres_server() as url:
        yield url
