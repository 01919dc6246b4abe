"""Options of the reference adapter, all in one torch-free module (validation stays instant).

candidate: {adapter: reference, options: {path: chunked, chunk_size: 64}}
candidate: {adapter: reference, options: {weights: copy-model, path: quantized,
                                          quant: {bits: 4, group_size: 16}}}
candidate: {adapter: reference, options: {weights: copy-model, path: evicting,
                                          evict: {window: 64, sink: 4}}}
candidate: {adapter: reference, options: {path: speculative, speculative: {k: 2}}}
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from gate.models.config import PRESETS
from gate.models.evict_faults import EVICT_FAULTS
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
ONE_PATH_OPTIONS = {"prefix": "prefix-cache", "speculative": "speculative", "quant": "quantized", "evict": "evicting"}
"""Options that apply to one path only -> that path."""


V = TypeVar("V", bound=str | None)


def known(value: V, names: Collection[str], what: str) -> V:
    """A validator's answer: `value` when it is None or one of `names`, else the error naming them."""
    if value is not None and value not in names:
        raise ValueError(f"unknown {what} {value!r} (known: {', '.join(names)})")
    return value


SAMPLER_FAULTS = (
    "accept-all",
    "inverted-ratio",
    "residual-from-target",
    "residual-abs",
    "bonus-from-draft",
    "drop-bonus",
)
"""gate.speculative.sampler.FAULTS, named here so validation needs no torch (a test keeps them equal)."""


class SpeculativeOptions(BaseModel):
    """The draft model and draft length of `path: speculative`."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    k: int = Field(default=2, ge=1, le=16)
    """Tokens the draft proposes per round; the target verifies them in one pass."""
    draft: str = "layer-skip"
    """`layer-skip` (the target's first `draft_layers` layers, sharing its embeddings, final norm and
    head) or a reference preset name (an independent decoder with its own seeded weights)."""
    draft_layers: int | None = Field(default=None, ge=1, le=64)
    """layer-skip: layers kept (default: half the target's, at least one; all of them gives a draft
    identical to the target). preset: override of the draft's layer count."""
    draft_seed: int | None = Field(default=None, ge=0)
    """preset draft: weight seed (default: the run seed + 1, so the draft differs from the target)."""
    fault: str | None = None
    """A sampler fault applied from outside the sampler (gate.speculative.sampler.FAULTS)."""

    @field_validator("draft")
    @classmethod
    def _known_draft(cls, value: str) -> str:
        if value != "layer-skip" and value not in PRESET_NAMES:
            raise ValueError(f"unknown draft {value!r} (layer-skip or a preset: {', '.join(PRESET_NAMES)})")
        return value

    @field_validator("fault")
    @classmethod
    def _known_fault(cls, value: str | None) -> str | None:
        return known(value, SAMPLER_FAULTS, "sampler fault")


class QuantOptions(BaseModel):
    """KV quantisation for `path: quantized` (gate.models.kv_approx.quantize_cache)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    bits: Literal[8, 4] = 8
    """Bits per stored key/value element (int4 codes are packed two per byte)."""
    group_size: int = Field(default=32, ge=2, le=4096)
    """Elements sharing one float16 scale and minimum: channels of one token (token axis, clipped
    to head_dim), or tokens of one channel (channel axis)."""
    key_axis: Literal["token", "channel"] = "token"
    """Group keys per token along the head dimension, or per channel over `group_size` tokens
    (KIVI); values are always grouped per token."""
    residual: int = Field(default=0, ge=0)
    """Newest tokens kept in full precision (HF QuantizedCache's residual_length)."""


class EvictOptions(BaseModel):
    """KV eviction for `path: evicting` (gate.models.kv_approx.evict_cache)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    window: int = Field(ge=1)
    """Most recent tokens kept."""
    sink: int = Field(default=0, ge=0)
    """First tokens always kept (StreamingLLM attention sinks); 0 is a plain sliding window."""
    chunk_size: int = Field(default=16, ge=1)
    """Tokens per model step while prefilling: eviction happens between chunks, so a query sees
    the kept tokens plus at most `chunk_size` of its own chunk (streaming prefill)."""
    refuse_prompts_up_to: int = Field(default=0, ge=0)
    """A prompt of at most this many tokens raises inside the cache (AssertionError), as kvpress's
    StreamingLLMPress refuses a prompt not longer than its sinks: a crash of the subject on short
    prompts only (0: every prompt accepted)."""
    budget: int | None = Field(default=None, ge=1)
    """Tokens kept per layer and KV head (default sink + window): the sinks, the window and the
    newest token, then the highest-scored others by `score`."""
    score: Literal["position", "knorm"] = "position"
    """What ranks the tokens outside the sinks and the window: `position` (nothing: a plain
    sink-plus-window press) or `knorm` (minus the key's L2 norm, KnormPress's score)."""
    fault: str | None = None
    """A planted bug of the press's choice of what to keep (gate.models.kv_approx.EVICT_FAULTS)."""

    @field_validator("fault")
    @classmethod
    def _known_evict_fault(cls, value: str | None) -> str | None:
        return known(value, EVICT_FAULTS, "eviction fault")

    @model_validator(mode="after")
    def _budget_holds_protected(self) -> EvictOptions:
        if self.budget is not None and self.budget < self.sink + self.window:
            raise ValueError(f"budget {self.budget} must be at least sink + window ({self.sink + self.window})")
        return self


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
    """path: prefix-cache: byte budget and KV dtype of the cross-request cache (gate.prefix.options)."""
    speculative: SpeculativeOptions | None = None
    """path: speculative: draft model, draft length k and sampler fault (speculative.py)."""
    quant: QuantOptions | None = None
    """path: quantized: bits, group size and key axis of the KV codes (approx.py)."""
    evict: EvictOptions | None = None
    """path: evicting: window, attention sinks and prefill chunk (approx.py)."""
    weights: str | None = None
    """Trained weights: a shipped name (copy-model) or a .safetensors path; replaces preset and overrides."""

    @field_validator("preset", "path")
    @classmethod
    def _known(cls, value: str, info: ValidationInfo) -> str:
        return known(value, PRESET_NAMES if info.field_name == "preset" else tuple(PATHS), str(info.field_name))

    @field_validator("fault")
    @classmethod
    def _known_fault(cls, value: str | None) -> str | None:
        return known(value, FAULT_NAMES + PREFIX_FAULTS, "fault")

    @model_validator(mode="after")
    def _consistent_shape(self) -> Options:
        if self.fault is not None and self.path == "full" and self.fault != "sliding-window-mask":
            raise ValueError(f"fault {self.fault!r} needs a cached path; path 'full' has no cache")
        if self.fault is not None and (self.fault in PREFIX_FAULTS) != (self.path == "prefix-cache"):
            raise ValueError(
                f"fault {self.fault!r} does not apply to path {self.path!r} "
                "(gate.prefix.faults apply to path 'prefix-cache' only)"
            )
        for option, path in ONE_PATH_OPTIONS.items():
            if getattr(self, option) is not None and self.path != path:
                raise ValueError(f"option {option!r} applies only to path {path!r}")
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
