"""Row "the Action never merges two runs" (docs/security.md): two manifests whose file names meet in one
output folder (gate/a/m.yaml failing, gate/b/m.yaml passing) would share gate-out/m/, and the failing
run's verdict would be lost under the passing one's. The run step refuses them before anything runs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.security.play import FAILING, PASSING, action_step


def _workspace(tmp: Path, layout: dict[str, Path]) -> Path:
    for name, source in layout.items():
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, tmp / name)
    return tmp


@pytest.mark.parametrize("jobs", [1, 2])
def test_two_manifests_with_one_file_name_are_refused(tmp_path: Path, gate_bin: Path, jobs: int) -> None:
    ws = _workspace(tmp_path, {"gate/a/m.yaml": FAILING, "gate/b/m.yaml": PASSING})
    rc, log, outputs, out = action_step(ws, gate_bin, "gate/a/m.yaml gate/b/m.yaml", jobs=jobs)
    assert rc == 2, log
    refusal = [line for line in log.splitlines() if line.startswith("::error")]
    assert len(refusal) == 1 and "gate/a/m.yaml" in refusal[0] and "gate/b/m.yaml" in refusal[0], log
    assert "pass" not in outputs  # no verdict speaks for either run
    assert not (out / "m").exists()  # refused before anything ran


def test_a_name_that_meets_another_runs_kept_previous_is_refused(tmp_path: Path, gate_bin: Path) -> None:
    """gate keeps a run's older output in <name>.previous/: a manifest named m.previous would be deleted
    by m's run, or delete it."""
    ws = _workspace(tmp_path, {"gate/m.yaml": PASSING, "gate/m.previous.yaml": FAILING})
    rc, log, _outputs, _out = action_step(ws, gate_bin, "gate/m.yaml gate/m.previous.yaml", jobs=2)
    assert rc == 2 and "gate/m.yaml and gate/m.previous.yaml would share" in log.replace(
        "gate/m.previous.yaml and gate/m.yaml", "gate/m.yaml and gate/m.previous.yaml"
    ), log


def test_distinct_names_still_run_and_the_failure_stands(tmp_path: Path, gate_bin: Path) -> None:
    ws = _workspace(tmp_path, {"gate/a/failing.yaml": FAILING, "gate/b/passing.yaml": PASSING})
    rc, log, outputs, out = action_step(
        ws, gate_bin, "gate/a/failing.yaml gate/b/passing.yaml", jobs=2, GATE_ARGS="--check greedy-parity"
    )
    assert rc == 1, log  # the failure stands (the other, one check alone, is a partial run)
    assert "verdicts=failing=fail passing=partial" in outputs
    assert (out / "failing" / "results.json").is_file() and (out / "passing" / "results.json").is_file()
