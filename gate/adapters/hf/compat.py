"""The one place that knows how transformers 5.x moved its cache API (supported: >=5.2,<6).

Everything else in the adapter calls these functions and never branches on a version. Each
difference is detected from the installed code, not from a version string; they are tabled in
docs/hf-adapter.md ("transformers versions"). Only interfaces are adapted here, never behaviour:
where a release computes something wrong, the adapter calls it as shipped and gate reports the bug.
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass
from functools import cache
from typing import Any

import torch
import transformers as _transformers
from transformers import cache_utils as _cache_utils
from transformers import masking_utils as _masking_utils
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS as _ATTENTION_FUNCTIONS

from gate.errors import AdapterUnavailable, SubjectCrash
from gate.protocols import subject_call

# transformers' own annotations change from release to release; the adapter treats its objects as Any
transformers: Any = _transformers
cache_utils: Any = _cache_utils
masking_utils: Any = _masking_utils
ATTENTION_FUNCTIONS: Any = _ATTENTION_FUNCTIONS

SUPPORTED = ">=5.2,<6"
"""The transformers range this module is written and tested for."""

_STATIC_CROP = "crop" in vars(cache_utils.StaticLayer)


@dataclass(frozen=True)
class CacheAPI:
    """What the installed transformers offers, detected once per model class."""

    version: str
    cache_kwarg: str
    """Name of forward's cache argument: `cache` (5.24+) or `past_key_values`."""
    takes_cache_position: bool
    """forward accepts `cache_position` (before 5.4)."""
    static_crop: bool
    """StaticCache can be cropped (5.15+); before, truncation zeroes the dropped slots."""
    fp8_backend: bool
    """QuantizedCache accepts backend="fp8"."""
    generate_max_cache_len: bool
    """generate() sizes a static cache from `max_cache_len` (5.13+)."""
    ensemble_verification: bool
    """GenerationConfig has `assistant_ensemble_weight` (static ensemble verification; from 5.14; not in 5.2-5.13)."""


@cache
def _api_for(model_class: Any) -> CacheAPI:
    params = inspect.signature(model_class.forward).parameters
    return CacheAPI(
        version=transformers.__version__,
        cache_kwarg="cache" if "cache" in params else "past_key_values",
        takes_cache_position="cache_position" in params,
        static_crop=_STATIC_CROP,
        fp8_backend=hasattr(cache_utils, "Fp8QuantizedLayer"),
        generate_max_cache_len="max_cache_len" in transformers.GenerationConfig().to_dict(),
        ensemble_verification="assistant_ensemble_weight" in transformers.GenerationConfig().to_dict(),
    )


def cache_api(model: torch.nn.Module) -> CacheAPI:
    model_class: Any = type(model)
    return _api_for(model_class)


def check_version() -> None:
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    if major != 5 or minor < 2:
        raise AdapterUnavailable(
            f"the hf adapter supports transformers {SUPPORTED}; this environment has {transformers.__version__} "
            "(pip install 'gate[hf]')"
        )


def batch_cache_position(model: Any, start: int, n: int, device: Any) -> torch.Tensor | None:
    """The `cache_position` of a batch whose rows count positions from their own first token: the
    cache columns `start .. start + n - 1` before 5.4; None from 5.4."""
    return torch.arange(start, start + n, device=device) if cache_api(model).takes_cache_position else None


def forward(
    model: torch.nn.Module,
    tokens: torch.Tensor,
    cache: Any | None,
    positions: torch.Tensor | None,
    *,
    cache_position: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
) -> Any:
    """One forward of `tokens` [B, n] against `cache` (None: no cache, a full causal pass).

    positions: [B, n] absolute positions, or None to let the model count from the cache length;
    before 5.4 they also go in as `cache_position`, unless `cache_position` (a fault) overrides it.
    """
    api = cache_api(model)
    kwargs: dict[str, Any] = {"use_cache": cache is not None}
    if cache is not None:
        kwargs[api.cache_kwarg] = cache
    if positions is not None:
        kwargs["position_ids"] = positions
        if api.takes_cache_position and cache_position is None:
            kwargs["cache_position"] = positions[0]
    if cache_position is not None:
        kwargs["cache_position"] = cache_position
    if attention_mask is not None:
        kwargs["attention_mask"] = attention_mask
    seen = int(positions[0, 0]) if positions is not None and positions.numel() else _seen(cache)
    with subject_call(f"{type(model).__name__}.forward", length=seen, tokens=int(tokens.shape[1])):
        return model(input_ids=tokens, **kwargs)


def _seen(cache: Any | None) -> int:
    try:
        return seq_length(cache) if cache is not None else 0
    except Exception:  # where the length cannot be read, the call's record says 0
        return 0


def position_inputs(model: torch.nn.Module) -> tuple[str, ...]:
    """The forward arguments through which `forward()` hands a session's position count to the model."""
    return ("position_ids", "cache_position") if cache_api(model).takes_cache_position else ("position_ids",)


def probe_supported() -> bool:
    """Whether the attention probe is validated here: the 5.24 masking API, which counts query positions
    from the cache (earlier ones build the mask from `cache_position`, where the probe would be wrong)."""
    return "cache" in inspect.signature(masking_utils.create_causal_mask).parameters


def attention_function(model: Any) -> Any:
    """The attention function the model's layers call (else the eager one of its modeling module)."""
    eager = sys.modules[type(model).__module__].eager_attention_forward
    return ATTENTION_FUNCTIONS.get_interface(model.config._attn_implementation, eager)


def can_leave_paged(model: Any) -> bool:
    """The release lets a caller switch a built model's attention implementation (what the fault does)."""
    return callable(getattr(model, "set_attn_implementation", None))


def causal_mask(
    make: Any, *, config: Any, inputs_embeds: torch.Tensor, attention_mask: Any, cache: Any, positions: torch.Tensor
) -> Any:
    """Call a masking_utils mask builder for queries at `positions` [B, n] against `cache`."""
    kwargs: dict[str, Any] = {"cache": cache}
    if "cache" not in inspect.signature(make).parameters:
        kwargs = {"past_key_values": cache, "cache_position": positions[0]}
    return make(
        config=config, inputs_embeds=inputs_embeds, attention_mask=attention_mask, position_ids=positions, **kwargs
    )


def mask_sizes(cache: Any, query_length: int, positions: torch.Tensor) -> tuple[int, int]:
    """(kv_length, kv_offset) the model's mask will span for the next `query_length` tokens."""
    try:
        kv_length, kv_offset = cache.get_mask_sizes(query_length, 0)
    except (TypeError, AttributeError):
        kv_length, kv_offset = cache.get_mask_sizes(positions[0], 0)
    return int(kv_length), int(kv_offset)


def reset(cache: Any) -> None:
    """The library's own `Cache.reset()`, and nothing else (5.2-5.17's bug is judged as shipped)."""
    with subject_call(f"{type(cache).__name__}.reset", length=_seen(cache)):
        cache.reset()


def reorder_cache(cache: Any, beam_idx: torch.Tensor) -> None:
    """The library's own `Cache.reorder_cache(beam_idx)` (row i takes old row beam_idx[i])."""
    with subject_call(f"{type(cache).__name__}.reorder_cache", length=_seen(cache), rows=int(beam_idx.numel())):
        cache.reorder_cache(beam_idx)


def keep_counter(cache: Any, length: int) -> None:
    """Set a cache's position counter back to `length` after a reset zeroed its K/V (the reset-state
    bug, planted in the library's own object), where the length is a counter."""
    for layer in cache.layers:
        counter = getattr(layer, "cumulative_length", None)
        if isinstance(counter, torch.Tensor):
            counter.fill_(length)


def seq_length(cache: Any) -> int:
    """Tokens the cache has seen (a StaticLayer returns a tensor)."""
    return int(cache.get_seq_length())


def drop_last(cache: Any, n: int, *, lossy: bool = False) -> None:
    """Remove the last `n` tokens from every layer of `cache` (`crop(-n)` means "drop n" on every
    version). With `lossy` (a fault), a sliding layer that has already evicted is cut anyway."""
    if n <= 0:
        return
    if isinstance(cache, cache_utils.StaticCache) and not _STATIC_CROP:
        # 5.2-5.14: no StaticLayer.crop; the length is the count of nonzero slots, so zero them.
        length = seq_length(cache)
        for layer in cache.layers:
            layer.keys[:, :, length - n : length] = 0
            layer.values[:, :, length - n : length] = 0
        return
    try:
        with subject_call(f"{type(cache).__name__}.crop", length=seq_length(cache), drop=n):
            cache.crop(-n)
    except SubjectCrash as crash:
        if not lossy or not isinstance(crash.error, (RuntimeError, ValueError)):
            raise
        for layer in cache.layers:
            layer.keys = layer.keys[..., : max(layer.keys.shape[-2] - n, 0), :]
            layer.values = layer.values[..., : max(layer.values.shape[-2] - n, 0), :]
            if isinstance(getattr(layer, "cumulative_length", None), int):
                layer.cumulative_length -= n


def can_drop(cache: Any, n: int) -> bool:
    """Whether `drop_last(cache, n)` restores exactly the state of n tokens ago."""
    return n <= 0 or not any(
        getattr(layer, "is_sliding", False)
        and (window := getattr(layer, "sliding_window", None))
        and int(layer.get_seq_length()) >= window
        for layer in cache.layers
    )


# ---- cache construction ---------------------------------------------------------------------------


def dynamic_cache(config: Any, *, offloading: bool = False) -> Any:
    return cache_utils.DynamicCache(config=config, offloading=offloading)


def static_cache(config: Any, max_cache_len: int, *, offloading: bool = False) -> Any:
    return cache_utils.StaticCache(config=config, max_cache_len=max_cache_len, offloading=offloading)


def sliding_cache(config: Any, window: int) -> Any:
    """A cache whose every layer keeps only the last `window - 1` tokens (the model's own attention may be full)."""
    layers = [cache_utils.DynamicSlidingWindowLayer(sliding_window=window) for _ in range(config.num_hidden_layers)]
    return cache_utils.Cache(layers=layers)


def quantized_cache(
    config: Any,
    backend: str,
    *,
    nbits: int | None,
    residual_length: int | None,
    q_group_size: int | None,
) -> Any:
    if backend == "fp8":
        if not hasattr(cache_utils, "Fp8QuantizedLayer"):
            raise AdapterUnavailable(
                f"transformers {transformers.__version__} has no fp8 QuantizedCache backend "
                "(Fp8QuantizedLayer arrived in 5.21)"
            )
        return _new_quantized(backend="fp8", config=config)
    package, module = {"quanto": ("optimum-quanto", "optimum.quanto"), "hqq": ("hqq", "hqq")}[backend]
    try:
        __import__(module)
    except ImportError as err:
        raise AdapterUnavailable(
            f"QuantizedCache backend {backend!r} needs the {package} package (pip install {package}): {err}"
        ) from err
    kwargs = {"nbits": nbits, "residual_length": residual_length, "q_group_size": q_group_size}
    return _new_quantized(backend=backend, config=config, **{k: v for k, v in kwargs.items() if v is not None})


def _new_quantized(**kwargs: Any) -> Any:
    """A QuantizedCache; where transformers refuses this model (5.24: a model with sliding layers),
    AdapterUnavailable in the library's words: this release offers no such cache for it."""
    try:
        return cache_utils.QuantizedCache(**kwargs)
    except ValueError as err:
        raise AdapterUnavailable(
            f"transformers {transformers.__version__} has no QuantizedCache for this model: {err}"
        ) from err


# ---- reading a cache back -------------------------------------------------------------------------


def _tensors(value: Any) -> list[torch.Tensor]:
    """The tensors that hold `value`'s storage (quanto's QTensors flatten to their inner data)."""
    if isinstance(value, torch.Tensor):
        flatten = getattr(value, "__tensor_flatten__", None)
        if flatten is not None and type(value) is not torch.Tensor and not isinstance(value, torch.nn.Parameter):
            names, _ = flatten()
            return [t for name in names for t in _tensors(getattr(value, name))]
        return [value]
    if isinstance(value, (tuple, list, dict)):
        return [t for item in (value.values() if isinstance(value, dict) else value) for t in _tensors(item)]
    return []


def cache_bytes(cache: Any) -> int:
    """Bytes the cache holds: allocated K/V, quantized payloads, scales and zero points, residual tokens."""
    unique: dict[int, torch.Tensor] = {}  # by storage: a tensor held twice counts once
    for layer in cache.layers:
        for name, value in vars(layer).items():
            if name not in ("device", "_sliding_window_tensor", "cumulative_length"):
                for tensor in _tensors(value):
                    unique.setdefault(tensor.data_ptr() if tensor.numel() else id(tensor), tensor)
    return sum(tensor.numel() * tensor.element_size() for tensor in unique.values())


def layer_kv(cache: Any, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The K/V one layer attends over, dequantized, valid slots only: k, v [B, H_kv, T_kept, D]."""
    layer = cache.layers[layer_idx]
    keys, values = layer.keys, layer.values
    if isinstance(layer, cache_utils.StaticLayer):
        keep = min(int(layer.get_seq_length()), getattr(layer, "sliding_window", None) or layer.max_cache_len)
        return keys[:, :, :keep], values[:, :, :keep]
    quantized_keys = getattr(layer, "_quantized_keys", None)
    if quantized_keys is not None:
        old_k = layer._dequantize(quantized_keys)
        old_v = layer._dequantize(layer._quantized_values)
        pending = getattr(layer, "_pending_beam_idx", None)  # 5.23+: a beam reorder applied at the next update
        if isinstance(pending, torch.Tensor):
            order = pending.to(old_k.device)
            old_k, old_v = old_k.index_select(0, order), old_v.index_select(0, order)
        if keys is None or keys.numel() == 0:
            return old_k, old_v
        return torch.cat([old_k, keys], dim=-2), torch.cat([old_v, values], dim=-2)
    return keys, values


def kept_tokens(cache: Any) -> list[int]:
    """Tokens each layer still holds (a sliding layer keeps window - 1; a press keeps what it chose)."""
    return [
        int(layer_kv(cache, i)[0].shape[-2]) if getattr(layer, "keys", None) is not None else 0
        for i, layer in enumerate(cache.layers)
    ]


def evicted_tokens(cache: Any, seen: int) -> int:
    """Tokens seen but no longer held, summed over layers (sliding windows, presses)."""
    return sum(max(seen - kept, 0) for kept in kept_tokens(cache))


def output_cache(output: Any) -> Any:
    """The cache a generate()/forward output carries (`cache` from 5.24, `past_key_values` before)."""
    found = getattr(output, "cache", None)
    return found if found is not None else getattr(output, "past_key_values", None)


def full_dynamic_cache(kv_dtype: torch.dtype | None = None) -> Any:
    """A DynamicCache of full layers; with `kv_dtype`, K/V rounded to that dtype on every write."""
    return cache_utils.DynamicCache() if kv_dtype is None else _RoundingDynamicCache(kv_dtype)


class _RoundingDynamicCache(cache_utils.DynamicCache):  # type: ignore[misc]
    def __init__(self, kv_dtype: torch.dtype) -> None:
        super().__init__()
        self.kv_dtype = kv_dtype

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kw: Any
    ) -> Any:
        rounded_k = key_states.to(self.kv_dtype).to(key_states.dtype)
        rounded_v = value_states.to(self.kv_dtype).to(value_states.dtype)
        return super().update(rounded_k, rounded_v, layer_idx, *args, **kw)


# ---- continuous batching --------------------------------------------------------------------------


def _continuous_config_fields() -> set[str]:
    config = getattr(transformers, "ContinuousBatchingConfig", None)
    return set(inspect.signature(config).parameters) if config is not None else set()


def page_field() -> str | None:
    """The ContinuousBatchingConfig field that sizes a page of the paged cache (None before 5.4)."""
    return next((name for name in ("page_size", "block_size") if name in _continuous_config_fields()), None)


def require_continuous_batching() -> None:
    """AdapterUnavailable unless transformers has the paged-scheduling API of 5.4+."""
    needed = {"max_batch_tokens", "use_cuda_graph", "allow_block_sharing"}
    if page_field() is None or not needed <= _continuous_config_fields():
        raise AdapterUnavailable(
            f"transformers {transformers.__version__} has no ContinuousBatchingConfig(page_size=... or "
            "block_size=...): the generate-paged sessions need the paged-scheduling API of 5.4+"
        )


def paged_config(page_size: int, requests: int, max_len: int) -> Any:
    """Continuous batching that schedules at most one page of tokens per forward, with room for every
    request's whole history, without CUDA graphs or block sharing (every row computed, with a logit)."""
    return transformers.ContinuousBatchingConfig(
        **{str(page_field()): page_size},
        num_blocks=requests * -(-(max_len + 1) // page_size) + 2,  # every request's whole history, in pages
        max_batch_tokens=page_size,
        use_cuda_graph=False,
        allow_block_sharing=False,
    )


def generate_batch_options(model: Any) -> dict[str, Any]:
    """`warmup=False` where generate_batch takes it (a warm-up pass would add uncounted forwards)."""
    return {"warmup": False} if "warmup" in inspect.signature(model.generate_batch).parameters else {}


def generate_batch(model: Any, requests: list[list[int]], page: int, max_len: int, new_tokens: int) -> Any:
    """The release's continuous batching over `requests` (token id lists), greedy: outputs by request id."""
    return model.generate_batch(
        requests,
        generation_config=greedy_config(new_tokens, eos_token_id=-1),
        continuous_batching_config=paged_config(page, len(requests), max_len),
        progress_bar=False,
        **generate_batch_options(model),
    )


def failed_request(out: Any, context: dict[str, Any]) -> None:
    """SubjectCrash when continuous batching reports a request it failed (it keeps running the rest)."""
    failed = [result.error for result in out.values() if getattr(result, "error", None)]
    if failed:
        raise SubjectCrash(
            "generate_batch", RuntimeError(f"continuous batching failed a request: {failed[0]}"), context
        )


def greedy_config(n_tokens: int, **settings: Any) -> Any:
    return transformers.GenerationConfig(
        **{"do_sample": False, "max_new_tokens": n_tokens, "eos_token_id": None, "pad_token_id": 0, **settings}
    )
