"""The tiny Hugging Face model: a pure function of its spec, loadable by transformers with its
locally built tokenizer, the same weights as the tiny GGUF, grouped-query and sliding-window layers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("tokenizers", reason="the tokenizers package comes with transformers: pip install 'gate[hf]'")
pytest.importorskip("safetensors")

from gate.models.tiny_gguf import TinyLlamaSpec, tensors_of
from gate.models.tiny_hf import directory_sha256, hf_tensors, write_tiny_hf


def test_same_spec_same_directory_and_a_perturbation_changes_it(tmp_path: Path) -> None:
    a = write_tiny_hf(tmp_path / "a", TinyLlamaSpec(seed=0))
    b = write_tiny_hf(tmp_path / "b", TinyLlamaSpec(seed=0))
    c = write_tiny_hf(tmp_path / "c", TinyLlamaSpec(seed=0, perturb_seed=1))
    assert a == b != c
    assert a == directory_sha256(tmp_path / "a")
    (tmp_path / "a" / "config.json").write_text("{}")
    assert directory_sha256(tmp_path / "a") != b
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == [
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ]


def test_weights_are_the_gguf_weights_in_hugging_face_rotary_order() -> None:
    spec = TinyLlamaSpec(seed=2)
    gguf, hf = tensors_of(spec), hf_tensors(spec)
    assert (hf["model.embed_tokens.weight"] == gguf["token_embd.weight"]).all()
    assert (hf["model.layers.1.mlp.down_proj.weight"] == gguf["blk.1.ffn_down.weight"]).all()
    q_hf, q_gguf = hf["model.layers.0.self_attn.q_proj.weight"], gguf["blk.0.attn_q.weight"]
    assert q_hf.shape == q_gguf.shape and not (q_hf == q_gguf).all()
    assert sorted(q_hf.ravel().tolist()) == sorted(q_gguf.ravel().tolist())  # the same rows, reordered
    half = spec.n_embd // spec.n_head // 2  # row 1 of HF's first half is GGUF's row 2 (pairs interleaved)
    assert (q_hf[1] == q_gguf[2]).all() and (q_hf[half] == q_gguf[1]).all()


def test_transformers_loads_the_model_and_its_tokenizer(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    import torch

    spec = TinyLlamaSpec(seed=1, n_head=4, n_head_kv=2, vocab_size=300)
    write_tiny_hf(tmp_path / "m", spec)
    tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "m"))
    assert len(tok) == spec.vocab_size
    assert tok.convert_tokens_to_ids("\u2581t0") == 131 and tok.eos_token_id == 2
    model = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "m"), dtype=torch.float32)
    assert model.config.num_key_value_heads == 2 and model.config.num_attention_heads == 4
    with torch.no_grad():
        logits = model(torch.tensor([[5, 9, 140, 200]])).logits
    assert logits.shape == (1, 4, spec.vocab_size)
    assert float(logits[0, -1].softmax(-1).max()) > 2.0 / spec.vocab_size  # a real spread, not uniform


def test_sliding_window_layers_are_named_per_layer(tmp_path: Path) -> None:
    write_tiny_hf(tmp_path / "all", TinyLlamaSpec(sliding_window=64))
    write_tiny_hf(tmp_path / "hybrid", TinyLlamaSpec(sliding_window=64, sliding_layers=(0,)))
    full = json.loads((tmp_path / "all" / "config.json").read_text())
    hybrid = json.loads((tmp_path / "hybrid" / "config.json").read_text())
    assert full["sliding_window"] == 64 and full["layer_types"] == ["sliding_attention"] * 2
    assert hybrid["layer_types"] == ["sliding_attention", "full_attention"]
    assert "sliding_window" not in json.loads((tmp_path / "all" / "generation_config.json").read_text())
    with pytest.raises(ValueError, match="outside"):
        TinyLlamaSpec(sliding_window=64, sliding_layers=(2,))
    with pytest.raises(ValueError, match="split"):
        TinyLlamaSpec(n_head=4, n_head_kv=3)
