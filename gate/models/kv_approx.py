"""Approximate KV caches, applied to a built `KVCache` from outside the model.

The reference decoder reads K/V only through `cache.update(layer, start_pos, k, v)`, which returns
what attention sees. These wrappers replace that method (and `kv`, `reset`, `crop`, `nbytes`) on
one cache instance, the way gate.models.faults patches caches, so `gate.models.reference` never learns
that a cache can be approximate:

* `quantize_cache(cache, bits=8|4, group_size=32, key_axis="token"|"channel", residual=0)`:
  stores integer codes plus a float16 scale and minimum per group and dequantises on every read.
  Values are grouped per token along the head dimension; keys the same, or per channel over
  groups of `group_size` tokens (KIVI: key outliers live in channels), with the newest tokens of
  an unfilled group kept in full precision. int4 codes are packed two per byte.
* `evict_cache(cache, window=w, sink=s, budget=n, score="position"|"knorm")`: after every write
  keeps the first `s` tokens (attention sinks, StreamingLLM), the last `w` and the newest, plus,
  up to `n` per layer and KV head, the highest-scored others (knorm: minus the key's L2 norm), and
  drops the rest; the store records what it kept and the position each kept entry carries
  (`log`, gate.protocols.EvictionStep, for gate.checks.evict_invariants). Positions are not re-assigned: RoPE
  was applied before the write, so a kept key keeps its original position. With chunked prefill a
  query sees the kept tokens plus its own chunk, as in streaming.

Use an empty cache of the dynamic layout: the wrappers keep their own storage and never touch the
base buffers, so `nbytes()` counts only what the approximation really holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from gate.models.evict_faults import EVICT_FAULTS
from gate.models.reference import KVCache
from gate.protocols import EvictionStep, QuantScheme, QuantState, QuantTensorState

KeyAxis = Literal["token", "channel"]
SCALE_DTYPE = torch.float16


# -- quantisation ------------------------------------------------------------------------------


@dataclass
class Quantized:
    """Integer codes of a [B, H, T, D] tensor with per-group scale and minimum.

    axis="token": groups of `group` channels within one token; scale, low: [B, H, T, D // group].
    axis="channel": groups of `group` tokens within one channel; scale, low: [B, H, T // group, D].
    codes: [B, H, T, D] uint8, or [B, H, T, D // 2] with two 4-bit codes per byte."""

    codes: torch.Tensor
    scale: torch.Tensor
    low: torch.Tensor
    bits: int
    group: int
    axis: KeyAxis

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.codes, self.scale, self.low))


def _grouped(x: torch.Tensor, group: int, axis: KeyAxis) -> torch.Tensor:
    # [B, H, T, D] -> token: [B, H, T, D/g, g]; channel: [B, H, T/g, g, D]
    b, h, t, d = x.shape
    if axis == "token":
        return x.reshape(b, h, t, d // group, group)
    return x.reshape(b, h, t // group, group, d)


def quantize(x: torch.Tensor, bits: int, group: int, axis: KeyAxis, *, levels_bits: int | None = None) -> Quantized:
    """Asymmetric min-max quantisation of x [B, H, T, D] in groups along `axis` (`levels_bits`: a
    planted fault's fewer levels than the `bits` the codes are stored in)."""
    levels = (1 << (levels_bits or bits)) - 1
    g = _grouped(x.float(), group, axis)
    reduce = -1 if axis == "token" else -2
    low = g.amin(dim=reduce, keepdim=True)
    scale = ((g.amax(dim=reduce, keepdim=True) - low) / levels).clamp_min(1e-8)
    # round the stored parameters first, so codes are computed against what a read will use
    low, scale = low.to(SCALE_DTYPE), scale.to(SCALE_DTYPE).clamp_min(torch.finfo(SCALE_DTYPE).tiny)
    codes = ((g - low.float()) / scale.float()).round().clamp(0, levels).to(torch.uint8).reshape(x.shape)
    if bits == 4:
        codes = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return Quantized(codes, scale.squeeze(reduce), low.squeeze(reduce), bits, group, axis)


def dequantize(q: Quantized, dtype: torch.dtype) -> torch.Tensor:
    """The [B, H, T, D] tensor a read sees."""
    codes = q.codes
    if q.bits == 4:
        codes = torch.stack([codes & 0xF, codes >> 4], dim=-1).flatten(-2)
    g = _grouped(codes.float(), q.group, q.axis)
    expand = -1 if q.axis == "token" else -2
    x = g * q.scale.float().unsqueeze(expand) + q.low.float().unsqueeze(expand)
    return x.reshape(codes.shape).to(dtype)


def _cat(parts: list[Quantized]) -> Quantized:
    first = parts[0]
    dim = 2  # tokens
    return Quantized(
        torch.cat([p.codes for p in parts], dim=dim),
        torch.cat([p.scale for p in parts], dim=dim),
        torch.cat([p.low for p in parts], dim=dim),
        first.bits,
        first.group,
        first.axis,
    )


@dataclass
class _QuantLayer:
    """One layer's K or V: quantised history plus a full-precision residual of the newest tokens."""

    stored: Quantized | None = None
    residual: torch.Tensor | None = None  # [B, H, r, D]
    written: list[torch.Tensor] | None = None
    """Every chunk written, as written, where the store records them (quant-invariants reads them)."""

    def length(self) -> int:
        n = 0 if self.stored is None else self.stored.codes.shape[2]
        return n + (0 if self.residual is None else self.residual.shape[2])

    def nbytes(self) -> int:
        res = 0 if self.residual is None else self.residual.numel() * self.residual.element_size()
        return res + (0 if self.stored is None else self.stored.nbytes())


@dataclass
class QuantizedStore:
    """What a quantised cache holds, per layer, for keys and values."""

    bits: int
    group_size: int
    key_axis: KeyAxis
    residual: int
    n_layers: int
    keys: list[_QuantLayer] = field(default_factory=list)
    values: list[_QuantLayer] = field(default_factory=list)
    fault: str | None = None
    """A planted bookkeeping fault (QUANT_FAULTS), applied inside the store's own writes."""
    record: bool = False
    """Keep every chunk written (quant-invariants compares stored with written)."""

    def __post_init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.keys = [_QuantLayer(written=[] if self.record else None) for _ in range(self.n_layers)]
        self.values = [_QuantLayer(written=[] if self.record else None) for _ in range(self.n_layers)]

    def group_for(self, axis: KeyAxis, head_dim: int) -> int:
        return self.group_size if axis == "channel" else min(self.group_size, head_dim)

    def _write(self, slot: _QuantLayer, x: torch.Tensor, axis: KeyAxis) -> torch.Tensor:
        group = self.group_for(axis, x.shape[-1])
        if axis == "token" and x.shape[-1] % group:
            raise ValueError(f"group_size {group} must divide head_dim {x.shape[-1]}")
        if slot.written is not None:
            slot.written.append(x.detach().clone())
        pending = x if slot.residual is None else torch.cat([slot.residual, x], dim=2)
        keep = self.residual + (2 if self.fault == "quant-residual-overflow" else 0)  # flushes two tokens late
        over = pending.shape[2] - keep
        n_quant = max(0, over) if axis == "token" else max(0, over) // group * group
        if n_quant:
            fresh = quantize(
                pending[:, :, :n_quant],
                self.bits,
                group,
                axis,
                levels_bits=self.bits // 2 if self.fault == "quant-bits-lower" else None,
            )
            if self.fault == "quant-scale-wrong":  # codes computed against one scale, another one stored
                fresh.scale = (fresh.scale.float() * 1.25).to(SCALE_DTYPE)
            slot.stored = fresh if slot.stored is None else _cat([slot.stored, fresh])
        slot.residual = pending[:, :, n_quant:].clone()
        parts = [] if slot.stored is None else [dequantize(slot.stored, x.dtype)]
        return torch.cat([*parts, slot.residual], dim=2)

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (self._write(self.keys[layer], k, self.key_axis), self._write(self.values[layer], v, "token"))

    def nbytes(self) -> int:
        return sum(s.nbytes() for s in (*self.keys, *self.values))

    def quantized_tokens(self) -> int:
        s = self.keys[0].stored
        return 0 if s is None else int(s.codes.shape[2])


QUANT_FAULTS: dict[str, str] = {
    "quant-residual-overflow": "the full-precision residual is flushed two tokens late: the cache keeps "
    "residual + 2 tokens unquantised while it states `residual` (quant-residual-overflow)",
    "quant-scale-wrong": "each group's codes are computed against its scale, but 1.25 x that scale is stored "
    "and read back (quant-error-bound)",
    "quant-bits-lower": "codes use the levels of half the bits (16 for int8, 4 for int4) while the cache "
    "stores and states the full bits (quant-error-bound)",
    "quant-bits-ignored": "the cache is built with the other width (4 bits where 8 are declared, 8 where 4 "
    "are), stating what it runs: an option dropped on the way to the cache (quant-config-mismatch)",
}
"""Planted bookkeeping bugs of the quantised cache (path: quantized only), each breaking one invariant."""


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
        k_slot, v_slot = store.keys[layer], store.values[layer]
        read = [[dequantize(s.stored, dtype)] if s.stored is not None else [] for s in (k_slot, v_slot)]
        return (
            torch.cat([*read[0], *([] if k_slot.residual is None else [k_slot.residual])], dim=2),
            torch.cat([*read[1], *([] if v_slot.residual is None else [v_slot.residual])], dim=2),
        )

    _install(cache, store, update, kv, "a quantised cache cannot roll back (codes of a group are shared)")
    return store


def scheme_of(bits: int, group_size: int, key_axis: KeyAxis, residual: int) -> QuantScheme:
    """The scheme of `quantize_cache(bits, group_size, key_axis, residual)`: a channel-grouped key
    keeps the newest tokens of an unfilled group in full precision beside the residual."""
    extra = group_size - 1 if key_axis == "channel" else 0
    return QuantScheme(
        bits=bits, group_size=group_size, key_axis=key_axis, value_axis="token", max_residual=residual + extra
    )


def _per_element(q: Quantized, t: torch.Tensor) -> torch.Tensor:
    """A per-group tensor ([B, H, T, D/g] or [B, H, T/g, D]) repeated onto its group's elements."""
    return t.repeat_interleave(q.group, dim=-1 if q.axis == "token" else 2)


def _tensor_state(name: str, slot: _QuantLayer, dtype: torch.dtype) -> QuantTensorState:
    assert slot.written is not None, "the store records nothing: build it with record=True"
    written = torch.cat(slot.written, dim=2) if slot.written else torch.zeros(0)
    residual = slot.residual if slot.residual is not None else written[:, :, :0]
    q = slot.stored
    if q is None:
        empty = written[:, :, :0]
        return QuantTensorState(name, written, empty, residual, empty, empty, empty.long())
    groups = torch.arange(q.scale.numel(), device=q.scale.device).reshape(q.scale.shape)
    return QuantTensorState(
        name,
        written,
        dequantize(q, dtype),
        residual,
        _per_element(q, q.scale.float()),
        _per_element(q, q.low.float()),
        _per_element(q, groups),
    )


def quant_state(store: QuantizedStore, dtype: torch.dtype) -> QuantState:
    """What the store holds now, every layer's keys and values (it must record what is written)."""
    tensors = [
        _tensor_state(f"layer {i} {kind}", slot, dtype)
        for i in range(store.n_layers)
        for kind, slot in (("keys", store.keys[i]), ("values", store.values[i]))
    ]
    stated = scheme_of(store.bits, store.group_size, store.key_axis, store.residual)
    return QuantState(stated=stated, nbytes=store.nbytes(), tensors=tuple(tensors))


# -- eviction ----------------------------------------------------------------------------------


@dataclass
class EvictingStore:
    """Kept K/V per layer ([B, H_kv, kept, D]), the position each kept entry carries ([B, H_kv, kept])
    and how many tokens were written. Keeps the first `sink` tokens, the last `window` and, up to
    `budget` per layer and KV head, the highest of `score` (`position`: none; `knorm`: minus the
    key's L2 norm, in float32); `fault` plants one of EVICT_FAULTS."""

    window: int
    sink: int
    n_layers: int
    budget: int | None = None
    score: str = "position"
    fault: str | None = None
    k: list[torch.Tensor | None] = field(default_factory=list)
    v: list[torch.Tensor | None] = field(default_factory=list)
    pos: list[torch.Tensor | None] = field(default_factory=list)
    seen: int = 0
    """Tokens written to layer 0 since the last reset."""
    log: list[Any] | None = None
    """Where each eviction is recorded (gate.protocols.EvictionStep) once someone watches."""

    def __post_init__(self) -> None:
        self.clear()

    @property
    def capacity(self) -> int:
        return self.budget if self.budget is not None else self.sink + self.window

    def clear(self) -> None:
        self.k = [None] * self.n_layers
        self.v = [None] * self.n_layers
        self.pos = [None] * self.n_layers
        self.seen = 0

    def press_score(self, keys: torch.Tensor) -> torch.Tensor:
        """The press's own score of each key [B, H, N] (higher is kept first)."""
        if self.score == "knorm":
            s: torch.Tensor = -torch.linalg.vector_norm(keys.float(), dim=-1)
        else:
            s = torch.zeros(keys.shape[:3], dtype=torch.float32, device=keys.device)
        return -s if self.fault == "evict-rank-sign" else s

    def _select(self, k: torch.Tensor, pos: torch.Tensor, seen: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(kept pool indices [B, H, K], the press's scores [B, H, N])."""
        scores = self.press_score(k)
        n = k.shape[2]
        if n <= self.capacity:
            return torch.arange(n, device=k.device).expand(*k.shape[:2], n), scores
        protected = (pos < self.sink) | (pos >= seen - self.window) | (pos == seen - 1)
        rank = torch.where(protected, torch.inf, scores)
        victim = {"evict-drop-sink": 0, "evict-window-off-by-one": seen - self.window}.get(self.fault or "")
        if victim is not None:  # the press stops protecting it and ranks it last
            rank = torch.where(pos == victim, -torch.inf, rank)
        extra = int(self.fault == "evict-budget-off-by-one")
        return rank.topk(min(self.capacity + extra, n), dim=-1).indices, scores

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        old_k, old_v, old_pos = self.k[layer], self.v[layer], self.pos[layer]
        b, h, t, _ = k.shape
        seen = self.seen + t if layer == 0 else self.seen  # layer 0 is written first in every forward
        new_pos = torch.arange(seen - t, seen, device=k.device).expand(b, h, t)
        k_all = k if old_k is None else torch.cat([old_k, k], dim=2)
        v_all = v if old_v is None else torch.cat([old_v, v], dim=2)
        pos_all = new_pos if old_pos is None else torch.cat([old_pos, new_pos], dim=2)
        self._keep(layer, k_all, v_all, pos_all, seen)
        if layer == 0:
            self.seen = seen
        return k_all, v_all  # this call's queries still see their own chunk

    def _keep(self, layer: int, k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor, seen: int) -> None:
        keep, scores = self._select(k, pos, seen)
        keep = keep.sort(dim=-1).values
        idx = keep.unsqueeze(-1).expand(-1, -1, -1, k.shape[-1])
        self.k[layer], self.v[layer] = k.gather(2, idx), v.gather(2, idx)
        kept_pos = pos.gather(2, keep)
        if self.fault == "evict-positions-renumbered" and keep.shape[2] < pos.shape[2]:
            kept_pos = torch.arange(keep.shape[2], device=k.device).expand_as(kept_pos).clone()
        self.pos[layer] = kept_pos
        if self.log is not None:
            self.log.append(EvictionStep(layer, seen, pos.clone(), keep, kept_pos.clone(), scores, k.float().clone()))

    def kept(self) -> int:
        k0 = self.k[0]
        return 0 if k0 is None else int(k0.shape[2])

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.k, *self.v) if t is not None)


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
    """Make `cache` keep only the first `sink` and the last `window` tokens (and, with a `budget`,
    the highest-scored others up to it). Returns the store.
    `refuse_up_to`: a first write (a prompt) of at most this many tokens raises AssertionError, as
    kvpress's StreamingLLMPress refuses a prompt not longer than its sinks (0: none refused)."""
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
