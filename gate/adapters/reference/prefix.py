"""The `prefix-cache` path of the reference adapter: workers (gate.prefix.worker.PrefixWorker) sharing
a block prefix cache; this module is the reference decoder's `ModelFamily`.

    candidate: {adapter: reference, options: {path: prefix-cache, block_size: 4}}
"""

from __future__ import annotations

import copy
from collections.abc import Hashable
from dataclasses import replace
from typing import Any

import torch

from gate.models.reference import KVCache, ModelConfig, Transformer, build_model
from gate.prefix.family import ModelFamily, WorkerSpec
from gate.prefix.options import PrefixOptions
from gate.prefix.worker import PrefixWorker
from gate.protocols import subject_call
from gate.tensors import DTYPES


class RoundedKVCache(KVCache):
    """A per-request cache whose K/V are stored in a narrower dtype: rounded on every write."""

    kv_dtype: torch.dtype = torch.float32

    def update(self, layer: int, start_pos: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return super().update(layer, start_pos, k.to(self.kv_dtype).to(k.dtype), v.to(self.kv_dtype).to(v.dtype))


def _config(config: Hashable) -> ModelConfig:
    assert isinstance(config, ModelConfig)
    return config


class ReferenceFamily(ModelFamily):
    """The reference decoder (gate.models.reference) as a prefix worker drives it."""

    kv_names = ("attention.wk", "attention.wv")

    def __init__(self, base: Transformer, block_size: int) -> None:
        self.base, self.block_size = base, block_size
        self.name = "reference"
        self.base_config = base.config
        self.vocab_size, self.max_len = base.config.vocab_size, base.config.max_len

    def instantiate(self, config: Hashable, *, device: str, dtype: str) -> torch.nn.Module:
        if config == self.base.config:
            return copy.deepcopy(self.base)
        # the same weights under another rope base or window (inv_freq is rebuilt from the config)
        model = build_model(_config(config), device=device, dtype=DTYPES[dtype])
        model.load_state_dict(self.base.state_dict())
        return model

    def frozen(self, name: str) -> bool:
        return "embeddings" in name

    def vocab_tables(self, model: torch.nn.Module) -> list[torch.Tensor]:
        assert isinstance(model, Transformer)
        return [model.tok_embeddings.weight, model.output.weight]

    def rope(self, config: Hashable) -> str:
        cfg = _config(config)
        rope = f"base={cfg.rope_base:g}" if cfg.rope else "none"
        return rope + (",abs" if cfg.abs_positions else "")

    def window(self, config: Hashable) -> int | None:
        return _config(config).window

    def varied(self, config: Hashable, field: str, block_size: int) -> Hashable | None:
        cfg = _config(config)
        if field == "rope-scaling":
            return replace(cfg, rope_base=cfg.rope_base * 4) if cfg.rope else None
        if field == "attention-window":
            return replace(cfg, window=None if cfg.window is not None else max(2, block_size))
        return None

    def kv_layout(self, config: Hashable) -> tuple[int, int, int]:
        cfg = _config(config)
        return cfg.n_layers, cfg.n_kv_heads, cfg.head_dim

    def describe(self, config: Hashable) -> dict[str, Any]:
        return {"config": _config(config).as_dict()}

    def new_kv(self, config: Hashable, batch: int, *, device: str, dtype: str, kv_dtype: str) -> Any:
        cls = KVCache if kv_dtype == dtype else RoundedKVCache
        cache = cls.for_model(
            _config(config), batch, layout="dynamic", block_size=self.block_size, dtype=DTYPES[dtype], device=device
        )
        if isinstance(cache, RoundedKVCache):
            cache.kv_dtype = DTYPES[kv_dtype]
        return cache

    def step(self, model: torch.nn.Module, tokens: torch.Tensor, kv: Any, pos: int) -> torch.Tensor:
        assert isinstance(model, Transformer)
        with subject_call(f"{type(model).__name__}.step", length=pos, tokens=int(tokens.shape[1])):
            logits = model.step(tokens, kv, pos)
        return logits.float()

    def read_block(self, kv: Any, start: int, end: int) -> tuple[torch.Tensor, ...]:
        return tuple(buf[layer][0, :, start:end] for layer in range(len(kv.k)) for buf in (kv.k, kv.v))

    def write_block(self, kv: Any, payload: tuple[torch.Tensor, ...], start: int, n: int) -> None:
        for layer in range(len(kv.k)):
            k, v = payload[2 * layer], payload[2 * layer + 1]
            kv.update(layer, start, k[None, :, :n], v[None, :, :n])
        kv.pos = start + n

    def kv_bytes(self, kv: Any) -> int:
        return int(kv.nbytes())


def build(model: Transformer, options: Any, *, device: str, dtype: str, seed: int) -> PrefixWorker:
    """The `prefix-cache` path builder of the reference adapter (its PATHS table)."""
    settings = getattr(options, "prefix", None) or PrefixOptions()
    family = ReferenceFamily(model, options.block_size)
    spec = WorkerSpec(
        family=family, config=model.config, seed=seed, device=device, dtype=dtype, kv_dtype=settings.kv_dtype or dtype
    )
    worker = PrefixWorker.create(spec, block_size=options.block_size, byte_budget=settings.cache_bytes)
    fault = getattr(options, "fault", None)
    return worker.with_fault(fault) if fault else worker
