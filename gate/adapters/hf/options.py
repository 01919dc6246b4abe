"""Options of the `hf` adapter, validated from a manifest's `subject.*.options`.

Device and dtype are not options: they come from the manifest's `subject` so both paths of a run
always share them. This module imports no torch, so `gate validate` stays instant.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gate.prefix.options import PrefixOptions

ARCHITECTURES: dict[str, str] = {
    "llama": "LlamaConfig",
    "qwen2": "Qwen2Config",
    "mistral-sliding-window": "MistralConfig",
    "gpt2": "GPT2Config",
    "gemma3-hybrid": "Gemma3TextConfig",
    "llama-mqa": "LlamaConfig",
    "gpt-neox-partial-rotary": "GPTNeoXConfig",
    "llama3-rope-scaling": "LlamaConfig",
    "phi3-longrope": "Phi3Config",
}
"""The transformers config class each preset is built from."""

PRESET_NAMES = tuple(ARCHITECTURES)
"""Tiny models built from a config with seeded random weights (see presets.py)."""

PRESET_MAX_POSITIONS = 512
"""Longest sequence of every preset (presets.TINY), named here so planning needs no transformers."""

PathKind = Literal[
    "full",
    "dynamic",
    "static",
    "generate-static",
    "generate-paged",
    "generate-cache",
    "quantized",
    "sliding-window",
    "offloaded",
    "prefix-reuse",
    "assisted",
    "prompt-lookup",
    "kvpress",
]

PRESSES = ("streaming-llm", "snapkv", "knorm", "expected-attention", "tova", "random")
"""kvpress presses the adapter can build by name (see kvpress_path.py)."""

_ONLY_FOR: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("backend", "nbits", "residual_length", "q_group_size"), ("quantized",)),
    "window": ("sliding-window",),
    **dict.fromkeys(("draft", "draft_layers", "num_assistant_tokens", "ensemble_weight"), ("assisted",)),
    **dict.fromkeys(("prompt_lookup_num_tokens", "max_matching_ngram_size"), ("prompt-lookup",)),
    **dict.fromkeys(("press", "compression_ratio", "press_scope"), ("kvpress",)),
    **dict.fromkeys(("reuse", "block_size"), ("prefix-reuse",)),
    "page_size": ("generate-paged",),
    "prefix": ("prefix-reuse",),
    "max_cache_len": ("static", "generate-static", "offloaded", "generate-cache"),
    "beams": ("dynamic", "static", "quantized"),
    **dict.fromkeys(("cache_implementation", "cache_config", "config_via"), ("generate-cache",)),
    "reuse_after": ("full", "dynamic"),
    "eos_token": ("prompt-lookup",),
}


class Options(BaseModel):
    """How to build one path through a Hugging Face `AutoModelForCausalLM`."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    model: str = Field(min_length=1)
    """A tiny preset (llama, qwen2, mistral-sliding-window, gpt2, gemma3-hybrid, llama-mqa,
    gpt-neox-partial-rotary, llama3-rope-scaling, phi3-longrope) built with seeded random weights, or a local
    directory holding config.json and safetensors weights. Never a hub id: no hub access."""
    path: PathKind = "full"
    """Execution path: `full` (one forward, no cache: the usual reference), `dynamic` (DynamicCache),
    `static` (StaticCache), `generate-static` / `generate-paged` (`generate` with that
    cache_implementation), `generate-cache` (`generate` builds the cache `cache_implementation` names
    from one shared GenerationConfig), `quantized` (QuantizedCache), `sliding-window` (sliding-window cache layers),
    `offloaded` (offloaded DynamicCache; GPU only), `prefix-reuse` (a base cache shared across requests),
    `assisted` (draft model proposes, target verifies), `prompt-lookup` (n-gram proposals), `kvpress`
    (a kvpress press compresses the cache after prefill)."""
    fault: str | None = None
    """A fault to apply to this path from the start (normally the runner applies faults itself)."""
    attn_implementation: Literal["sdpa", "eager"] = "sdpa"
    """Attention kernel transformers dispatches to."""
    init_std: float | None = Field(default=None, gt=0)
    """Presets only: std of the random weight init (default 0.25, large enough that a position or mask
    error moves the argmax; the usual 0.02 gives nearly flat logits)."""

    backend: Literal["quanto", "hqq", "fp8"] = "quanto"
    """quantized: QuantizedCache backend (quanto needs optimum-quanto, hqq needs hqq, fp8 needs
    transformers with Fp8QuantizedLayer)."""
    nbits: Literal[2, 4, 8] | None = None
    """quantized: bits per element for the quanto/hqq backends (fp8 is always 8)."""
    residual_length: int | None = Field(default=None, ge=0)
    """quantized: most recent tokens kept unquantized (transformers' default is 128)."""
    q_group_size: int | None = Field(default=None, gt=0)
    """quantized: quantization group size along the channel axis."""

    window: int | None = Field(default=None, ge=2)
    """sliding-window: tokens each query may see. None uses the model's own `sliding_window`
    (exact for a model declared with one); a number on a full-attention model evicts older tokens."""

    draft: str | None = None
    """assisted: draft model, a preset name or local directory (it must share the vocabulary)."""
    draft_layers: int | None = Field(default=None, ge=1)
    """assisted: keep only the draft's first N decoder blocks (an early-exit, self-speculative draft;
    with `draft` equal to `model` it shares the target's weights and agrees with it often, not always)."""
    num_assistant_tokens: int = Field(default=4, ge=1, le=64)
    """assisted: tokens the draft proposes per verification pass."""
    ensemble_weight: float | None = Field(default=None, gt=0, lt=1)
    """assisted: verify against w·p + (1 - w)·q instead of the target's p (transformers'
    `assistant_ensemble_weight`, static ensemble verification, DIVERSE): more drafts are accepted
    and the output distribution is no longer the target's. A lossy change a distribution claim must
    catch. Needs a transformers that has it (5.24 does, 5.2 does not)."""
    prompt_lookup_num_tokens: int = Field(default=4, ge=1, le=64)
    """prompt-lookup: tokens proposed from an earlier n-gram match per verification pass."""
    max_matching_ngram_size: int = Field(default=2, ge=1, le=16)
    """prompt-lookup: longest n-gram matched against the history."""
    eos_token: Literal["none", "model"] | int = "none"
    """prompt-lookup: the end-of-sequence token generate is handed. `none`: no EOS token (every
    continuation runs its full length); `model`: the model's own `eos_token_id`, as applications
    pass it; a number: that token id (an application's stop token). With one, generate stops a
    continuation where it emits that token, and the adapter continues the request from there with
    another generate call with the same token (so the continuation is the candidate's own output,
    segment by segment, and is compared with the reference's greedy continuation token for token)."""

    press: str | None = None
    """kvpress: press name (streaming-llm, snapkv, knorm, expected-attention, tova, random)."""
    compression_ratio: float = Field(default=0.5, ge=0, lt=1)
    """kvpress: fraction of the prefill's K/V the press evicts."""
    press_scope: Literal["prefill", "request"] = "prefill"
    """kvpress: `prefill` holds the press around each request's first prefill; `request` holds it
    around the whole request, prefill and every decode step, as kvpress's own pipeline and README
    drive the model."""

    reuse: Literal["copy", "crop"] = "copy"
    """prefix-reuse: `copy` deep-copies the stored base cache for each request; `crop` extends the
    base in place and crops it back to the prefix when the request ends."""
    block_size: int = Field(default=16, ge=1, le=1024)
    """prefix-reuse: tokens per block of the cross-request block cache the prefix-reuse checks drive
    (gate.protocols.PrefixCaching); 16 as in vLLM."""
    prefix: PrefixOptions | None = None
    """prefix-reuse: byte budget and KV storage dtype of that block cache (`cache_bytes`, `kv_dtype`)."""
    page_size: int = Field(default=16, ge=4, le=4096)
    """generate-paged: tokens per page of the paged cache, and the most tokens continuous batching
    schedules per forward (so a prompt is prefilled page by page, each chunk reading the pages before)."""
    max_cache_len: int | None = Field(default=None, gt=0)
    """static/generate-static/offloaded: preallocated cache length (default: the model's maximum)."""
    cache_implementation: Literal["dynamic", "static", "quantized", "offloaded"] = "dynamic"
    """generate-cache: the cache `generate` builds itself on each request's first call, named in ONE
    GenerationConfig object the path reuses for every request, as an application does."""
    cache_config: dict[str, int | str] | None = None
    """generate-cache: the GenerationConfig's `cache_config` (e.g. {backend: quanto, nbits: 4} for the
    quantized cache), in the same shared object."""
    config_via: Literal["generation-config", "keywords"] = "generation-config"
    """generate-cache: how a request's first call names its cache. `generation-config`: in the ONE
    GenerationConfig object above. `keywords`: as generate's own keywords,
    `generate(..., cache_implementation=..., cache_config=C)`, with the same dict C on every call, as
    applications pass them; what generate does to C, the next call inherits."""
    beams: int | None = Field(default=None, ge=2, le=8)
    """dynamic/static/quantized: run every request as one hypothesis among `beams` beams of one cache
    (beam search's cache traffic, gate/adapters/hf/beams.py): the prompt's K/V expanded to `beams` rows,
    and before each append the cache reordered with the library's own `reorder_cache(beam_idx)`, the
    request's hypothesis moving to another row and a duplicated parent beside it fed other tokens."""

    reuse_after: Literal["paged"] | None = None
    """full/dynamic: `paged` first serves a batch of requests through transformers' continuous batching
    (`generate_batch`, its paged cache and scheduler) on the candidate's model object, then runs every
    forward of the path on that same object, as an application that batches requests and afterwards
    calls the model directly does (the reference builds a model of its own, never batched)."""

    @model_validator(mode="after")
    def _options_fit_path(self) -> Options:
        defaults = type(self).model_fields
        for name, paths in _ONLY_FOR.items():
            if getattr(self, name) != defaults[name].default and self.path not in paths:
                raise ValueError(f"option {name!r} applies only to path {' or '.join(paths)}, not {self.path!r}")
        if self.path == "assisted" and not self.draft:
            raise ValueError("path 'assisted' needs a draft model: set `draft` to a preset or a local directory")
        if self.path == "kvpress":
            if not self.press:
                raise ValueError(f"path 'kvpress' needs `press`, one of {', '.join(PRESSES)}")
            if self.press not in PRESSES:
                raise ValueError(f"unknown press {self.press!r}; known: {', '.join(PRESSES)}")
        if self.backend == "fp8" and (self.nbits not in (None, 8) or self.q_group_size is not None):
            raise ValueError("the fp8 backend quantizes per tensor to 8 bits: drop `nbits`/`q_group_size`")
        if self.backend == "quanto" and self.nbits == 8:
            raise ValueError("the quanto backend stores 2 or 4 bits (nbits: 2 or 4); use hqq or fp8 for 8 bits")
        if isinstance(self.eos_token, int) and self.eos_token < 0:
            raise ValueError("`eos_token` is a token id (>= 0), `model` or `none`")
        if self.init_std is not None and self.model not in PRESET_NAMES:
            raise ValueError("`init_std` applies only to a preset model, not to weights loaded from a directory")
        # "org/name" is how hub ids look: accept it only when such a directory exists here
        if not self.is_preset and not self.model.startswith(("/", "./", "../", "~")) and not Path(self.model).is_dir():
            raise ValueError(
                f"model {self.model!r} is neither a preset ({', '.join(PRESET_NAMES)}) nor a local directory "
                "path (start it with /, ./ or ~/): gate never downloads from a hub"
            )
        return self

    @property
    def is_preset(self) -> bool:
        return self.model in PRESET_NAMES
