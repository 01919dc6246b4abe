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


def test_the_documented_hosted_manifest_validates_and_plans(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = (REPO / "docs/engines.md").read_text()
    block = re.search(r"```yaml\n(# gate-expect: pass\n[^`]*?intervention: hosted-cache.*?)```", doc, re.S)
    assert block is not None
    manifest = tmp_path / "hosted.yaml"
    manifest.write_text(block.group(1))
    monkeypatch.delenv("GATE_HEADER_ENV", raising=False)
    refused = CliRunner().invoke(cli, ["validate", str(manifest)])  # its header names a variable no site allowed
    assert refused.exit_code == 2 and "GATE_HEADER_ENV" in refused.output, refused.output
    assert "GATE_HEADER_ENV=HOSTED_API_TOKEN" in doc  # the docs say how a site allows it
    monkeypatch.setenv("GATE_HEADER_ENV", "HOSTED_API_TOKEN")
    for command in ("validate", "plan"):
        result = CliRunner().invoke(cli, [command, str(manifest)])
        assert result.exit_code == 0, result.output
    assert "engine-repeat-consistency" in result.output


def test_a_vllm_subject_without_a_vocabulary_size_is_a_validate_error_naming_the_option(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="vocab_size: vLLM does not state its vocabulary size"):
        Options.model_validate({"flavor": "vllm", "base_url": "http://127.0.0.1:8000"})
    with pytest.raises(ValueError, match="vocab_size"):  # the flavor named by the launch command
        Options.model_validate({"launch": {"command": ["vllm", "serve", "{model}"], "model_file": str(tmp_path)}})
    (tmp_path / "config.json").write_text('{"vocab_size": 1000}')  # a model directory that states it
    Options.model_validate({"launch": {"command": ["vllm", "serve", "{model}"], "model_file": str(tmp_path)}})
    Options.model_validate({"flavor": "vllm", "base_url": "http://127.0.0.1:8000", "vocab_size": 1000})
    Options.model_validate({"launch": {"command": ["vllm", "serve", "{model}"], "tiny_model": {"format": "hf"}}})
    manifest = (REPO / "examples/engine-vllm-prefix.yaml").read_text().replace("tiny_model: {format: hf, seed: 0}", "")
    bad = tmp_path / "no-vocab.yaml"
    bad.write_text(manifest.replace('--model, "{model}"', "--model, some/model"))
    result = CliRunner().invoke(cli, ["validate", str(bad)])
    assert result.exit_code == 2 and "vocab_size" in result.output, result.output


def test_tiny_model_options_name_their_shape() -> None:
    with pytest.raises(ValueError, match="multiple of n_head_kv"):
        Options.model_validate({"launch": {**LAUNCH, "tiny_model": {"n_head": 4, "n_head_kv": 3}}})
    gemma2 = Options.model_validate({"launch": {**LAUNCH, "tiny_model": {"sliding_window": 64}}})  # a gemma2 GGUF
    assert gemma2.launch is not None and gemma2.launch.tiny_model is not None
    hf = {"format": "hf", "sliding_window": 64, "sliding_layers": [0], "n_head": 4, "n_head_kv": 2}
    assert Options.model_validate({"launch": {**LAUNCH, "tiny_model": hf}}).launch is not None
