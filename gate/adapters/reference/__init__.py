"""The `reference` adapter: execution paths through gate's own small decoder.

    subject:
      reference: {adapter: reference, options: {path: full}}
      candidate: {adapter: reference, options: {path: chunked, chunk_size: 64}}

Paths (`path:`) are a small table from name to a builder, imported only when a run needs it:

    full      one full causal pass per call, no cache (the usual reference)
    dynamic   KV cache that grows in blocks of `block_size` slots, one-shot prefill
    static    preallocated KV cache of `max_len` slots (gpt-fast), one-shot prefill
    chunked   static cache, prompts and appends processed in chunks of `chunk_size` tokens
    prefix-cache  cross-request block prefix cache, settings in `prefix:` (reference_prefix.py)
    speculative  draft-then-verify sampling, draft and k in `speculative:` (reference_speculative.py)
    quantized    int8/int4 KV codes, dequantised on read, settings in `quant:` (reference_approx.py)
    evicting     sink-plus-window KV eviction (StreamingLLM), settings in `evict:` (reference_approx.py)

`weights:` loads trained weights (a shipped name such as `copy-model`, or a .safetensors path,
gate.models.trained) instead of seeded random ones; the file's config replaces the preset.

A new path is one line in `PATHS` plus its own module exposing `build(model, options, ...)`
(see `gate.adapters.reference.paths.build_cached` for the shape). `fault:` builds the path and
applies one fault from gate.models.faults with `with_fault`, so a manifest can name a faulty candidate.

This module imports no torch, so `gate validate` and `gate plan` stay instant.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gate.adapters.reference.approx_options import EvictOptions, QuantOptions
from gate.adapters.reference.speculative import SpeculativeOptions
from gate.models.config import PRESETS
from gate.models.faults import FAULT_NAMES
from gate.prefix.options import PREFIX_FAULTS, PrefixOptions

PRESET_NAMES = tuple(PRESETS)
"""Model shapes of the reference decoder (gate.models.config, torch-free)."""

PATHS: dict[str, str] = {
    "full": "gate.adapters.reference.paths:build_full",
    "dynamic": "gate.adapters.reference.paths:build_cached",
    "static": "gate.adapters.reference.paths:build_cached",
    "chunked": "gate.adapters.reference.paths:build_cached",
    "prefix-cache": "gate.adapters.reference.prefix:build",
    "speculative": "gate.adapters.reference.speculative:build_speculative",
    "quantized": "gate.adapters.reference.approx:build_quantized",
    "evicting": "gate.adapters.reference.approx:build_evicting",
}
"""Path name -> "module:function" builder, called as `fn(model, options, device=, dtype=, seed=)`."""


class Options(BaseModel):
    """How to build one path through the reference decoder."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    preset: str = "tiny"
    """Model shape: tiny (2 layers, d_model 64, 4 heads, 2 KV heads, RoPE), tiny-abs (learned
    absolute positions instead of RoPE), tiny-draft (1 layer, d_model 32), small (4 layers, 128)."""
    layers: int | None = Field(default=None, ge=1, le=64)
    """Override: number of decoder layers."""
    width: int | None = Field(default=None, ge=4, le=4096)
    """Override: d_model."""
    heads: int | None = Field(default=None, ge=1)
    """Override: query heads (must divide width)."""
    kv_heads: int | None = Field(default=None, ge=1)
    """Override: key/value heads (must divide heads; fewer than heads is grouped-query attention)."""
    vocab: int | None = Field(default=None, ge=2)
    """Override: vocabulary size."""
    max_len: int | None = Field(default=None, ge=2, le=1 << 17)
    """Override: longest sequence (and static-cache slots)."""
    rope: bool | None = None
    """Override: rotary position embeddings on or off."""
    rope_base: float | None = Field(default=None, gt=1)
    """Override: RoPE base (theta)."""
    absolute_positions: bool | None = None
    """Override: learned absolute position embeddings (GPT-2 style), added to token embeddings."""
    window: int | None = Field(default=None, ge=1)
    """Override: sliding attention window in tokens (None: full causal attention)."""
    path: str = "full"
    """Execution path: full, dynamic, static or chunked (see the module docstring)."""
    chunk_size: int = Field(default=64, ge=1)
    """Tokens per chunk for `path: chunked`."""
    block_size: int = Field(default=16, ge=1)
    """Slots per allocation block of the dynamic layout (also the block the truncation fault drops)."""
    fault: str | None = None
    """Apply this fault (gate.models.faults) to the built path: a deliberately broken candidate."""
    prefix: PrefixOptions | None = None
    """path: prefix-cache: byte budget and KV dtype of the cross-request cache (prefix_options.py)."""
    speculative: SpeculativeOptions | None = None
    """path: speculative: draft model, draft length k and sampler fault (reference_speculative.py)."""
    quant: QuantOptions | None = None
    """path: quantized: bits, group size and key axis of the KV codes (reference_approx.py)."""
    evict: EvictOptions | None = None
    """path: evicting: window, attention sinks and prefill chunk (reference_approx.py)."""
    weights: str | None = None
    """Trained weights: a shipped name (copy-model) or a .safetensors path; replaces preset and overrides."""

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, value: str) -> str:
        if value not in PRESET_NAMES:
            raise ValueError(f"unknown preset {value!r} (known: {', '.join(PRESET_NAMES)})")
        return value

    @field_validator("path")
    @classmethod
    def _known_path(cls, value: str) -> str:
        if value not in PATHS:
            raise ValueError(f"unknown path {value!r} (known: {', '.join(PATHS)})")
        return value

    @field_validator("fault")
    @classmethod
    def _known_fault(cls, value: str | None) -> str | None:
        if value is not None and value not in FAULT_NAMES and value not in PREFIX_FAULTS:
            raise ValueError(f"unknown fault {value!r} (known: {', '.join(FAULT_NAMES + PREFIX_FAULTS)})")
        return value

    @model_validator(mode="after")
    def _consistent_shape(self) -> Options:
        if self.fault is not None and self.path == "full" and self.fault != "sliding-window-mask":
            raise ValueError(f"fault {self.fault!r} needs a cached path; path 'full' has no cache")
        if self.fault is not None and (self.fault in PREFIX_FAULTS) != (self.path == "prefix-cache"):
            raise ValueError(
                f"fault {self.fault!r} does not apply to path {self.path!r} "
                "(gate.prefix.faults apply to path 'prefix-cache' only)"
            )
        if self.prefix is not None and self.path != "prefix-cache":
            raise ValueError("option 'prefix' applies only to path 'prefix-cache'")
        if self.speculative is not None and self.path != "speculative":
            raise ValueError("option 'speculative' applies only to path 'speculative'")
        if self.quant is not None and self.path != "quantized":
            raise ValueError("option 'quant' applies only to path 'quantized'")
        if self.evict is not None and self.path != "evicting":
            raise ValueError("option 'evict' applies only to path 'evicting'")
        if self.path == "evicting" and self.evict is None:
            raise ValueError("path 'evicting' needs `evict: {window: N}`")
        return self

    def overrides(self) -> dict[str, Any]:
        """ModelConfig field overrides (None = keep the preset's value)."""
        return {
            "n_layers": self.layers,
            "d_model": self.width,
            "n_heads": self.heads,
            "n_kv_heads": self.kv_heads,
            "vocab_size": self.vocab,
            "max_len": self.max_len,
            "rope": self.rope,
            "rope_base": self.rope_base,
            "abs_positions": self.absolute_positions,
            "window": self.window,
        }


class ReferenceAdapter:
    """Builds DecodePaths through gate.models.reference (seeded weights: both paths of a manifest
    built with the same seed hold identical weights)."""

    name: ClassVar[str] = "reference"
    Options: ClassVar[type[BaseModel]] = Options

    def build(self, options: BaseModel, *, device: str, dtype: str, seed: int) -> Any:
        from importlib import import_module

        from gate.adapters.reference.paths import build_model_for

        if not isinstance(options, Options):
            options = Options.model_validate(options.model_dump())
        module, _, attr = PATHS[options.path].partition(":")
        builder = getattr(import_module(module), attr)
        model = build_model_for(options, device=device, dtype=dtype, seed=seed)
        path = builder(model, options, device=device, dtype=dtype, seed=seed)
        return path.with_fault(options.fault) if options.fault else path
