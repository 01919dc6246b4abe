"""The tiny GGUF model: a pure function of its spec, readable by the gguf reader, shaped for llama.cpp."""

from __future__ import annotations

from pathlib import Path

import pytest

gguf = pytest.importorskip("gguf", reason="the gguf package is in the engine extra: pip install 'gate[engine]'")

from gate.models.tiny_gguf import TinyLlamaSpec, write_tiny_gguf  # noqa: E402


def test_same_spec_same_file_and_a_perturbation_changes_it(tmp_path: Path) -> None:
    a = write_tiny_gguf(tmp_path / "a.gguf", TinyLlamaSpec(seed=0))
    b = write_tiny_gguf(tmp_path / "b.gguf", TinyLlamaSpec(seed=0))
    c = write_tiny_gguf(tmp_path / "c.gguf", TinyLlamaSpec(seed=0, perturb_seed=1))
    assert a == b != c


def test_the_file_holds_a_llama_with_a_loadable_vocabulary(tmp_path: Path) -> None:
    spec = TinyLlamaSpec(seed=3, vocab_size=300)
    write_tiny_gguf(tmp_path / "m.gguf", spec)
    reader = gguf.GGUFReader(str(tmp_path / "m.gguf"))
    names = {t.name: t for t in reader.tensors}
    assert len(names) == 3 + 9 * spec.n_layer
    assert list(names["token_embd.weight"].shape) == [spec.n_embd, spec.vocab_size]
    head_dim = spec.n_embd // spec.n_head
    assert head_dim % 32 == 0  # llama.cpp's quantised KV types pack 32 values per block
    assert list(names["blk.0.attn_k.weight"].shape) == [spec.n_embd, head_dim * spec.n_head_kv]
    tokens = reader.fields["tokenizer.ggml.tokens"]
    assert len(tokens.data) == spec.vocab_size
    with pytest.raises(ValueError, match="at least"):
        write_tiny_gguf(tmp_path / "x.gguf", TinyLlamaSpec(vocab_size=100))


def test_a_sliding_window_gguf_is_a_gemma2_file_with_a_per_layer_pattern(tmp_path: Path) -> None:
    write_tiny_gguf(tmp_path / "m.gguf", TinyLlamaSpec(sliding_window=64, sliding_layers=(0,)))
    reader = gguf.GGUFReader(str(tmp_path / "m.gguf"))
    field = reader.fields["general.architecture"]
    assert bytes(field.parts[field.data[0]]).decode() == "gemma2"
    window = reader.fields["gemma2.attention.sliding_window"]
    assert int(window.parts[window.data[0]][0]) == 64
    pattern = reader.fields["gemma2.attention.sliding_window_pattern"]
    assert [bool(pattern.parts[i][0]) for i in pattern.data] == [True, False]
    names = {t.name for t in reader.tensors}
    assert "output.weight" not in names and "blk.1.post_ffw_norm.weight" in names
