"""Row "signals leave no stale verdict" (docs/security.md): a run stopped by SIGTERM (a cancelled CI job)
must not leave the previous run's dossier in --out, where a later step would read its verdict as this
run's. The previous run is moved aside to <out>.previous/ before anything runs, and kept whole there."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.security.play import FAILING, PASSING, RUN_SH, copy_dossier, gate_env

VERDICT_FILES = ("results.json", "dossier.md", "dossier.html", "junit.xml")


def _wait_for(path: Path, text: str, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        assert proc.poll() is None, f"ended ({proc.returncode}) before {text!r}: {path.read_text()}"
        time.sleep(0.05)
    raise AssertionError(f"{text!r} never appeared in {path}")


def _assert_no_verdict(out: Path) -> None:
    held = [name for name in VERDICT_FILES if (out / name).exists()] if out.exists() else []
    assert held == [], f"--out still holds {held} after the stopped run"


def test_sigterm_mid_run_leaves_no_verdict_in_out(tmp_path: Path, passing_dossier: Path) -> None:
    out = copy_dossier(passing_dossier, tmp_path / "out")  # a complete earlier run: pass
    log = tmp_path / "log"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gate", "run", str(FAILING), "--out", str(out)],
            env=gate_env(),
            stdout=sink,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            _wait_for(log, "[gate] check ", proc)  # checks are running
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == 143, log.read_text()
        finally:
            proc.kill()
    _assert_no_verdict(out)
    kept = Path(f"{out}.previous")
    assert json.loads((kept / "results.json").read_text())["verdict"] == "pass"  # nothing lost
    assert (kept / "dossier.md").read_bytes() == (passing_dossier / "dossier.md").read_bytes()


def test_a_cancelled_action_step_leaves_no_later_manifests_old_verdict(
    tmp_path: Path, gate_bin: Path, passing_dossier: Path
) -> None:
    """jobs: 1, the step cancelled while the first manifest runs: the second never ran, and its older
    output (a pass) must not stand in gate-out/second/ for a later `if: always()` step to read."""
    (tmp_path / "gate").mkdir()
    (tmp_path / "gate" / "first.yaml").write_bytes(FAILING.read_bytes())
    (tmp_path / "gate" / "second.yaml").write_bytes(PASSING.read_bytes())
    gate_out = tmp_path / "gate-out"
    copy_dossier(passing_dossier, gate_out / "second")
    env = gate_env(GATE_BIN=str(gate_bin), GATE_OUT=str(gate_out), GATE_MANIFESTS="gate/first.yaml gate/second.yaml")
    proc = subprocess.Popen([str(RUN_SH)], cwd=tmp_path, env=env, start_new_session=True, text=True)
    try:
        _wait_for(gate_out / "first.action" / "log", "[gate] check ", proc)
        os.killpg(proc.pid, signal.SIGTERM)  # a runner cancelling the job signals the step's processes
        proc.wait(60)
    finally:
        with contextlib.suppress(ProcessLookupError):  # whatever of the step is left
            os.killpg(proc.pid, signal.SIGKILL)
    _assert_no_verdict(gate_out / "first")
    _assert_no_verdict(gate_out / "second")
    assert json.loads((gate_out / "second.previous" / "results.json").read_text())["verdict"] == "pass"
