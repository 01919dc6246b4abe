"""Helpers of the attack tests: gate as a PR job runs it (a real process, this tree's code) and the
Action's run step."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).parents[2]
RUN_SH = ROOT / "action" / "run.sh"
PASSING = ROOT / "examples" / "reference-static-layout.yaml"
"""A cheap reference example that passes (a few seconds on one CPU thread)."""
FAILING = ROOT / "examples" / "reference-fault-missing-start-pos.yaml"
"""A cheap reference example that fails (a planted missing start position)."""


def gate_env(**extra: str) -> dict[str, str]:
    """The environment a CI step gives gate: this tree first on the path, one thread, no CI variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "GATE_"))}
    env.update(PYTHONPATH=str(ROOT), GATE_THREADS="1", OMP_NUM_THREADS="1", **extra)
    return env


def copy_dossier(dossier: Path, to: Path) -> Path:
    to.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(dossier, to)
    return to


def action_step(workspace: Path, gate: Path, manifests: str, jobs: int = 1, **env: str) -> tuple[int, str, str, Path]:
    """Run the Action's run step (action/run.sh) in `workspace` as GitHub would: returns its exit code,
    its log, the step outputs it wrote ($GITHUB_OUTPUT) and the out-dir."""
    outputs, summary, out = workspace / "outputs.txt", workspace / "summary.md", workspace / "gate-out"
    outputs.write_text("")
    summary.write_text("")
    done = subprocess.run(
        [str(RUN_SH)],
        cwd=workspace,
        env=gate_env(
            GITHUB_ACTIONS="true",
            GITHUB_WORKSPACE=str(workspace),
            GITHUB_OUTPUT=str(outputs),
            GITHUB_STEP_SUMMARY=str(summary),
            GATE_BIN=str(gate),
            GATE_OUT=str(out),
            GATE_MANIFESTS=manifests,
            GATE_JOBS=str(jobs),
            **env,
        ),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr, outputs.read_text(), out
