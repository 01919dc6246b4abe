"""--out is checked before anything runs, replaced only by a complete run, and never shows a stale run
as current after an error, SIGTERM, Ctrl-C or SIGKILL; servers gate started are stopped."""

from __future__ import annotations

import errno
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from gate._util import stopping
from gate.cli.main import cli
from gate.engine import runner
from gate.engine.options import RunOptions
from gate.engine.outputs import StagedOutput
from gate.errors import EXIT_INTERRUPTED, EXIT_TERMINATED, OutputError
from tests.support.repo import EXAMPLES

MANIFEST = EXAMPLES / "reference-static-layout.yaml"


def _earlier(out: Path) -> None:
    out.mkdir(parents=True)
    (out / "results.json").write_text('{"earlier": true}\n')


def _run(*args: str) -> object:
    return CliRunner().invoke(cli, ["run", str(MANIFEST), *args])


@pytest.mark.parametrize(
    "make_out",
    [
        pytest.param(lambda tmp: (tmp / "file").write_text("x") and tmp / "file", id="an existing file"),
        pytest.param(lambda tmp: (tmp / "file").write_text("x") and tmp / "file" / "out", id="a path under a file"),
        pytest.param(lambda _tmp: Path("."), id="the working directory"),
    ],
)
def test_a_bad_out_is_refused_before_anything_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_out) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    ran: list[Path] = []
    monkeypatch.setattr(runner, "run_manifest", lambda path, *_args, **_sinks: ran.append(path))
    result = _run("--out", str(make_out(tmp_path)))
    assert result.exit_code == 2, result.output  # type: ignore[attr-defined]
    assert result.output.count("\n") == 1 and result.output.startswith("gate: --out")  # type: ignore[attr-defined]
    assert ran == []


def test_an_out_holding_the_ledger_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = _run("--out", str(out), "--ledger", str(out / "ledger.sqlite"))
    assert result.exit_code == 2 and "holds" in result.output  # type: ignore[attr-defined]


def test_a_low_file_size_limit_is_refused_up_front(tmp_path: Path) -> None:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024 * 1024, resource.RLIM_INFINITY))

    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from gate.cli.main import cli; cli()",
            "run",
            str(MANIFEST),
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        preexec_fn=limit,
    )
    assert proc.returncode == 2, proc.stderr
    assert "file-size limit (ulimit -f) is 1048576 bytes" in proc.stderr and "Traceback" not in proc.stderr


def test_a_complete_run_replaces_out_and_keeps_the_previous_aside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.trust.runs import signed_run  # a real signed dossier without running checks

    out = tmp_path / "out"
    _earlier(out)
    keys = tmp_path / "k"
    CliRunner().invoke(cli, ["keygen", "--out", str(keys)])
    monkeypatch.setattr(
        runner,
        "run_manifest",
        lambda path, out_dir, *_args, **_sinks: signed_run(out_dir, path, Path(f"{keys}.key"))[1],
    )
    result = _run("--out", str(out), "--sign-key", f"{keys}.key")
    assert result.exit_code in (0, 1, 3, 4), result.output  # type: ignore[attr-defined]
    assert (out / "attestation.dsse.json").is_file()
    assert (tmp_path / "out.previous" / "results.json").read_text() == '{"earlier": true}\n'
    assert [p.name for p in tmp_path.iterdir() if ".partial-" in p.name] == []


@pytest.mark.parametrize("failure", ["error", "disk full"])
def test_a_failed_run_leaves_no_stale_dossier(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: str) -> None:
    out = tmp_path / "out"
    _earlier(out)

    def broken(path: Path, out_dir: Path, options: RunOptions, **_sinks: object) -> None:
        (out_dir / "results.json").write_text("{half")
        if failure == "disk full":
            raise OSError(errno.ENOSPC, "No space left on device")
        raise RuntimeError("the adapter blew up")

    monkeypatch.setattr(runner, "run_manifest", broken)
    result = _run("--out", str(out))
    assert not out.exists()  # nothing that `gate verify out` could take for this run
    assert (tmp_path / "out.previous" / "results.json").read_text() == '{"earlier": true}\n'
    assert [p.name for p in tmp_path.iterdir() if ".partial-" in p.name] == []
    if failure == "disk full":
        assert result.exit_code == 2  # type: ignore[attr-defined]
        assert "no space left on the device; nothing was replaced" in result.output  # type: ignore[attr-defined]


SLOW_RUN = """
import signal, subprocess, sys, time
from pathlib import Path
# Ctrl-C reaching a run in the foreground: a shell that starts a job in the background (a CI script's
# `cmd &`) ignores SIGINT for it, and Python keeps an ignored SIGINT ignored, so restore the default
signal.signal(signal.SIGINT, signal.default_int_handler)
from gate._util import stopping
from gate.engine import runner

def slow_run(path, out_dir, options, **sinks):
    server = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "0"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stopping.on_stop(f"test server {server.pid}", lambda: (server.terminate(), server.wait(10)))
    (out_dir / "results.json").write_text("{half")
    print(server.pid, flush=True)
    time.sleep(120)

runner.run_manifest = slow_run
from gate.cli.main import cli
cli(["run", sys.argv[1], "--out", sys.argv[2]])
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


@pytest.mark.parametrize(
    ("sig", "code"),
    [(signal.SIGTERM, EXIT_TERMINATED), (signal.SIGINT, EXIT_INTERRUPTED), (signal.SIGKILL, -signal.SIGKILL)],
    ids=["SIGTERM", "SIGINT", "SIGKILL"],
)
def test_a_signal_stops_the_run_and_its_server_and_leaves_no_stale_dossier(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    out = tmp_path / "out"
    _earlier(out)
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_RUN, str(MANIFEST), str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    server = int(proc.stdout.readline())
    started = time.monotonic()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert time.monotonic() - started < 15  # promptly
    assert "Traceback" not in err
    assert not out.exists()
    assert (tmp_path / "out.previous" / "results.json").read_text() == '{"earlier": true}\n'
    partial = [p for p in tmp_path.iterdir() if ".partial-" in p.name]
    if sig == signal.SIGKILL:  # nothing can run on SIGKILL: the next run clears what is left
        os.kill(server, signal.SIGKILL)
        assert len(partial) == 1
        StagedOutput(out).begin()
        assert [p for p in tmp_path.iterdir() if p in partial] == []
        return
    assert partial == []
    for _ in range(100):
        if not _alive(server):
            break
        time.sleep(0.05)
    assert not _alive(server), "the server gate started is still running"


def test_stoppers_run_once_newest_first_and_a_failing_one_does_not_stop_the_others() -> None:
    order: list[str] = []
    first = stopping.on_stop("first", lambda: order.append("first"))
    stopping.on_stop("broken", lambda: 1 / 0)
    stopping.on_stop("last", lambda: order.append("last"))
    assert stopping.stop_all() == ["last", "broken", "first"]
    assert order == ["last", "first"] and stopping.pending() == []
    first.stop()
    assert order == ["last", "first"]


def test_staged_output_refuses_a_file_and_keeps_inputs_out(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(OutputError, match="is a file"):
        StagedOutput(tmp_path / "f").check()
    with pytest.raises(OutputError, match="which a run needs"):
        StagedOutput(tmp_path, keep=[tmp_path / "m.yaml"]).check()
