"""The gate Action's run step (action/run.sh) over several manifests, with a stand-in for `gate`
that prints and writes what a run does (the real runs are .ci/action.sh): `jobs` runs them at once
with logs kept in manifest order, at most ten error annotations over the whole step with the rest
counted in a notice and listed in the job summary's table, a bad manifest annotated at its file and
line, and the approval state of an awaiting run in the summary."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

RUN = Path(__file__).parents[2] / "action" / "run.sh"

FAKE = """#!/usr/bin/env bash
m=$2; out=$4; name=$(basename "$m" .yaml)
case $name in
  many-*) for i in 1 2 3 4 5 6; do
            echo "::error file=k.py,title=gate check-$i FAIL (step 4)::bad $i" >> "$GATE_ANNOTATIONS"; done
          echo "::notice title=gate verdict::FAIL $name" >> "$GATE_ANNOTATIONS"
          mkdir -p "$out"; echo '{"verdict": "fail"}' > "$out/results.json"
          echo "## FAIL $name" >> "$GITHUB_STEP_SUMMARY"; echo "log of $name"; exit 1;;
  bad) echo "gate: $m:4:3: claim: Input tag 'exakt' does not match"; exit 2;;
  wait) mkdir -p "$out"; echo '{"verdict": "awaiting-approval"}' > "$out/results.json"
        echo "## AWAITING $name" >> "$GITHUB_STEP_SUMMARY"; exit 4;;
  ok) mkdir -p "$out"; echo '{"verdict": "pass"}' > "$out/results.json"; echo "## PASS" >> "$GITHUB_STEP_SUMMARY";;
  warned) mkdir -p "$out"
          printf '{"verdict": "pass", "summary": "%s"}' "7 passed, 1 warning (phase-performance live_bytes x73)" \\
            > "$out/results.json";;
esac
"""


def step(tmp: Path, manifests: str, **env: str) -> tuple[int, str, str]:
    fake = tmp / "gate"
    fake.write_text(FAKE)
    fake.chmod(0o755)
    summary = tmp / "summary.md"
    summary.write_text("")
    done = subprocess.run(
        [str(RUN)],
        env={
            **os.environ,
            "GITHUB_ACTIONS": "true",
            "GITHUB_STEP_SUMMARY": str(summary),
            "GATE_BIN": str(fake),
            "GATE_OUT": str(tmp / "out"),
            "GATE_MANIFESTS": manifests,
            **env,
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, done.stdout, summary.read_text()


def test_ten_errors_per_step_the_rest_in_the_summary(tmp_path: Path) -> None:
    rc, out, summary = step(tmp_path, "g/many-a.yaml g/many-b.yaml g/ok.yaml", GATE_JOBS="2")
    assert rc == 1
    errors = [line for line in out.splitlines() if line.startswith("::error")]
    assert len(errors) == 10  # GitHub's cap per step, over both manifests
    assert "::notice title=gate: annotations capped::" in out and "2 more failing checks" in out
    assert out.index("log of many-a") < out.index("log of many-b")  # manifest order, though run at once
    assert "| `g/many-b.yaml` | fail | n/a | check-1 FAIL (step 4)" in summary and "check-6" in summary
    assert "2 more failing checks are annotated only here" in summary
    assert summary.index("## gate: 3 manifest(s)") < summary.index("## FAIL many-a") < summary.index("## PASS")


def test_a_bad_manifest_is_annotated_at_its_file_and_line(tmp_path: Path) -> None:
    rc, out, summary = step(tmp_path, "g/bad.yaml")
    assert rc == 2
    assert "::error file=g/bad.yaml,line=4,col=3,title=gate: bad manifest::claim: Input tag 'exakt'" in out
    assert "| `g/bad.yaml` | bad-input | n/a | bad input: g/bad.yaml:4:3: claim:" in summary


def test_the_summary_shows_the_approval_state(tmp_path: Path) -> None:
    rc, _out, summary = step(tmp_path, "g/wait.yaml g/ok.yaml")
    assert rc == 0  # neutral by default
    assert "| `g/wait.yaml` | awaiting-approval | awaiting: `gate approve" in summary
    assert "| `g/ok.yaml` | pass | not needed | none |" in summary


def test_the_summary_counts_the_warnings_of_a_verdict_that_held(tmp_path: Path) -> None:
    rc, _out, summary = step(tmp_path, "g/warned.yaml g/ok.yaml")
    assert rc == 0
    assert "| `g/warned.yaml` | pass, 1 warning | not needed | none |" in summary
    assert "| `g/ok.yaml` | pass | not needed | none |" in summary


def test_jobs_must_be_a_positive_integer(tmp_path: Path) -> None:
    rc, out, _ = step(tmp_path, "g/ok.yaml", GATE_JOBS="zero")
    assert rc == 2 and "jobs must be a positive integer" in out
