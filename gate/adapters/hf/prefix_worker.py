"""PrefixCaching for the hf `prefix-reuse` path: transformers models behind a block prefix cache.

The path's PrefixCaching calls go to the block cache of `gate.prefix.worker.PrefixWorker`; this module
is the transformers `ModelFamily` that worker runs on: a request's cache is a `DynamicCache` of full
layers into which a hit writes the stored blocks with `Cache.update`; the rope-scaling sibling is the
same weights under linear rope scaling ×4, the attention-window sibling the same weights with the
window dropped (widened to every position on a hybrid model).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Unpack

import torch
import transformers

from gate.adapters.hf import compat
from gate.adapters.hf.paths import HFPath
from gate.adapters.hf.presets import LoadedModel, kv_shape, max_positions
from gate.adapters.hf.probe import ProbingHFPath, TracingHFPath
from gate.prefix.cache import CacheIdentity, PrefixReply, RestoreReport
from gate.prefix.family import ModelFamily, WorkerSpec
from gate.prefix.faults import PREFIX_FAULTS
from gate.prefix.options import PrefixOptions
from gate.prefix.worker import Fresh, PrefixWorker
from gate.tensors import DTYPES

ROPE_SCALE = 4.0
"""Linear rope scaling factor of the rope-scaling sibling."""


@dataclass(frozen=True)
class HFVariant:
    """The parts of a transformers config a prefix worker varies (hashable, unlike the config)."""

    rope: tuple[tuple[str, Any], ...] | None
    """`rope_parameters` as sorted items; None for a model without rotary positions (GPT-2)."""
    window: int | None
    """`sliding_window`, None for full attention."""


def _variant(config: Any) -> HFVariant:
    rope = getattr(config, "rope_parameters", None)
    window = getattr(config, "sliding_window", None)
    return HFVariant(rope=_freeze(dict(rope)) if rope else None, window=int(window) if window else None)


def _freeze(value: Any) -> Any:
    """A hashable copy: dicts become sorted item tuples, lists tuples (per-layer rope, factor lists)."""
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    return tuple(_freeze(v) for v in value) if isinstance(value, list) else value


def _flat_rope(rope: tuple[tuple[str, Any], ...] | None) -> dict[str, Any] | None:
    """The rope parameters as one flat dict of scalars, or None where there are none or they carry
    factor lists (longrope)."""
    return None if rope is None or any(isinstance(v, tuple) for _, v in rope) else dict(rope)


def _rope_by_layer_type(rope: tuple[tuple[str, Any], ...] | None) -> dict[str, dict[str, Any]] | None:
    """Rope parameters given per layer type (Gemma 3), each a flat dict; None where they are not nested that way."""
    if not rope or not all(isinstance(v, tuple) for _, v in rope):
        return None
    nested = {kind: _flat_rope(params) for kind, params in rope}
    return None if None in nested.values() else {kind: params for kind, params in nested.items() if params is not None}


def _scaled(params: dict[str, Any]) -> dict[str, Any]:
    return {**params, "rope_type": "linear", "factor": float(params.get("factor", 1.0)) * ROPE_SCALE}


def _hf(config: Hashable) -> HFVariant:
    assert isinstance(config, HFVariant)
    return config


class HFFamily(ModelFamily):
    """One transformers causal LM (a loaded preset or directory) as a prefix worker drives it."""

    kv_names = ("k_proj", "v_proj")

    def __init__(self, loaded: LoadedModel) -> None:
        self.loaded, self.base = loaded, loaded.model
        self.name = f"hf:{loaded.name}"
        self.text_config = self.base.config.get_text_config(decoder=True)
        self.base_config = _variant(self.text_config)
        self.vocab_size = int(self.text_config.vocab_size)
        self.max_len = max_positions(self.base)
        hybrid = "sliding_attention" in (getattr(self.text_config, "layer_types", None) or ())
        self.unwindowed = self.max_len if hybrid else None
        """The window of the attention-window sibling: none, or where the config declares sliding layer
        types, which transformers refuses without a window, one spanning every position."""

    def instantiate(self, config: Hashable, *, device: str, dtype: str) -> torch.nn.Module:
        if config == self.base_config:
            model: torch.nn.Module = copy.deepcopy(self.base)
            return model
        variant = _hf(config)
        changed = copy.deepcopy(self.base.config)
        if variant.rope != _hf(self.base_config).rope:
            changed.rope_parameters = _flat_rope(variant.rope) or _rope_by_layer_type(variant.rope)
        changed.sliding_window = variant.window
        # same weights under another rope or window: the rotary tables are rebuilt from the config
        with torch.random.fork_rng(devices=[]):
            auto: Any = transformers.AutoModelForCausalLM
            model = auto.from_config(changed, attn_implementation=changed._attn_implementation)
        model = model.to(device=device, dtype=DTYPES[dtype]).eval()
        model.load_state_dict(self.base.state_dict())
        model.requires_grad_(False)
        return model

    def frozen(self, name: str) -> bool:
        return "embed" in name or name.split(".")[-2:-1] in (["wte"], ["wpe"])

    def vocab_tables(self, model: torch.nn.Module) -> list[torch.Tensor]:
        tables: list[torch.Tensor] = []
        for module in (model.get_input_embeddings(), model.get_output_embeddings()):  # type: ignore[operator]
            weight = module.weight
            if all(weight.data_ptr() != t.data_ptr() for t in tables):  # tied tables are permuted once
                tables.append(weight)
        return tables

    def rope(self, config: Hashable) -> str:
        rope = _hf(config).rope
        if rope is None:
            return "none"
        return ",".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in rope)

    def window(self, config: Hashable) -> int | None:
        return _hf(config).window

    def varied(self, config: Hashable, field: str, block_size: int) -> Hashable | None:
        variant = _hf(config)
        if field == "rope-scaling":
            params = _flat_rope(variant.rope)
            if params is not None:
                return HFVariant(rope=_freeze(_scaled(params)), window=variant.window)
            per_type = _rope_by_layer_type(variant.rope)
            if per_type is None:
                return None
            # a hybrid model rotates each layer type with its own base: scale every one of them
            return HFVariant(rope=_freeze({k: _scaled(v) for k, v in per_type.items()}), window=variant.window)
        declared = _hf(self.base_config).window
        if field == "attention-window" and declared is not None:
            # only a model whose attention reads `sliding_window` can vary it (Llama has no window)
            window = self.unwindowed if variant.window == declared else declared
            return HFVariant(rope=variant.rope, window=window)
        return None

    def kv_layout(self, config: Hashable) -> tuple[int, int, int]:
        return kv_shape(self.base)

    def describe(self, config: Hashable) -> dict[str, Any]:
        variant = _hf(config)
        return {**self.loaded.identity, "rope": self.rope(variant), "sliding_window": variant.window}

    def new_kv(self, config: Hashable, batch: int, *, device: str, dtype: str, kv_dtype: str) -> Any:
        return compat.full_dynamic_cache(None if kv_dtype == dtype else DTYPES[kv_dtype])

    def step(self, model: torch.nn.Module, tokens: torch.Tensor, kv: Any, pos: int) -> torch.Tensor:
        if compat.seq_length(kv) != pos:
            raise RuntimeError(f"cache holds {compat.seq_length(kv)} tokens, step asked to start at {pos}")
        positions = torch.arange(pos, pos + tokens.shape[1], device=tokens.device).expand_as(tokens)
        with torch.no_grad():
            logits: torch.Tensor = compat.forward(model, tokens, kv, positions).logits.float()
        return logits

    def read_block(self, kv: Any, start: int, end: int) -> tuple[torch.Tensor, ...]:
        return tuple(tensor[0, :, start:end] for i in range(len(kv.layers)) for tensor in compat.layer_kv(kv, i))

    def write_block(self, kv: Any, payload: tuple[torch.Tensor, ...], start: int, n: int) -> None:
        if compat.seq_length(kv) != start:
            raise RuntimeError(f"cache holds {compat.seq_length(kv)} tokens, a block was to go at {start}")
        for layer in range(len(payload) // 2):
            kv.update(payload[2 * layer][None, :, :n], payload[2 * layer + 1][None, :, :n], layer)

    def kv_bytes(self, kv: Any) -> int:
        return compat.cache_bytes(kv)

    def full_logits(self, model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            logits: torch.Tensor = compat.forward(model, tokens, None, None).logits.float()
        return logits


class PrefixCachingPart(HFPath):
    """The PrefixCaching half of an hf `prefix-reuse` path: every PrefixCaching call goes to a block
    worker beside the path's sessions. Mixed in before the path class, so `super()` is that class."""

    def __init__(self, loaded: LoadedModel, options: Any, *, device: str, dtype: str, seed: int) -> None:
        super().__init__(loaded, options, device=device, dtype=dtype, seed=seed)
        family = HFFamily(loaded)  # the worker's own copy of the weights
        settings = options.prefix or PrefixOptions()
        kv_dtype = settings.kv_dtype or dtype
        spec = WorkerSpec(
            family=family, config=family.base_config, seed=seed, device=device, dtype=dtype, kv_dtype=kv_dtype
        )
        self.worker = PrefixWorker.create(spec, block_size=options.block_size, byte_budget=settings.cache_bytes)

    @property
    def block_size(self) -> int:
        return self.worker.block_size

    def identity(self) -> dict[str, Any]:
        worker = self.worker.identity()
        keys = ("model_revision", "tokenizer", "kv_dtype", "block_size", "byte_budget", "hash")
        return {**super().identity(), "prefix_cache": {key: worker[key] for key in keys}}

    def faults(self) -> tuple[str, ...]:
        return (*super().faults(), *PREFIX_FAULTS)

    def with_fault(self, fault: str) -> HFPath:
        if fault not in PREFIX_FAULTS:
            faulty = super().with_fault(fault)
            assert isinstance(faulty, PrefixCachingPart)
            faulty.worker = self.worker.fresh()  # a session fault never shares the block store
            return faulty
        faulty = copy.copy(self)
        faulty.worker = self.worker.with_fault(fault)
        faulty.name = f"{self.name}+{fault}"
        return faulty

    # ---- PrefixCaching: handed to the block worker as they are ----------------------------------

    def request(
        self, tokens: Sequence[int], *, adapter: str | None = None, tenant: str | None = None, new_tokens: int = 0
    ) -> PrefixReply:
        return self.worker.request(tokens, adapter=adapter, tenant=tenant, new_tokens=new_tokens)

    def recompute(self, tokens: Sequence[int], *, adapter: str | None = None, new_tokens: int = 0) -> PrefixReply:
        return self.worker.recompute(tokens, adapter=adapter, new_tokens=new_tokens)

    def identity_for(self, *, adapter: str | None = None, tenant: str | None = None) -> CacheIdentity:
        return self.worker.identity_for(adapter=adapter, tenant=tenant)

    def adapters(self) -> tuple[str, ...]:
        return self.worker.adapters()

    def sibling(self, field: str) -> PrefixWorker | None:
        return self.worker.sibling(field)

    def fresh(self, **changes: Unpack[Fresh]) -> PrefixWorker:
        return self.worker.fresh(**changes)

    def with_hash(self, hash_fn: Callable[[bytes], bytes]) -> PrefixWorker:
        return self.worker.with_hash(hash_fn)

    def with_budget(self, byte_budget: int) -> PrefixWorker:
        return self.worker.with_budget(byte_budget)

    def reset_cache(self) -> int:
        return self.worker.reset_cache()

    def restarted(self, *, checkpoint_seed: int | None = None) -> PrefixWorker:
        return self.worker.restarted(checkpoint_seed=checkpoint_seed)

    def update_weights(self, target: str = "model", *, seed: int = 1) -> None:
        self.worker.update_weights(target, seed=seed)

    def save_cache(self, file: Path) -> int:
        return self.worker.save_cache(file)

    def restore_cache(self, file: Path) -> RestoreReport:
        return self.worker.restore_cache(file)

    def cache_state(self) -> dict[str, Any]:
        return self.worker.cache_state()


class PrefixReuseTracingPath(PrefixCachingPart, TracingHFPath):
    """`prefix-reuse` where the attention probe is not validated (transformers before 5.24)."""


class PrefixReuseProbingPath(PrefixCachingPart, ProbingHFPath):
    """`prefix-reuse` with the attention probe (transformers 5.24's masking API)."""
