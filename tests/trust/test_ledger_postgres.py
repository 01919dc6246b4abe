"""The PostgreSQL ledger: the same chain, checkpoints and verification on a real local server."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest
from click.testing import CliRunner

from gate.cli.main import cli
from gate.trust.keys import write_keypair
from gate.trust.ledger import Ledger, LedgerError
from gate.trust.ledger_store import ledger_location, redacted, without_password
from gate.trust.ledger_verify import verify_chain
from tests.support.postgres import new_database

pytestmark = pytest.mark.reliability  # a real server: run by .ci/postgres.sh


@pytest.fixture
def key(tmp_path: Path) -> Path:
    path = tmp_path / "ledger.key"
    write_keypair(path, tmp_path / "ledger.pub")
    return path


def test_the_chain_checkpoints_and_verification_are_the_same(pg_url: str, key: Path) -> None:
    location = ledger_location(pg_url)
    with Ledger.open(location, key_path=key) as ledger:
        for i in range(6):
            entry, checkpoint = ledger.append("test", {"i": i, "text": "ünïcode"})
        assert entry.seq == 6 and checkpoint.size == 6 and ledger.location == pg_url
    with Ledger.open(location, writable=False) as ledger:
        report = verify_chain(ledger)
        assert report.ok and report.size == 6 and report.checkpoints == 6
        assert [e.body["i"] for e in ledger.entries()] == list(range(6))


def test_the_database_refuses_update_delete_and_truncate(pg_url: str, key: Path) -> None:
    import psycopg

    with Ledger.open(ledger_location(pg_url), key_path=key) as ledger:
        ledger.append("test", {"i": 0})
    for statement in ("UPDATE gate_entries SET body = '{}'", "DELETE FROM gate_entries", "TRUNCATE gate_checkpoints"):
        with psycopg.connect(pg_url) as conn, pytest.raises(psycopg.Error, match="append-only"):
            conn.execute(statement)  # type: ignore[arg-type]


def test_a_role_that_can_append_but_never_update_or_delete(pg_url: str, key: Path) -> None:
    """The team set-up of docs/reliability.md: the CI role holds INSERT and SELECT only."""
    import psycopg

    with Ledger.open(ledger_location(pg_url), key_path=key) as ledger:  # the owner creates the tables
        ledger.append("test", {"i": 0})
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS gate_ci")
        conn.execute("CREATE ROLE gate_ci LOGIN")
        conn.execute("GRANT SELECT, INSERT ON gate_meta, gate_entries, gate_checkpoints TO gate_ci")
    ci = pg_url.replace("gate@", "gate_ci@")
    with Ledger.open(ledger_location(ci), key_path=key) as ledger:
        entry, _ = ledger.append("test", {"i": 1})
        assert entry.seq == 2
    with psycopg.connect(ci) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("DELETE FROM gate_entries WHERE seq = 2")


def test_the_cli_reads_and_writes_a_postgresql_ledger(pg_url: str, key: Path) -> None:
    with Ledger.open(ledger_location(pg_url), key_path=key) as ledger:
        ledger.append("test", {"i": 0})
    listed = CliRunner().invoke(cli, ["audit", "list", "--ledger", pg_url])
    assert listed.exit_code == 0 and "#1" in listed.output
    verified = CliRunner().invoke(cli, ["audit", "verify", "--ledger", pg_url])
    assert verified.exit_code == 0 and "VERIFIED" in verified.output


def test_errors_are_one_line_without_the_password(pg_server: str, key: Path) -> None:
    empty = new_database(pg_server, "not_a_ledger")
    with pytest.raises(LedgerError, match="not a gate ledger"):
        Ledger.open(ledger_location(empty), writable=False)
    wrong = pg_server.replace("gate@", "gate:s3cret@").rsplit("/", 1)[0] + "/no_such_db"
    result = CliRunner().invoke(cli, ["audit", "verify", "--ledger", wrong])
    assert result.exit_code == 2 and "s3cret" not in result.output and result.output.count("\n") == 1
    assert redacted("postgresql://u:pw@h/db") == "postgresql://u:***@h/db"
    assert without_password("postgresql://u:pw@h/db") == "postgresql://u@h/db"  # libpq: PGPASSWORD


def _append_many(url: str, key: str, n: int) -> list[int]:
    with Ledger.open(ledger_location(url), key_path=Path(key)) as ledger:
        return [ledger.append("test", {"i": i})[0].seq for i in range(n)]


def test_concurrent_writers_are_serialised_by_the_database(pg_url: str, key: Path) -> None:
    with Ledger.open(ledger_location(pg_url), key_path=key):
        pass
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        acked = pool.starmap(_append_many, [(pg_url, str(key), 10)] * 4)
    seqs = sorted(s for batch in acked for s in batch)
    assert seqs == list(range(1, 41))  # none lost, none duplicated
    with Ledger.open(ledger_location(pg_url), writable=False) as ledger:
        assert verify_chain(ledger).ok


def test_a_run_records_to_a_postgresql_ledger(
    pg_url: str, key: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from gate.engine import runner
    from gate.engine.pipeline import run_pipeline
    from tests.support.repo import EXAMPLES
    from tests.trust.runs import signed_run

    run_key = tmp_path / "run.key"
    write_keypair(run_key, tmp_path / "run.pub")
    monkeypatch.setenv("GATE_LEDGER_KEY", str(key))
    monkeypatch.setattr(
        runner, "run_manifest", lambda path, out_dir, *_args, **_sinks: signed_run(out_dir, path, run_key)[1]
    )
    outputs = run_pipeline(EXAMPLES / "reference-static-layout.yaml", tmp_path / "out", sign_key=run_key, ledger=pg_url)
    assert outputs.ledger_seq == 1
    receipt = json.loads((tmp_path / "out" / "ledger.json").read_text())
    assert receipt["ledger"] == pg_url and receipt["entry"]["seq"] == 1
    with Ledger.open(ledger_location(pg_url), writable=False) as ledger:
        assert verify_chain(ledger).ok and ledger.size() == 1
    # the commands the dossier prints never name the database by a folded path (postgresql:/u@h/db)
    dossier = (tmp_path / "out" / "dossier.md").read_text() + (tmp_path / "out" / "dossier.html").read_text()
    assert pg_url.replace("://", ":/") not in dossier


# issue 34: a database ledger's identity is pinned, and readers see the pin consistently ---------


def _drop(url: str) -> None:
    import psycopg

    base, name = url.rsplit("/", 1)
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')  # type: ignore[arg-type]
        conn.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]


def test_a_pinned_database_ledger_refuses_an_empty_dropped_mistyped_or_other_database(
    pg_server: str, pg_url: str, key: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    other = new_database(pg_server, "t_pin_other")
    with Ledger.open(ledger_location(other), key_path=key) as ledger:  # another gate ledger, unpinned
        ledger.append("test", {"i": 0})
    monkeypatch.setenv("GATE_LEDGER_PIN", str(tmp_path / "fleet.pin"))
    with Ledger.open(ledger_location(pg_url), key_path=key) as ledger:
        for i in range(3):
            ledger.append("test", {"i": i})
        origin = ledger.origin
    assert f'"origin": "{origin}"' in (tmp_path / "fleet.pin").read_text()
    mistyped = new_database(pg_server, "t_pin_mistyped")
    for target, words in ((mistyped, "holds no gate ledger"), (other, "another ledger")):
        with pytest.raises(LedgerError, match=words):
            Ledger.open(ledger_location(target), key_path=key)
        result = CliRunner().invoke(cli, ["audit", "verify", "--ledger", target])
        assert result.exit_code == 2 and words in result.output, result.output
    with psycopg.connect(mistyped) as conn:  # nothing was created in the mistyped database
        assert conn.execute("SELECT to_regclass('gate_meta')").fetchone() == (None,)
    # emptied by someone who could drop the append-only triggers
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP TRIGGER gate_entries_append_only ON gate_entries")
        conn.execute("DELETE FROM gate_entries")
    with pytest.raises(LedgerError, match=r"holds 0 entries, but .* acknowledged 3"):
        Ledger.open(ledger_location(pg_url), key_path=key)
    _drop(pg_url)  # dropped and re-created empty
    with pytest.raises(LedgerError, match="holds no gate ledger"):
        Ledger.open(ledger_location(pg_url), key_path=key)
    # the origin alone pins it too (what a fleet without a shared pin file keeps in its CI settings)
    monkeypatch.delenv("GATE_LEDGER_PIN")
    monkeypatch.setenv("GATE_LEDGER_ORIGIN", origin)
    with pytest.raises(LedgerError, match=f"holds no gate ledger, but GATE_LEDGER_ORIGIN pins ledger {origin}"):
        Ledger.open(ledger_location(pg_url), key_path=key)


def _verify_many(url: str, n: int) -> list[str]:
    with Ledger.open(ledger_location(url), writable=False) as ledger:
        return [p.message for _ in range(n) for p in verify_chain(ledger, every_checkpoint=False).problems]


def test_readers_beside_concurrent_writers_never_report_a_truncation(
    pg_url: str, key: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GATE_LEDGER_PIN", str(tmp_path / "fleet.pin"))
    sqlite = str(tmp_path / "ledger.sqlite")
    for target in (pg_url, sqlite):
        with Ledger.open(ledger_location(target), key_path=key) as ledger:
            ledger.append("test", {"i": -1})
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(5) as pool:
            writers = [pool.apply_async(_append_many, (target, str(key), 25)) for _ in range(3)]
            readers = [pool.apply_async(_verify_many, (target, 15)) for _ in range(2)]
            assert sorted(s for w in writers for s in w.get(timeout=300)) == list(range(2, 77))
            problems = [m for r in readers for m in r.get(timeout=300)]
        assert problems == [], problems[:3]
