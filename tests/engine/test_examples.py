"""Every example validates and plans; every intervention has one; `gate plan` explains each.

Every example opens with `# gate-expect: VERDICT`, its documented verdict on a CPU in the main
environment; `benchmarks/examples.py` runs them and compares (CI: .ci/examples.sh, the reference set). An
example whose header says `rejected` documents a manifest the policy must reject before anything
runs (an over-claim): it must fail validation with exit 2.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from gate._util.resources import data_dir
from gate.cli.main import cli
from gate.core.manifest import Intervention

EXAMPLES = sorted(data_dir("examples").glob("*.yaml"))


VERDICTS = ("pass", "fail", "unproven", "awaiting-approval", "rejected", "error")


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_documents_its_verdict(path: Path) -> None:
    first = path.read_text().split("\n", 1)[0]
    assert first.startswith("# gate-expect: "), f"{path.name}: first line must be '# gate-expect: VERDICT'"
    assert first.removeprefix("# gate-expect: ").strip() in VERDICTS, first


RELEASE_LINE = re.compile(r"^# gate-expect \(transformers (5\.\d+)(?:-(5\.\d+))?\): (\S+)")


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_per_release_verdicts_name_releases_in_range(path: Path) -> None:
    """`# gate-expect (transformers X.Y[-X.Z]): VERDICT` lines (benchmarks/examples.py and
    releases.py read them) parse, name a known verdict and a range inside >=5.2,<6, and do not
    overlap: one documented verdict per release."""
    seen: set[int] = set()
    for line in path.read_text().split("\n"):
        if not line.startswith("#"):
            break
        if not line.startswith("# gate-expect ("):
            continue
        found = RELEASE_LINE.match(line)
        assert found, f"{path.name}: unreadable per-release verdict line {line!r}"
        low, high = (int(v.split(".")[1]) for v in (found.group(1), found.group(2) or found.group(1)))
        assert 2 <= low <= high and found.group(3) in VERDICTS, line
        minors = set(range(low, high + 1))
        assert not minors & seen, f"{path.name}: releases documented twice: {sorted(minors & seen)}"
        seen |= minors


def _rejected(path: Path) -> bool:
    return path.read_text().startswith("# gate-expect: rejected")


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_validates_and_plans(path: Path) -> None:
    validate = CliRunner().invoke(cli, ["validate", str(path)])
    plan = CliRunner().invoke(cli, ["plan", str(path)])
    if _rejected(path):
        assert validate.exit_code == 2 and plan.exit_code == 2, validate.output
        assert "cannot claim" in plan.output or "identity must declare" in plan.output
        return
    assert validate.exit_code == 0, validate.output
    assert plan.exit_code == 0, plan.output
    assert "[NOT AVAILABLE]" not in plan.output
    assert "why:" in plan.output


def test_every_intervention_has_an_example_that_plans() -> None:
    import yaml

    covered = {yaml.safe_load(p.read_text())["intervention"] for p in EXAMPLES if not _rejected(p)}
    assert covered >= {i.value for i in Intervention}
