"""Reliability trials (slow; `.ci/postgres.sh` runs them with GATE_RELIABILITY=1).

- kill -9 at a random moment of a process appending to the SQLite ledger: every entry it had
  acknowledged is still there and the chain verifies;
- the WAL deleted at a random moment under a process appending: nothing acknowledged is lost, or
  the loss is named (never a ledger that silently lost entries and still verifies);
- kill -9 at a random moment of a process doing `gate run` after `gate run`: `--out` is absent or
  holds the run that was in progress, complete and valid, never the previous one;
- concurrent writers on SQLite and on PostgreSQL: none lost, none duplicated.

Each trial adds its counts to $GATE_RELIABILITY_FIGURES (JSON) when set; docs/reliability.md quotes them.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gate.trust.keys import write_keypair
from gate.trust.ledger import Ledger, LedgerError
from gate.trust.ledger_store import ledger_location
from gate.trust.ledger_verify import verify_chain
from tests.support.postgres import new_database
from tests.support.repo import EXAMPLES, REPO

pytestmark = pytest.mark.reliability
TRIALS = int(os.environ.get("GATE_TRIALS", "12"))


def _record(name: str, **counts: int) -> None:
    target = os.environ.get("GATE_RELIABILITY_FIGURES")
    if not target:
        return
    path = Path(target)
    figures = json.loads(path.read_text()) if path.is_file() else {}
    entry = figures.setdefault(name, {})
    for key, value in counts.items():
        entry[key] = entry.get(key, 0) + value
    path.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")


APPENDER = """
import sys
from pathlib import Path
from gate.trust.ledger import Ledger
with Ledger.open(Path(sys.argv[1])) as ledger:
    for i in range(100000):
        entry, _ = ledger.append("trial", {"i": i, "pad": "x" * 200})
        print(entry.seq, flush=True)  # acknowledged: append returned
"""


def _appender(ledger: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", APPENDER, str(ledger)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )


def _acknowledged(proc: subprocess.Popen[str]) -> int:
    out, _ = proc.communicate(timeout=60)
    seqs = [int(line) for line in out.split()]
    return max(seqs, default=0)


def test_kill_9_during_append_loses_no_acknowledged_entry(tmp_path: Path) -> None:
    rng = random.Random(16)
    acknowledged_total = lost = verified = 0
    for trial in range(TRIALS):
        ledger = tmp_path / f"t{trial}" / "ledger.sqlite"
        proc = _appender(ledger)
        time.sleep(rng.uniform(0.6, 2.5))
        proc.send_signal(signal.SIGKILL)
        acked = _acknowledged(proc)
        if acked == 0:  # killed while creating the ledger: nothing acknowledged, and the next open completes it
            if not ledger.is_file():
                continue
            try:
                Ledger.open(ledger, writable=False).close()
            except LedgerError as err:
                assert "not a gate ledger" in str(err)
                Ledger.open(ledger).close()
        with Ledger.open(ledger, writable=False) as opened:
            report = verify_chain(opened)
            lost += max(0, acked - opened.size())
            assert report.ok, (trial, report.problems)
            assert opened.size() >= acked, (trial, opened.size(), acked)
        with Ledger.open(ledger) as reopened:  # and it takes the next append
            reopened.append("trial", {"after": trial})
        acknowledged_total += acked
        verified += 1
    _record(
        "kill -9 during append (SQLite)",
        trials=TRIALS,
        acknowledged=acknowledged_total,
        lost=lost,
        states_verified=verified,
    )


def test_a_wal_deleted_during_append_loses_nothing_acknowledged(tmp_path: Path) -> None:
    rng = random.Random(1616)
    acknowledged_total = stopped = lost = verified = 0
    for trial in range(TRIALS):
        ledger = tmp_path / f"t{trial}" / "ledger.sqlite"
        proc = _appender(ledger)
        time.sleep(rng.uniform(0.6, 2.5))
        Path(f"{ledger}-wal").unlink(missing_ok=True)
        time.sleep(0.3)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        else:
            stopped += 1  # the appender noticed and stopped with one line
        out, err = proc.communicate(timeout=60)
        acked = max((int(x) for x in out.split()), default=0)
        if proc.returncode != -signal.SIGKILL:
            assert "was removed while the ledger was open" in err, err[-500:]
        try:
            with Ledger.open(ledger, writable=False) as opened:
                report = verify_chain(opened)
                size = opened.size()
        except LedgerError as named:  # the loss is named, never silent
            pytest.fail(f"trial {trial}: {named}")
        lost += max(0, acked - size)
        assert report.ok, (trial, report.problems)
        assert size >= acked, (trial, size, acked)
        acknowledged_total += acked
        verified += 1
    _record(
        "WAL deleted during append (SQLite)",
        trials=TRIALS,
        acknowledged=acknowledged_total,
        lost=lost,
        writer_stopped_itself=stopped,
        states_verified=verified,
    )


RUNNER = """
import sys
from pathlib import Path
from gate.engine import runner
from gate.engine.pipeline import run_pipeline
from tests.trust.runs import signed_run

key = Path(sys.argv[3])
runner.run_manifest = lambda path, out_dir, *_args, **_sinks: signed_run(out_dir, path, key)[1]
base = Path(sys.argv[1]).read_text()
for k in range(1, 100000):
    manifest = Path(sys.argv[4]) / f"m{k % 2}.yaml"
    manifest.write_text(base.replace("Expected verdict", f"Run {k}. Expected verdict"))
    print("START", k, flush=True)
    run_pipeline(manifest, sys.argv[2], sign_key=key)
    print("DONE", k, flush=True)
"""


def test_kill_9_during_run_never_leaves_a_previous_run_as_current(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from gate.cli.main import cli

    rng = random.Random(160)
    keys = tmp_path / "k"
    write_keypair(Path(f"{keys}.key"), Path(f"{keys}.pub"))
    absent = complete = stale = not_begun = 0
    for trial in range(TRIALS):
        work = tmp_path / f"t{trial}"
        work.mkdir()
        out = work / "out"
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                RUNNER,
                str(EXAMPLES / "reference-static-layout.yaml"),
                str(out),
                f"{keys}.key",
                str(work),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        time.sleep(rng.uniform(3.0, 8.0))
        proc.send_signal(signal.SIGKILL)
        stdout, _ = proc.communicate(timeout=60)
        started = [int(line.split()[1]) for line in stdout.splitlines() if line.startswith("START")]
        assert started, "no run started"
        current = started[-1]
        began = any(p.name.startswith(f".out.partial-{proc.pid}-") for p in work.iterdir()) or not out.exists()
        if out.exists() and f"Run {current}." not in (out / "results.json").read_text() and not began:
            not_begun += 1  # killed before run `current` reached --out (its up-front checks): nothing moved yet
            continue
        if not out.exists():
            absent += 1
            continue
        verified = CliRunner().invoke(cli, ["verify", str(out), "--run-key", f"{keys}.pub"])
        assert verified.exit_code == 0, (trial, verified.output)
        description = json.loads((out / "results.json").read_text())["manifest"]["description"]
        stale += f"Run {current}." not in description
        assert f"Run {current}." in description, (trial, current, description)  # never the previous run
        complete += 1
    _record(
        "kill -9 during gate run",
        trials=TRIALS,
        killed_before_begin=not_begun,
        out_absent=absent,
        out_current_and_valid=complete,
        stale=stale,
    )


def _writer(location: str, key: str, n: int) -> list[int]:
    with Ledger.open(ledger_location(location), key_path=Path(key)) as ledger:
        return [ledger.append("concurrent", {"i": i})[0].seq for i in range(n)]


WRITERS, APPENDS = 8, 40


def _concurrent_writers(location: str, key: Path, backend: str) -> None:
    """WRITERS processes append APPENDS entries each: every seq once, the chain verifies."""
    Ledger.open(ledger_location(location), key_path=key).close()
    with multiprocessing.get_context("spawn").Pool(WRITERS) as pool:
        acked = pool.starmap(_writer, [(location, str(key), APPENDS)] * WRITERS)
    seqs = sorted(s for batch in acked for s in batch)
    _record(
        f"concurrent writers ({backend})",
        writers=WRITERS,
        appends=WRITERS * APPENDS,
        lost=WRITERS * APPENDS - len(set(seqs)),
        duplicated=len(seqs) - len(set(seqs)),
    )
    assert seqs == list(range(1, WRITERS * APPENDS + 1))
    with Ledger.open(ledger_location(location), writable=False) as ledger:
        assert ledger.size() == WRITERS * APPENDS and verify_chain(ledger).ok


def _key(tmp_path: Path) -> Path:
    write_keypair(tmp_path / "ledger.key", tmp_path / "ledger.pub")
    return tmp_path / "ledger.key"


def test_concurrent_writers_on_sqlite(tmp_path: Path) -> None:
    _concurrent_writers(str(tmp_path / "ledger.sqlite"), _key(tmp_path), "SQLite")


def test_concurrent_writers_on_postgresql(tmp_path: Path, pg_server: str) -> None:
    _concurrent_writers(new_database(pg_server, "concurrent"), _key(tmp_path), "PostgreSQL")
