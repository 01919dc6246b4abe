"""A tiny Llama written as a Hugging Face model directory from a seed (vLLM, SGLang, TGI), with no hub.

The same seeded weights as the llama GGUF of the same spec (gate.models.tiny_gguf), with the query
and key rows in Hugging Face's rotary order, and a locally built word-level tokenizer.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from gate._util.digest import sha256_file
from gate.models.tiny_gguf import TinyLlamaSpec, tensors_of, vocabulary_pieces

HF_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}


def _unpermute(weight: Any, n_head: int) -> Any:
    """GGUF's interleaved rotary row order back to Hugging Face's halves (the inverse of the
    permutation llama.cpp's converter applies to q_proj and k_proj)."""
    rows = weight.shape[0]
    return weight.reshape(n_head, rows // n_head // 2, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def hf_tensors(spec: TinyLlamaSpec) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in tensors_of(spec).items():
        if name in HF_NAMES:
            out[HF_NAMES[name]] = value
            continue
        _, layer, rest = name.split(".", 2)
        if rest == "attn_q.weight":
            value = _unpermute(value, spec.n_head)
        elif rest == "attn_k.weight":
            value = _unpermute(value, spec.n_head_kv)
        out[f"model.layers.{layer}.{LAYER_NAMES[rest]}"] = value.copy()
    return out


def layer_types(spec: TinyLlamaSpec) -> list[str]:
    """Per layer: "sliding_attention" for the spec's sliding layers, "full_attention" for the others."""
    local = set(spec.local_layers())
    return ["sliding_attention" if i in local else "full_attention" for i in range(spec.n_layer)]


def hf_config(spec: TinyLlamaSpec) -> dict[str, Any]:
    config: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.n_embd,
        "intermediate_size": spec.n_ff,
        "num_hidden_layers": spec.n_layer,
        "num_attention_heads": spec.n_head,
        "num_key_value_heads": spec.n_head_kv,
        "head_dim": spec.n_embd // spec.n_head,
        "hidden_act": "silu",
        "max_position_embeddings": spec.context_length,
        "rms_norm_eps": 1e-5,
        "rope_theta": spec.rope_freq_base,
        "rope_parameters": {"rope_type": "default", "rope_theta": spec.rope_freq_base},
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float32",
        "dtype": "float32",
    }
    if spec.sliding_window is not None:
        config["sliding_window"] = spec.sliding_window
        config["layer_types"] = layer_types(spec)
    return config


def _tokenizer_json(spec: TinyLlamaSpec) -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    pieces = vocabulary_pieces(spec.vocab_size)
    tokenizer = Tokenizer(models.WordLevel({piece: i for i, piece in enumerate(pieces)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    tokenizer.add_special_tokens(pieces[:3])
    return str(tokenizer.to_str())


def write_tiny_hf(directory: Path, spec: TinyLlamaSpec) -> str:
    """Write the model directory (atomically: built beside it, renamed into place) and return its
    `directory_sha256`."""
    from safetensors.numpy import save_file

    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = directory.with_name(directory.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    (tmp / "config.json").write_text(json.dumps(hf_config(spec), indent=2, sort_keys=True) + "\n")
    generation = {"bos_token_id": 1, "eos_token_id": 2, "do_sample": False}
    (tmp / "generation_config.json").write_text(json.dumps(generation, indent=2, sort_keys=True) + "\n")
    save_file(hf_tensors(spec), str(tmp / "model.safetensors"), metadata={"format": "pt"})
    (tmp / "tokenizer.json").write_text(_tokenizer_json(spec))
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": "<unk>",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "model_max_length": spec.context_length,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
    }
    (tmp / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2, sort_keys=True) + "\n")
    shutil.rmtree(directory, ignore_errors=True)
    tmp.replace(directory)
    return directory_sha256(directory)


def directory_sha256(path: Path) -> str:
    """sha256 of a model file, or of a directory's files (relative name, NUL, content digest, newline;
    in name order, symlinks followed): the same bytes give the same digest wherever they lie."""
    if path.is_file():
        return sha256_file(path)
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(f"{file.relative_to(path).as_posix()}\0{sha256_file(file)}\n".encode())
    return digest.hexdigest()


def main(argv: list[str] | None = None) -> int:
    """`python -m gate.models.tiny_hf DIR [--seed N] [--sliding-window N [--sliding-layers 0,1]]`: write the
    tiny model directory (for a server gate does not launch, e.g. `base_url` in docs/engines.md) and
    print its directory_sha256."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m gate.models.tiny_hf", description=main.__doc__)
    parser.add_argument("directory", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--context-length", type=int, default=TinyLlamaSpec.context_length)
    parser.add_argument("--sliding-window", type=int, default=None)
    parser.add_argument("--sliding-layers", default=None, help="comma-separated local layers (default: all)")
    args = parser.parse_args(argv)
    layers = None if args.sliding_layers is None else tuple(int(x) for x in args.sliding_layers.split(","))
    spec = TinyLlamaSpec(
        seed=args.seed,
        context_length=args.context_length,
        sliding_window=args.sliding_window,
        sliding_layers=layers,
    )
    print(write_tiny_hf(args.directory, spec))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
