"""The openai adapter's options: one way to reach a server, controls only with a launch, no secrets,
and the vLLM manifest of docs/engines.md validates and plans unchanged."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from gate.adapters.openai import Options
from gate.cli.main import cli
from tests.support.repo import REPO

LAUNCH = {"command": ["llama-server", "-m", "{model}", "--port", "{port}"], "tiny_model": {"seed": 0}}


def test_exactly_one_way_to_reach_the_server() -> None:
    with pytest.raises(ValueError, match="exactly one of base_url"):
        Options.model_validate({})
    with pytest.raises(ValueError, match="exactly one of base_url"):
        Options.model_validate({"base_url": "http://127.0.0.1:8000", "launch": LAUNCH})
    with pytest.raises(ValueError, match="controls are launch configurations"):
        Options.model_validate({"base_url": "http://127.0.0.1:8000", "controls": {"x": {"args": ["-a"]}}})
    with pytest.raises(ValueError, match="uses \\{model\\}"):
        Options.model_validate({"launch": {"command": ["llama-server", "-m", "{model}"]}})
    assert Options.model_validate({"launch": LAUNCH}).launch is not None


@pytest.mark.parametrize("engine", ["vllm"])
def test_the_documented_gpu_manifest_validates_and_plans(engine: str, tmp_path: Path) -> None:
    doc = (REPO / "docs/engines.md").read_text()
    block = re.search(r"```yaml\n(# gate-expect: pass\n.*?)```", doc, re.S)
    assert block is not None and f"flavor: {engine}" in block.group(1)
    manifest = tmp_path / f"{engine}.yaml"
    manifest.write_text(block.group(1))
    for command in ("validate", "plan"):
        result = CliRunner().invoke(cli, [command, str(manifest)])
        assert result.exit_code == 0, result.output


def test_the_documented_hosted_manifest_validates_and_plans(tmp_path: Path) -> None:
    doc = (REPO / "docs/engines.md").read_text()
    block = re.search(r"```yaml\n(# gate-expect: pass\n[^`]*?intervention: hosted-cache.*?)```", doc, re.S)
    assert block is not None
    manifest = tmp_path / "hosted.yaml"
    manifest.write_text(block.group(1))
    for command in ("validate", "plan"):
        result = CliRunner().invoke(cli, [command, str(manifest)])
        assert result.exit_code == 0, result.output
    assert "engine-repeat-consistency" in result.output
