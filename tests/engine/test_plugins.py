"""A real plugin package (tests/plugins/gate-plugin-finite), installed by `make test`, is discovered
through its entry point, required by a site policy directory, and run by `gate run`."""

from __future__ import annotations

import json
from importlib.metadata import distribution
from pathlib import Path

import pytest
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


def _fake_distribution(root: Path, name: str, target: str) -> None:
    info = root / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[gate.checks]\nprefix-sweep = {target}\n")


def test_two_distributions_registering_one_check_name_is_an_error_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gate.core import registry
    from gate.errors import UnavailableError

    _fake_distribution(tmp_path / "a", "gate-plugin-shadow", "shadow_pkg:prefix_sweep")
    monkeypatch.syspath_prepend(str(tmp_path / "a"))
    registry._group.cache_clear()
    try:
        with pytest.raises(UnavailableError, match="registered twice") as err:
            registry.check_names()
        assert "gate-plugin-shadow 1.0" in str(err.value) and "decode-gate" in str(err.value)
    finally:
        monkeypatch.undo()
        registry._group.cache_clear()


def test_one_object_seen_through_two_path_entries_is_one_registration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gate.core import registry

    value = registry.entry_point_of("gate.checks", "prefix-sweep")
    assert value is not None
    _fake_distribution(tmp_path / "b", "decode-gate", value.value)
    monkeypatch.syspath_prepend(str(tmp_path / "b"))
    registry._group.cache_clear()
    try:
        assert "prefix-sweep" in registry.check_names()
    finally:
        monkeypatch.undo()
        registry._group.cache_clear()
