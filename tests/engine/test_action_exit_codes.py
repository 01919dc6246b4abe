"""The Action's run step (action/run.sh) tells "broken" (1) from "could not prove" (6): each exit code
maps to its verdict, both fail the job, and the worst run is chosen by verdict precedence."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.repo import REPO

FAKE_GATE = """#!/usr/bin/env bash
# a stand-in for `gate run MANIFEST --out DIR`: exits with the code the manifest's name carries
name=$(basename "$2"); code=${name%.yaml}; code=${code#rc}
exit "$code"
"""


def action(tmp: Path, *codes: int) -> tuple[int, str, str]:
    gate = tmp / "gate"
    gate.write_text(FAKE_GATE)
    gate.chmod(0o755)
    manifests = []
    for code in codes:
        manifest = tmp / f"rc{code}.yaml"
        manifest.write_text("")
        manifests.append(str(manifest))
    outputs = tmp / "github-output"
    env = {
        **os.environ,
        "GATE_BIN": str(gate),
        "GATE_OUT": str(tmp / "out"),
        "GATE_MANIFESTS": " ".join(manifests),
        "GITHUB_OUTPUT": str(outputs),
    }
    env.pop("GITHUB_BASE_REF", None)
    run = subprocess.run(["bash", str(REPO / "action" / "run.sh")], env=env, capture_output=True, text=True)
    return run.returncode, run.stdout, outputs.read_text()


@pytest.mark.parametrize("code, verdict", [(0, "pass"), (1, "fail"), (5, "partial"), (6, "unproven")])
def test_each_exit_code_names_its_verdict(tmp_path: Path, code: int, verdict: str) -> None:
    rc, stdout, outputs = action(tmp_path, code)
    assert rc == code
    assert (
        f"rc{code}={verdict}" in outputs
        and f"-> {verdict} (job outcome: {'success' if code == 0 else 'failure'})" in stdout
    )


def test_a_failure_outranks_unproven_whatever_the_numbers(tmp_path: Path) -> None:
    rc, _stdout, outputs = action(tmp_path, 6, 1, 0)
    assert rc == 1 and "exit-code=1" in outputs
    rc, _stdout, outputs = action(tmp_path, 0, 6, 5)
    assert rc == 6 and "exit-code=6" in outputs
