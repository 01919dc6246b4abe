"""Reading transformers' QuantizedCache back (gate.protocols.QuantizedKV, for quant-invariants).

The session reads each QuantizedLayer after every call (quanto's or hqq's payloads, the residual, the
stated scheme) and wraps its `update` and `_quantize` to keep what the model wrote and what each flush
quantised. The fp8 backend (per-tensor scale, no residual) is not read: it offers no QuantizedKV.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch

from gate.adapters.hf import compat
from gate.adapters.hf.paths import HFPath
from gate.adapters.hf.probe import TracingHFPath
from gate.adapters.hf.sessions import CacheSession
from gate.protocols import QuantScheme, QuantState, QuantTensorState

HF_DEFAULTS = {"nbits": 4, "q_group_size": 64, "residual_length": 128, "axis": 0}
"""QuantizedCache's defaults where the manifest leaves an option out."""


def _scheme(
    bits: int, group_size: int, key_axis: Any, value_axis: Any, residual: int, dtype: torch.dtype
) -> QuantScheme:
    return QuantScheme(
        bits=int(bits),
        group_size=int(group_size),
        key_axis=str(key_axis),
        value_axis=str(value_axis),
        max_residual=max(int(residual) - 1, 0),
        param_bytes=dtype.itemsize,
        param_eps=torch.finfo(dtype).eps / 2,
    )


def _params(stored: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Size]:
    """(dequantised, scale, value of code 0, original shape) of one backend's stored tensor, the
    scale and zero point per group (a [G, 1] or [1, G] tensor over the grouped layout)."""
    if isinstance(stored, tuple):  # hqq: (W_q, meta), dequantised as (W_q - zero) * scale
        w_q, meta = stored
        from hqq.core.quantize import Quantizer

        scale, zero = meta["scale"].float(), meta["zero"].float()
        return Quantizer.dequantize(w_q, meta), scale, -zero * scale, meta["shape"]
    scale, shift = stored._scale.float(), stored._shift  # quanto: scale * data - shift (float shift)
    low = -shift.float() if shift.dtype.is_floating_point else -shift.float() * scale
    return stored.dequantize(), scale, low, stored.shape


def _per_element(group_param: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """A [G, 1] or [1, G] per-group tensor expanded over its groups, in the original [B, H, T, D] layout."""
    grouped = tuple(math.prod(shape) // group_param.numel() if d == 1 else d for d in group_param.shape)
    return group_param.expand(grouped).reshape(shape)


class QuantHFSession(CacheSession):
    """A CacheSession over a QuantizedCache whose state is read back after every call."""

    def __init__(self, path: Any, batch_size: int) -> None:
        super().__init__(path, batch_size)
        self._written: dict[tuple[int, int], list[torch.Tensor]] = {}
        self._flushed: dict[tuple[int, int], torch.Tensor] = {}
        self._watched: set[int] = set()

    def _forward(self, phase: str, tokens: torch.Tensor) -> torch.Tensor:
        if id(self.cache) not in self._watched:
            self._watched.add(id(self.cache))
            for index, layer in enumerate(getattr(self.cache, "layers", ())):
                self._watch_layer(index, layer)
        return super()._forward(phase, tokens)

    def _watch_layer(self, index: int, layer: Any) -> None:
        update, quantize = layer.update, layer._quantize
        handed: list[torch.Tensor] = []

        def recording_quantize(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            handed.append(tensor.detach().clone())
            return quantize(tensor, *args, **kwargs)

        def recording_update(key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if int(layer.get_seq_length()) == 0:  # a fresh or reset layer: a new request
                for kind in (0, 1):
                    self._written[(index, kind)] = []
                    self._flushed.pop((index, kind), None)
            self._written.setdefault((index, 0), []).append(key_states.detach().clone())
            self._written.setdefault((index, 1), []).append(value_states.detach().clone())
            handed.clear()
            out = update(key_states, value_states, *args, **kwargs)
            if len(handed) == 2:  # this update flushed: keys, then values, were quantised
                self._flushed[(index, 0)], self._flushed[(index, 1)] = handed[0], handed[1]
            return out

        layer._quantize = recording_quantize
        layer.update = recording_update

    def quant_state(self) -> QuantState:
        cache = self.cache
        assert cache is not None, "no call has run yet"
        tensors: list[QuantTensorState] = []
        first = cache.layers[0]
        for index, layer in enumerate(cache.layers):
            for kind, name in ((0, "keys"), (1, "values")):
                stored = layer._quantized_keys if kind == 0 else layer._quantized_values
                residual = layer.keys if kind == 0 else layer.values
                written = torch.cat(self._written[(index, kind)], dim=-2)
                if residual is None or residual.dim() != 4:
                    residual = written[:, :, :0]
                dequantized, scale, low, shape = _params(stored)
                group_ids = torch.arange(scale.numel(), device=scale.device).reshape(scale.shape)
                tensors.append(
                    QuantTensorState(
                        f"layer {index} {name}",
                        written,
                        dequantized.to(written.dtype).reshape(shape),
                        residual,
                        _per_element(scale, shape),
                        _per_element(low, shape),
                        _per_element(group_ids, shape),
                        self._flushed.get((index, kind)),
                    )
                )
        stated = _scheme(
            first.nbits, first.q_group_size, first.axis_key, first.axis_value, first.residual_length, self.model.dtype
        )
        return QuantState(stated=stated, nbytes=compat.cache_bytes(cache), tensors=tuple(tensors))


HF_QUANT_FAULTS = ("quant-residual-overflow", "quant-scale-wrong", "quant-bits-ignored")
"""The bookkeeping faults gate plants into QuantizedLayer objects (not `quant-bits-lower`: neither
backend's levels can be set apart from its stored bits)."""


def plant(layer: Any, fault: str) -> None:
    """Plant `fault` into one QuantizedLayer from outside (its own attributes stay as stated)."""
    if fault == "quant-residual-overflow":  # the flush decided against residual_length + 2, restored after
        update = layer.update

        def late_update(*args: Any, **kwargs: Any) -> Any:
            layer.residual_length += 2
            try:
                return update(*args, **kwargs)
            finally:
                layer.residual_length -= 2

        layer.update = late_update
    elif fault == "quant-scale-wrong":  # codes computed against one scale, 1.25x that scale stored
        quantize = layer._quantize

        def wrong_scale(*args: Any, **kwargs: Any) -> Any:
            stored = quantize(*args, **kwargs)
            if isinstance(stored, tuple):
                stored[1]["scale"] = stored[1]["scale"] * 1.25
            else:
                stored._scale = stored._scale * 1.25
            return stored

        layer._quantize = wrong_scale


class QuantizedHFPath(TracingHFPath):
    """A quantized path (quanto or hqq, no beams) whose cache state can be read (gate.protocols.QuantizedKV),
    with the bookkeeping faults of HF_QUANT_FAULTS."""

    quant_fault: str | None = None

    def quant_declared(self) -> QuantScheme:
        """The scheme the manifest's options declare, under transformers' rule: the residual is flushed
        once it would reach `residual_length`, so at most `residual_length - 1` tokens stay unquantised."""
        options = self.options
        residual = options.residual_length if options.residual_length is not None else HF_DEFAULTS["residual_length"]
        bits, group_size = options.nbits or HF_DEFAULTS["nbits"], options.q_group_size or HF_DEFAULTS["q_group_size"]
        return _scheme(bits, group_size, HF_DEFAULTS["axis"], HF_DEFAULTS["axis"], residual, self.model.dtype)

    def new_quant_session(self, batch_size: int) -> QuantHFSession:
        self.reuse()
        return QuantHFSession(self, batch_size)

    def faults(self) -> tuple[str, ...]:
        return (*super().faults(), *HF_QUANT_FAULTS)

    def with_fault(self, fault: str) -> HFPath:
        if fault not in HF_QUANT_FAULTS:
            return super().with_fault(fault)
        faulty = copy.copy(self)
        faulty.quant_fault = faulty.fault = fault
        faulty.name = f"{self.name}+{fault}"
        return faulty

    def make_cache(self, batch_size: int) -> Any:
        if self.quant_fault == "quant-bits-ignored":
            options = self.options
            stated = options.nbits or HF_DEFAULTS["nbits"]
            bits = {"quanto": {2: 4, 4: 2}, "hqq": {8: 4}}.get(str(options.backend), {}).get(
                stated, 8 if stated != 8 else 4
            )
            cache = compat.quantized_cache(
                self.model.config,
                options.backend,
                nbits=bits,
                residual_length=options.residual_length,
                q_group_size=options.q_group_size,
            )
        else:
            cache = super().make_cache(batch_size)
        if self.quant_fault is not None:
            for layer in cache.layers:
                plant(layer, self.quant_fault)
        return cache
