"""Approximate KV caches, applied to a built `KVCache` from outside the model.

These wrappers replace `update` (and `kv`, `reset`, `crop`, `nbytes`) on one cache instance, so
gate.models.reference never learns that a cache can be approximate: `quantize_cache` stores integer
codes (gate.models.kv_quant), `evict_cache` keeps sinks, a window and a scored budget
(gate.models.kv_evict). Use an empty dynamic cache: the wrappers keep their own storage, so
`nbytes()` counts only what the approximation holds.
"""

from __future__ import annotations

from typing import Any

import torch

from gate.models.evict_faults import EVICT_FAULTS
from gate.models.kv_evict import EvictingStore
from gate.models.kv_quant import QUANT_FAULTS, KeyAxis, QuantizedStore
from gate.models.reference import KVCache


def _install(cache: KVCache, store: Any, update: Any, kv: Any, no_rollback: str) -> None:
    """Route `cache`'s writes and reads through an approximate `store` (from outside the model):
    reset clears the store and the position, and a crop that would roll back is refused."""

    def reset() -> None:
        store.clear()
        cache.pos = 0

    def crop(n: int) -> None:
        if n < cache.pos:
            raise NotImplementedError(no_rollback)

    cache.update = update  # type: ignore[method-assign]
    cache.kv = kv  # type: ignore[method-assign]
    cache.reset = reset  # type: ignore[method-assign]
    cache.crop = crop  # type: ignore[method-assign]
    cache.nbytes = store.nbytes  # type: ignore[method-assign]
    cache.approx = store  # type: ignore[attr-defined]


def quantize_cache(
    cache: KVCache,
    *,
    bits: int,
    group_size: int = 32,
    key_axis: KeyAxis = "token",
    residual: int = 0,
    fault: str | None = None,
    record: bool = False,
) -> QuantizedStore:
    """Make `cache` store K/V as `bits`-bit codes and dequantise on read. Returns the store.
    `fault`: one of QUANT_FAULTS; `record`: keep what is written (quant-invariants)."""
    if bits not in (4, 8):
        raise ValueError("bits must be 8 or 4")
    if fault is not None and fault not in QUANT_FAULTS:
        raise ValueError(f"unknown quantisation fault {fault!r} (known: {', '.join(QUANT_FAULTS)})")
    bits = (4 if bits == 8 else 8) if fault == "quant-bits-ignored" else bits
    store = QuantizedStore(bits, group_size, key_axis, residual, len(cache.k), fault=fault, record=record)

    def update(layer: int, start_pos: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if start_pos != store.keys[layer].length():
            raise ValueError(
                f"quantised cache is append-only: write at {start_pos}, holding {store.keys[layer].length()}"
            )
        return store.update(layer, k, v)

    def kv(layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        dtype = cache.k[layer].dtype
        return store.keys[layer].read(dtype), store.values[layer].read(dtype)

    _install(cache, store, update, kv, "a quantised cache cannot roll back (codes of a group are shared)")
    return store


def evict_cache(
    cache: KVCache,
    *,
    window: int,
    sink: int = 0,
    refuse_up_to: int = 0,
    budget: int | None = None,
    score: str = "position",
    fault: str | None = None,
) -> EvictingStore:
    """Make `cache` keep only the first `sink` and the last `window` tokens (and, with a `budget`, the
    highest-scored others up to it). Returns the store. A first write of at most `refuse_up_to` tokens
    raises AssertionError, as kvpress's StreamingLLMPress refuses a prompt not longer than its sinks."""
    if window < 1 or sink < 0:
        raise ValueError("window must be >= 1 and sink >= 0")
    if budget is not None and budget < sink + window:
        raise ValueError(f"budget {budget} must be at least sink + window ({sink + window})")
    if fault is not None and fault not in EVICT_FAULTS:
        raise ValueError(f"unknown eviction fault {fault!r} (known: {', '.join(EVICT_FAULTS)})")
    store = EvictingStore(window, sink, len(cache.k), budget=budget, score=score, fault=fault)

    def update(layer: int, start_pos: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if start_pos == 0 and int(k.shape[2]) <= refuse_up_to:
            raise AssertionError(f"Input should contain more tokens than n_sink={refuse_up_to}")
        return store.update(layer, k, v)

    def kv(layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        k, v = store.k[layer], store.v[layer]
        if k is None or v is None:
            empty = cache.k[layer][:, :, :0]
            return empty, empty
        return k, v

    _install(cache, store, update, kv, "an evicting cache cannot roll back")
    return store


def approx_stats(cache: KVCache) -> dict[str, Any]:
    """What an approximate cache holds right now (for a session's exercise record)."""
    store = getattr(cache, "approx", None)
    if isinstance(store, QuantizedStore):
        return {
            "kv_bits": store.bits,
            "kv_group_size": store.group_size,
            "kv_key_axis": store.key_axis,
            "quantized_tokens": store.quantized_tokens(),
            "full_precision_tokens": cache.pos - store.quantized_tokens(),
        }
    if isinstance(store, EvictingStore):
        return {
            "evict_window": store.window,
            "evict_sink": store.sink,
            "kept_tokens": store.kept(),
            "evicted_tokens": store.seen - store.kept(),
        }
    return {}


__all__ = ["QUANT_FAULTS", "approx_stats", "evict_cache", "quantize_cache"]
