"""Quantised K/V storage for gate.models.kv_approx.quantize_cache: integer codes with a float16 scale and
minimum per group, a full-precision residual of the newest tokens, the planted bookkeeping faults
(QUANT_FAULTS), and what the store holds for quant-invariants (quant_state)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

from gate.protocols import QuantScheme, QuantState, QuantTensorState

KeyAxis = Literal["token", "channel"]
SCALE_DTYPE = torch.float16


@dataclass
class Quantized:
    """Integer codes [B, H, T, D] uint8 (or [B, H, T, D // 2], two 4-bit codes per byte) with per-group
    scale and minimum: [B, H, T, D // group] for axis="token", [B, H, T // group, D] for "channel"."""

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


def _cat(a: Quantized, b: Quantized) -> Quantized:
    codes, scale, low = (torch.cat([x, y], dim=2) for x, y in ((a.codes, b.codes), (a.scale, b.scale), (a.low, b.low)))
    return Quantized(codes, scale, low, a.bits, a.group, a.axis)


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

    def read(self, dtype: torch.dtype) -> torch.Tensor:
        """What attention reads: the dequantised history, then the full-precision residual."""
        parts = [] if self.stored is None else [dequantize(self.stored, dtype)]
        return torch.cat([*parts, *([] if self.residual is None else [self.residual])], dim=2)


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
            slot.stored = fresh if slot.stored is None else _cat(slot.stored, fresh)
        slot.residual = pending[:, :, n_quant:].clone()
        return slot.read(x.dtype)

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
