"""The vocabulary size and context length a model states (a directory's config.json, a GGUF file's
header), used where the engine states none; where still nothing gives the vocabulary of a vLLM
subject, `gate validate` names the option (file, line, field) and exits 2."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gate.adapters.openai import Options, model_context_length, model_vocab_size
from gate.adapters.openai.model_meta import read_model_meta
from gate.adapters.openai.path import EnginePath
from gate.cli.main import cli
from tests.support.repo import REPO

SERVER = str(Path(__file__).with_name("misbehaving_server.py"))


def test_a_gguf_header_and_a_config_json_state_vocabulary_and_context(tmp_path: Path) -> None:
    pytest.importorskip("gguf")
    from gate.models.tiny_gguf import TinyLlamaSpec, write_tiny_gguf

    write_tiny_gguf(tmp_path / "m.gguf", TinyLlamaSpec(vocab_size=300, context_length=1024))
    write_tiny_gguf(tmp_path / "swa.gguf", TinyLlamaSpec(sliding_window=64, context_length=2048))
    meta = read_model_meta(tmp_path / "m.gguf")
    assert (meta.vocab_size, meta.context_length) == (300, 1024)
    swa = read_model_meta(tmp_path / "swa.gguf")  # gemma2: the keys are named by the architecture
    assert (swa.vocab_size, swa.context_length) == (512, 2048)
    model = tmp_path / "hf"
    model.mkdir()
    text = {"vocab_size": 1000, "max_position_embeddings": 4096}
    (model / "config.json").write_text(json.dumps({"text_config": text}))
    assert (read_model_meta(model).vocab_size, read_model_meta(model).context_length) == (1000, 4096)
    (tmp_path / "broken.gguf").write_bytes(b"GGUF\x03\x00\x00\x00")  # truncated: states nothing
    assert read_model_meta(tmp_path / "broken.gguf").vocab_size is None
    assert read_model_meta(tmp_path / "nowhere").context_length is None
    launch = {"command": ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "{model}"]}
    options = Options.model_validate({"launch": {**launch, "model_file": str(tmp_path / "m.gguf")}})
    assert (model_vocab_size(options), model_context_length(options)) == (300, 1024)


def test_a_server_that_states_neither_gets_them_from_the_model(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"vocab_size": 700, "max_position_embeddings": 3000}))
    command = [sys.executable, SERVER, "{port}", "silent"]
    launch = {"command": command, "model_file": str(model), "probe": "/v1/models", "ready_timeout_s": 20}
    path = EnginePath.probe(Options.model_validate({"flavor": "generic", "launch": launch}), dtype="float32", seed=0)
    assert (path.vocab_size, path.max_len) == (700, 3000)
    bounded = Options.model_validate({"flavor": "generic", "launch": launch, "context_length": 1000})
    assert EnginePath.probe(bounded, dtype="float32", seed=0).max_len == 1000


def test_validate_names_the_missing_vocabulary_option_with_file_and_line(tmp_path: Path) -> None:
    manifest = (REPO / "examples/engine-vllm-hosted.yaml").read_text()
    assert manifest.count("vocab_size: 512") == 2
    bad = tmp_path / "hosted-no-vocab.yaml"
    bad.write_text(manifest.replace("      vocab_size: 512\n", "", 1))
    result = CliRunner().invoke(cli, ["validate", str(bad)])
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    assert "\n" not in line and f"{bad}:" in line and "subject.reference.options" in line and "vocab_size" in line
    assert not (tmp_path / "out").exists()
    good = tmp_path / "hosted-gguf.yaml"  # a GGUF model file states it: no error
    pytest.importorskip("gguf")
    from gate.models.tiny_gguf import TinyLlamaSpec, write_tiny_gguf

    write_tiny_gguf(tmp_path / "m.gguf", TinyLlamaSpec())
    prefix = (REPO / "examples/engine-vllm-prefix.yaml").read_text()
    good.write_text(prefix.replace("tiny_model: {format: hf, seed: 0}", f"model_file: {tmp_path / 'm.gguf'}"))
    assert CliRunner().invoke(cli, ["validate", str(good)]).exit_code == 0
