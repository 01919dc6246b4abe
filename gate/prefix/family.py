"""The model a prefix worker serves: a `ModelFamily` (one kind of model code over one checkpoint),
the `WorkerSpec` that fixes its weights and worker-level identity, and `built`, which makes the model
(weight updates, the tokenizer revision, a seeded low-rank adapter on K and V), memoised."""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import torch

from gate.protocols import subject_call

ADAPTER_NAMES = ("lora-a", "lora-b")
LORA_RANK = 4
UPDATE_SCALE = 0.3
"""A weight update moves every matrix by this fraction of its own scale (a visible fine-tuning step)."""
REVISION_SIBLING_SEED = 9001
"""The weight update that makes the model-revision sibling."""


class ModelFamily(ABC):
    """One kind of model code as a prefix worker drives it. An instance wraps one base checkpoint;
    `config` values are the family's hashable description of an architecture variant (rope,
    window) of that checkpoint."""

    name: str
    """Prefix of worker names, e.g. `reference` or `hf:llama`."""
    base_config: Hashable
    """The variant the checkpoint was built as."""
    vocab_size: int
    max_len: int

    @abstractmethod
    def instantiate(self, config: Hashable, *, device: str, dtype: str) -> torch.nn.Module:
        """A private copy of the checkpoint's weights under `config` (rope and window buffers rebuilt)."""

    @abstractmethod
    def frozen(self, name: str) -> bool:
        """Whether parameter `name` is an input embedding (weight updates leave it alone)."""

    @abstractmethod
    def vocab_tables(self, model: torch.nn.Module) -> list[torch.Tensor]:
        """Input embedding and output tables, each once (a tokenizer revision permutes their rows)."""

    kv_names: tuple[str, ...]
    """How the K and V projection modules' names end (`kv_projections`)."""

    def kv_projections(self, model: torch.nn.Module) -> list[torch.nn.Linear]:
        """The K and V projections an adapter adds its low-rank delta to, in module order."""
        return [
            m for name, m in model.named_modules() if isinstance(m, torch.nn.Linear) and name.endswith(self.kv_names)
        ]

    @abstractmethod
    def rope(self, config: Hashable) -> str:
        """The position encoding as the cache identity names it, e.g. `base=10000` or `none`."""

    @abstractmethod
    def window(self, config: Hashable) -> int | None:
        """Sliding attention window, None for full attention."""

    @abstractmethod
    def varied(self, config: Hashable, field: str, block_size: int) -> Hashable | None:
        """`config` changed in identity field `field` (rope-scaling, attention-window) alone, or
        None where this model cannot vary it."""

    @abstractmethod
    def kv_layout(self, config: Hashable) -> tuple[int, int, int]:
        """(layers, KV heads, head dim) of a stored block."""

    @abstractmethod
    def describe(self, config: Hashable) -> dict[str, Any]:
        """The model part of the worker's identity record."""

    @abstractmethod
    def new_kv(self, config: Hashable, batch: int, *, device: str, dtype: str, kv_dtype: str) -> Any:
        """An empty per-request cache; K/V written to it are rounded to `kv_dtype`."""

    @abstractmethod
    def step(self, model: torch.nn.Module, tokens: torch.Tensor, kv: Any, pos: int) -> torch.Tensor:
        """tokens [B, n] at positions pos.. against `kv` (which holds exactly pos tokens), writing
        their K/V -> logits [B, n, V] float32."""

    @abstractmethod
    def read_block(self, kv: Any, start: int, end: int) -> tuple[torch.Tensor, ...]:
        """k, v of positions [start, end) of batch row 0, per layer: (k0, v0, k1, v1, ...), each
        [H_kv, end - start, D] in the model dtype."""

    @abstractmethod
    def write_block(self, kv: Any, payload: tuple[torch.Tensor, ...], start: int, n: int) -> None:
        """Put the first n positions of a stored block at positions [start, start + n) of `kv`
        (which holds exactly `start` tokens), as if they had been computed there."""

    @abstractmethod
    def kv_bytes(self, kv: Any) -> int:
        """Bytes a per-request cache holds."""

    def full_logits(self, model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
        """One full causal pass, no cache: [B, T] -> [B, T, V] float32."""
        with torch.no_grad():
            logits: torch.Tensor = model(tokens)
        return logits.float()


@dataclass(frozen=True)
class WorkerSpec:
    """Everything that determines a worker's weights and its worker-level identity."""

    family: ModelFamily = field(compare=False, hash=False)
    """The model code and checkpoint the worker was built from."""
    config: Hashable
    """The family's variant of the checkpoint (its rope and window)."""
    seed: int
    device: str
    dtype: str
    kv_dtype: str
    tokenizer: str = "tok-v1"
    """tok-v1: the model's own id space; tok-v2: a revision that remaps every id."""
    weight_updates: tuple[int, ...] = ()
    """Seeds of the weight updates loaded since the base checkpoint, in order."""
    adapter_updates: tuple[tuple[str, int], ...] = ()
    """(adapter, seed) of the adapter updates loaded, in order."""

    @property
    def family_id(self) -> int:
        return id(self.family)

    def adapter_seeds(self, name: str) -> tuple[int, ...]:
        return tuple(seed for n, seed in self.adapter_updates if n == name)


def _perturb(model: torch.nn.Module, seed: int, scale: float, names: Callable[[str], bool]) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() == 2 and names(name):
                noise = torch.randn(param.shape, generator=gen) * float(param.float().std()) * scale
                param.add_(noise.to(param.dtype).to(param.device))


def _lora(projections: list[torch.nn.Linear], name: str, seeds: tuple[int, ...]) -> None:
    """Add a seeded rank-4 delta B @ A to every K and V projection (the adapter)."""
    base = int(hashlib.sha256(name.encode()).hexdigest()[:8], 16)
    with torch.no_grad():
        for rev, seed in enumerate((0, *seeds)):
            gen = torch.Generator().manual_seed(base + 7919 * rev + seed)
            for proj in projections:
                out_dim, in_dim = proj.weight.shape
                a = torch.randn(LORA_RANK, in_dim, generator=gen) / in_dim**0.5
                b = torch.randn(out_dim, LORA_RANK, generator=gen) / LORA_RANK**0.5
                proj.weight.add_((0.5 * b @ a).to(proj.weight.dtype).to(proj.weight.device))


def _weights_digest(model: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().float().cpu().numpy().tobytes())
    return "sha256:" + digest.hexdigest()[:16]


def built(spec: WorkerSpec, adapter: str | None) -> tuple[torch.nn.Module, str]:
    """The worker's model (with `adapter` applied) and the revision digest of its checkpoint."""
    with subject_call(f"{spec.family.name}.instantiate", length=0):  # the worker builds its model
        return _memo(spec, spec.family_id, adapter)


@lru_cache(maxsize=32)
def _memo(spec: WorkerSpec, family_id: int, adapter: str | None) -> tuple[torch.nn.Module, str]:
    family = spec.family
    model = family.instantiate(spec.config, device=spec.device, dtype=spec.dtype)
    for seed in spec.weight_updates:
        _perturb(model, seed, UPDATE_SCALE, lambda name: not family.frozen(name))
    revision = _weights_digest(model)  # the checkpoint; the tokenizer revision is its own field
    if spec.tokenizer == "tok-v2":  # id i of tok-v2 is id perm[i] of the model's own vocabulary
        perm = torch.randperm(family.vocab_size, generator=torch.Generator().manual_seed(7))
        with torch.no_grad():
            for table in family.vocab_tables(model):
                table.copy_(table[perm.to(table.device)])
    if adapter is not None:
        _lora(family.kv_projections(model), adapter, spec.adapter_seeds(adapter))
    return model, revision
