"""The fleet ledger at verification: every command that takes --ledger takes a PostgreSQL URL, and
each pin setting of docs/reliability.md ("none", GATE_LEDGER_ORIGIN, GATE_LEDGER_PIN) catches what
its row says, played on a real local PostgreSQL server (tests/support/postgres.py; skipped, saying
so, where PostgreSQL is not installed).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from gate.cli.ledger_options import ledger_option_of
from gate.cli.main import cli
from gate.trust.keys import write_keypair
from gate.trust.ledger import Ledger, LedgerError
from gate.trust.ledger_store import ledger_location
from gate.trust.ledger_verify import verify_chain
from tests.trust.runs import exact_manifest, signed_run
from tests.trust.trusted import make_keys, write_trust

COMMIT = "5e1f0c2a" * 5


def gate(*args: object) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args])


def _commands(group: click.Group, path: str = "gate") -> Iterator[tuple[str, click.Command]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, name
        if isinstance(command, click.Group):
            yield from _commands(command, f"{path} {name}")
        else:
            yield f"{path} {name}", command


def test_verify_every_command_that_takes_ledger_takes_a_postgresql_url() -> None:
    """`gate verify --ledger postgresql://...` was refused by click ("File does not exist")."""
    expected = ledger_option_of("")(lambda: None).__click_params__[0].callback  # type: ignore[attr-defined]
    taking = {name: c for name, c in _commands(cli) if any(p.name == "ledger_path" for p in c.params)}
    assert "gate verify" in taking and "gate audit trace" in taking and "gate run" in taking
    for name, command in taking.items():
        option = next(p for p in command.params if p.name == "ledger_path")
        assert isinstance(option.type, click.types.StringParamType), name
        assert option.callback is not None and option.callback.__code__ is expected.__code__, name


@pytest.fixture
def keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    found = make_keys(tmp_path / "keys", ("ci", "alice", "bob"))
    write_keypair(tmp_path / "ledger.key", tmp_path / "ledger.pub")
    monkeypatch.setenv("GATE_LEDGER_KEY", str(tmp_path / "ledger.key"))
    monkeypatch.setenv("GATE_TRUST", str(write_trust(tmp_path / "trust.yaml", found)))
    return found


def _passing_run(tmp_path: Path, keys: dict[str, Path], url: str, name: str = "out") -> Path:
    manifest = exact_manifest(tmp_path / "m.yaml", COMMIT)
    out, _ = signed_run(tmp_path / name, manifest, keys["ci.key"], ledger=ledger_location(url))
    return out


def _delete_everything_but_meta(url: str) -> None:
    """What someone who can drop the append-only triggers does: entries and checkpoints gone, gate_meta kept."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        _drop_triggers(conn)
        conn.execute("DELETE FROM gate_entries")
        conn.execute("DELETE FROM gate_checkpoints")


def _drop_triggers(conn: object) -> None:
    for table in ("gate_entries", "gate_checkpoints"):
        conn.execute(f"DROP TRIGGER {table}_append_only ON {table}")  # type: ignore[attr-defined]


def _refused(result: Result, *words: str) -> None:
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert all(w in lines[0] for w in words), result.output


def test_verify_and_trace_read_a_postgresql_ledger(tmp_path: Path, keys: dict[str, Path], pg_url: str) -> None:
    out = _passing_run(tmp_path, keys, pg_url)
    trust = tmp_path / "trust.yaml"
    verified = gate("verify", out, "--trust", trust, "--commit", COMMIT, "--ledger", pg_url)
    assert verified.exit_code == 0, verified.output
    assert "verdict PASS" in verified.output and "File does not exist" not in verified.output
    traced = gate("audit", "trace", COMMIT, "--trust", trust, "--ledger", pg_url)
    assert traced.exit_code == 0 and "VERIFIED" in traced.output, traced.output


def test_unpinned_database_restarts_unnoticed(tmp_path: Path, keys: dict[str, Path], pg_url: str) -> None:
    """The "none" row: without a pin, a ledger emptied under its gate_meta starts again from entry 1."""
    _passing_run(tmp_path, keys, pg_url)
    _passing_run(tmp_path, keys, pg_url, "again")
    _delete_everything_but_meta(pg_url)
    with Ledger.open(ledger_location(pg_url)) as ledger:
        entry, _ = ledger.append("test", {"i": 0})
        assert entry.seq == 1  # history gone, and nothing says so
    with Ledger.open(ledger_location(pg_url), writable=False) as ledger:
        assert verify_chain(ledger).ok


def test_origin_pin_refuses_a_ledger_emptied_under_its_meta(
    tmp_path: Path, keys: dict[str, Path], pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = _passing_run(tmp_path, keys, pg_url)
    with Ledger.open(ledger_location(pg_url), writable=False) as ledger:
        origin = ledger.origin
    monkeypatch.setenv("GATE_LEDGER_ORIGIN", origin)
    trust = tmp_path / "trust.yaml"
    assert gate("verify", out, "--trust", trust, "--ledger", pg_url).exit_code == 0  # the pinned ledger, as it is
    _delete_everything_but_meta(pg_url)
    words = (pg_url, f"ledger {origin} holds no entries, but GATE_LEDGER_ORIGIN pins ledger {origin}")
    _refused(gate("verify", out, "--trust", trust, "--ledger", pg_url), *words)
    _refused(gate("audit", "trace", COMMIT, "--trust", trust, "--ledger", pg_url), *words)
    _refused(gate("audit", "verify", "--ledger", pg_url), *words)
    with pytest.raises(LedgerError, match="refusing to start it again from entry 1"):
        Ledger.open(ledger_location(pg_url))  # a run's append: never re-created
    with pytest.raises(LedgerError, match="holds no entries"):
        signed_run(
            tmp_path / "next",
            exact_manifest(tmp_path / "m.yaml", COMMIT),
            keys["ci.key"],
            ledger=ledger_location(pg_url),
        )


def test_pin_file_refuses_a_ledger_cut_back(
    tmp_path: Path, keys: dict[str, Path], pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the origin cannot see: a ledger cut back to fewer entries that still holds some."""
    import psycopg

    monkeypatch.setenv("GATE_LEDGER_PIN", str(tmp_path / "fleet.pin"))
    _passing_run(tmp_path, keys, pg_url)
    out = _passing_run(tmp_path, keys, pg_url, "again")
    with Ledger.open(ledger_location(pg_url), writable=False) as ledger:
        origin, size = ledger.origin, ledger.size()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        _drop_triggers(conn)
        conn.execute("DELETE FROM gate_entries WHERE seq > 1")
    monkeypatch.setenv("GATE_LEDGER_ORIGIN", origin)  # the origin alone lets it through
    monkeypatch.delenv("GATE_LEDGER_PIN")
    with Ledger.open(ledger_location(pg_url), writable=False) as ledger:
        assert ledger.size() == 1
    monkeypatch.setenv("GATE_LEDGER_PIN", str(tmp_path / "fleet.pin"))
    with pytest.raises(LedgerError, match=f"holds 1 entries, but .*fleet.pin acknowledged {size}"):
        Ledger.open(ledger_location(pg_url))
    verified = gate("verify", out, "--trust", tmp_path / "trust.yaml", "--ledger", pg_url)
    # a cut-back ledger could hide a revocation: verify reads revocations only from a ledger that verifies
    assert (
        verified.exit_code == 1
        and f"the pinned checkpoint {size} covers {size} entries, the ledger holds 1" in verified.stderr
    )
