"""A real plugin package (tests/plugins/gate-plugin-finite), installed by `make test`, is discovered
through its entry point, required by a site policy directory, and run by `gate run`."""

from __future__ import annotations

import json
from importlib.metadata import distribution
from pathlib import Path

from click.testing import CliRunner

from gate._util.resources import data_dir
from gate.cli.main import cli
from gate.core.registry import check_names

FIXTURES = Path(__file__).parent


def test_plugin_is_installed_as_a_package_and_discovered() -> None:
    dist = distribution("gate-plugin-finite")
    assert any(ep.group == "gate.checks" and ep.name == "finite-logits" for ep in dist.entry_points)
    assert "finite-logits" in check_names()


def test_plugin_check_runs_with_its_negative_control(tmp_path: Path) -> None:
    manifest = data_dir("examples") / "reference-static-layout.yaml"
    text = manifest.read_text().replace("level: exact", "level: tolerance")
    local = tmp_path / "layout-tolerance.yaml"
    local.write_text(text)
    plan = CliRunner().invoke(
        cli, ["plan", str(local), "--policy-dir", str(FIXTURES / "policy-plugin"), "--format", "json"]
    )
    assert plan.exit_code == 0, plan.output
    assert "finite-logits" in [c["check"] for c in json.loads(plan.output)["checks"]]
    out = tmp_path / "out"
    result = CliRunner().invoke(
        cli, ["run", str(local), "--out", str(out), "--policy-dir", str(FIXTURES / "policy-plugin")]
    )
    record = json.loads((out / "results.json").read_text())
    finite = next(c for c in record["checks"] if c["check"] == "finite-logits")
    assert finite["status"] == "pass", finite["message"]
    assert finite["exercise"]["cached_steps"] > 0
    (control,) = finite["controls"]
    assert control["fault"] == "poisoned-tail-read" and control["outcome"] == "detected"
    assert result.exit_code in (0, 1), result.output
