"""Approximate-cache paths through the reference decoder: `quantized` and `evicting`.

Registered in `gate.adapters.reference.PATHS`. Each is an ordinary cached `ReferencePath` over an
empty dynamic-layout cache, plus a cache hook that wraps every new cache
(gate.models.kv_approx) and a session hook that adds the approximation's own numbers (bits,
tokens quantised, tokens kept and evicted) to `exercise()`. Faults still apply on top.
"""

from __future__ import annotations

from typing import Any

from gate.adapters.reference import Options
from gate.adapters.reference.options import EvictOptions, QuantOptions
from gate.adapters.reference.paths import ReferencePath
from gate.models.kv_approx import approx_stats, evict_cache, quantize_cache
from gate.models.reference import KVCache, Transformer


class _ApproxSession:
    """A session whose exercise record also says what the approximate cache holds."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def exercise(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self._inner.exercise())
        out.update(approx_stats(self._inner.cache))
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def build_quantized(model: Transformer, options: Options, *, device: str, dtype: str, seed: int) -> ReferencePath:
    q = getattr(options, "quant", None) or QuantOptions()

    def hook(cache: KVCache) -> None:
        quantize_cache(cache, bits=q.bits, group_size=q.group_size, key_axis=q.key_axis, residual=q.residual)

    name = f"reference:quantized[int{q.bits},g{q.group_size},{q.key_axis}" + (f",r{q.residual}]" if q.residual else "]")
    return ReferencePath(
        name=name,
        model=model,
        dtype=dtype,
        device=device,
        seed=seed,
        layout="dynamic",
        block_size=options.block_size,
        cache_hooks=[hook],
        session_hooks=[_ApproxSession],
    )


def build_evicting(model: Transformer, options: Options, *, device: str, dtype: str, seed: int) -> ReferencePath:
    e = getattr(options, "evict", None)
    if e is None:
        raise ValueError("path 'evicting' needs `evict: {window: N}`")
    assert isinstance(e, EvictOptions)

    def hook(cache: KVCache) -> None:
        evict_cache(cache, window=e.window, sink=e.sink, refuse_up_to=e.refuse_prompts_up_to)

    name = f"reference:evicting[sink{e.sink}+window{e.window},chunk{e.chunk_size}]"
    return ReferencePath(
        name=name,
        model=model,
        dtype=dtype,
        device=device,
        seed=seed,
        layout="dynamic",
        chunk_size=e.chunk_size,
        block_size=options.block_size,
        cache_hooks=[hook],
        session_hooks=[_ApproxSession],
    )
