"""Models for the hf adapter: tiny presets with seeded random weights, or a local directory.

Presets are small (2 layers, width 64) so a sweep over every prefix length runs in seconds on a CPU,
and initialised with a larger std than transformers' 0.02 so the logits are peaked and a wrong
position, mask or cache entry moves the argmax. No hub access: `local_files_only=True`.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import transformers

from gate.adapters.hf.options import ARCHITECTURES, PRESET_MAX_POSITIONS
from gate.errors import AdapterUnavailable
from gate.tensors import DTYPES

DEFAULT_INIT_STD = 0.25
"""Weight init std of the presets (see module docstring)."""

TINY = {"vocab_size": 256, "max_position_embeddings": PRESET_MAX_POSITIONS}
"""Shared by every preset: vocabulary and longest sequence."""

HYBRID_WINDOW = 32
"""Sliding window of gemma3-hybrid's local layer (and of mistral-sliding-window's every layer)."""

LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 10000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}
"""llama3-rope-scaling's rotary frequencies: Llama 3.1's piecewise rescaling, its original context
scaled down to 64 of 512 positions so every band is in use."""


LONGROPE_ORIGINAL = 128
"""phi3-longrope's original context: up to it the short rotary factors apply, beyond it the long ones."""

LONGROPE = {
    "rope_type": "longrope",
    "rope_theta": 10000.0,
    "short_factor": [1.0] * 8,
    "long_factor": [1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0],
}
"""Phi-3's LongRoPE (one factor per rotary frequency of the 16-channel heads)."""


def preset_config(name: str, init_std: float = DEFAULT_INIT_STD) -> Any:
    """The config of a tiny preset, every one a real transformers architecture with 2 layers of width
    64 (the presets table of docs/hf-adapter.md says what each exercises)."""
    if name not in ARCHITECTURES:
        raise ValueError(f"unknown preset {name!r}")
    make = getattr(transformers, ARCHITECTURES[name], None)
    if make is None:
        raise AdapterUnavailable(
            f"preset {name!r} is built from transformers.{ARCHITECTURES[name]}, which transformers "
            f"{transformers.__version__} does not have"
        )
    tiny: dict[str, Any] = dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        initializer_range=init_std,
        tie_word_embeddings=False,
        **TINY,
    )
    llama_like = {**tiny, "num_key_value_heads": 2}
    special_ids = {"bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0}
    llama_variants: dict[str, dict[str, Any]] = {
        "llama": {},
        "qwen2": {"use_sliding_window": False},
        "mistral-sliding-window": {"sliding_window": HYBRID_WINDOW},
        "llama-mqa": {"num_key_value_heads": 1},
        "llama3-rope-scaling": {"rope_parameters": dict(LLAMA3_ROPE)},
        "phi3-longrope": {
            "rope_parameters": dict(LONGROPE),
            "original_max_position_embeddings": LONGROPE_ORIGINAL,
            **special_ids,
        },
        "gemma3-hybrid": {
            "head_dim": 16,
            "query_pre_attn_scalar": 16,  # = head_dim as in Gemma 3 1B-12B (the default 256 scales by 1/16)
            "sliding_window": HYBRID_WINDOW,
            "layer_types": ["sliding_attention", "full_attention"],
            "final_logit_softcapping": None,
            "attn_logit_softcapping": None,
            **special_ids,
        },
    }
    if name in llama_variants:
        return make(**{**llama_like, **llama_variants[name]})
    if name == "gpt-neox-partial-rotary":
        return make(**tiny, rotary_pct=0.25, **special_ids)
    return make(  # gpt2
        vocab_size=TINY["vocab_size"],
        n_positions=TINY["max_position_embeddings"],
        n_embd=64,
        n_layer=2,
        n_head=4,
        initializer_range=init_std,
        bos_token_id=0,
        eos_token_id=0,
    )


def layer_types(config: Any) -> list[str]:
    """Attention kind of each decoder layer: the config's own `layer_types`, else all sliding where the
    config has a `sliding_window` (as Mistral's does), else all full."""
    text = config.get_text_config(decoder=True)
    declared = getattr(text, "layer_types", None)
    layers = int(getattr(text, "num_hidden_layers", None) or text.n_layer)
    if declared:
        return [str(kind) for kind in declared[:layers]]
    kind = "sliding_attention" if getattr(text, "sliding_window", None) else "full_attention"
    return [kind] * layers


@dataclass
class LoadedModel:
    """A model ready to run, with what identifies it."""

    model: Any
    """The AutoModelForCausalLM, in eval mode, on its device and dtype."""
    name: str
    identity: dict[str, Any] = field(default_factory=dict)


def sha256_tensors(state: dict[str, torch.Tensor]) -> str:
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().to("cpu").contiguous()
        digest.update(name.encode())
        digest.update(str(tensor.dtype).encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


def _sha256_files(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(path.name.encode())
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def config_sha256(config: Any) -> str:
    """sha256 of the config as JSON with sorted keys (transformers' own serialisation)."""
    data = json.loads(config.to_json_string(use_diff=False))
    data.pop("transformers_version", None)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def load(
    model: str, attn_implementation: str, *, device: str, dtype: str, seed: int, init_std: float | None = None
) -> LoadedModel:
    """Build a preset with weights seeded by `seed`, or load a local directory; cast and place it."""
    torch_dtype = DTYPES[dtype]
    is_preset = model in ARCHITECTURES
    if is_preset:
        config = preset_config(model, init_std or DEFAULT_INIT_STD)
        config._attn_implementation = attn_implementation
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            auto: Any = transformers.AutoModelForCausalLM
            built = auto.from_config(config, attn_implementation=attn_implementation)
        weights_sha = sha256_tensors(built.state_dict())  # float32 master weights, before the cast
    else:
        directory = Path(model).expanduser()
        if not (directory / "config.json").is_file():
            raise AdapterUnavailable(f"model directory {directory} has no config.json")
        files = list(directory.glob("*.safetensors"))
        if not files:
            raise AdapterUnavailable(f"model directory {directory} has no *.safetensors weights")
        built = transformers.AutoModelForCausalLM.from_pretrained(
            str(directory), local_files_only=True, dtype=torch_dtype, attn_implementation=attn_implementation
        )
        weights_sha = _sha256_files(files)
    built = built.to(device=device, dtype=torch_dtype).eval()
    built.requires_grad_(False)
    # gate compares fixed-length continuations token by token: generate must not stop at an EOS
    # (the reference's greedy loop never does), so the model's default stop token is cleared
    if getattr(built, "generation_config", None) is not None:
        built.generation_config.eos_token_id = None
    config = built.config
    identity = {
        "adapter": "hf",
        "model": model,
        "source": "preset" if is_preset else "directory",
        "seed": seed if is_preset else None,
        "architecture": type(built).__name__,
        "config_sha256": config_sha256(config),
        "weights_sha256": weights_sha,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "dtype": dtype,
        "device": device,
        "attn_implementation": attn_implementation,
        "num_layers": config.get_text_config(decoder=True).num_hidden_layers,
        "sliding_window": getattr(config, "sliding_window", None),
        "layer_types": layer_types(config),
        "kv_heads": kv_shape(built)[1],
        "rope_parameters": getattr(config.get_text_config(decoder=True), "rope_parameters", None),
    }
    return LoadedModel(model=built, name=model, identity=identity)


def max_positions(model: Any) -> int:
    config = model.config.get_text_config(decoder=True)
    for name in ("max_position_embeddings", "n_positions"):
        if getattr(config, name, None):
            return int(getattr(config, name))
    raise ValueError(f"{type(model).__name__} declares no maximum length")


def kv_shape(model: Any) -> tuple[int, int, int]:
    """(layers, KV heads, head dim) of the model's K/V, from its text config (GPT-2 names too)."""
    cfg = model.config.get_text_config(decoder=True)
    layers = int(getattr(cfg, "num_hidden_layers", None) or cfg.n_layer)
    heads = int(getattr(cfg, "num_attention_heads", None) or cfg.n_head)
    kv_heads = int(getattr(cfg, "num_key_value_heads", None) or heads)
    hidden = int(getattr(cfg, "hidden_size", None) or cfg.n_embd)
    return layers, kv_heads, int(getattr(cfg, "head_dim", None) or hidden // heads)


def decoder_layers(model: Any) -> Any:
    """The ModuleList of decoder blocks (`model.layers` for Llama-likes, `transformer.h` for GPT-2)."""
    for name in ("layers", "h"):
        if getattr(model.base_model, name, None) is not None:
            return getattr(model.base_model, name)
    raise AdapterUnavailable(f"cannot find the decoder layers of {type(model).__name__}")


def truncated_copy(model: Any, num_layers: int) -> Any:
    """A copy of `model` that keeps its first `num_layers` blocks and shares nothing with it: a
    self-speculative (early-exit) draft, which agrees with the target often but not always."""
    draft = copy.deepcopy(model)
    del decoder_layers(draft)[num_layers:]
    draft.config.num_hidden_layers = num_layers
    if hasattr(draft.config, "n_layer"):
        draft.config.n_layer = num_layers
    if getattr(draft.config, "layer_types", None):
        draft.config.layer_types = draft.config.layer_types[:num_layers]
    return draft
