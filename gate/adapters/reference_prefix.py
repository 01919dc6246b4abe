"""The `prefix-cache` path of the reference adapter: workers sharing a block prefix cache.

    candidate: {adapter: reference, options: {path: prefix-cache, block_size: 4}}

A `PrefixWorker` is one serving worker of the reference decoder with a cross-request prefix cache
(`gate.prefix_cache.PrefixCache`). A request is token ids plus its adapter (a seeded low-rank delta
on the K and V projections) and its tenant or cache salt; the worker fixes the rest of the identity:
model revision (a digest of its weights), tokenizer revision (tok-v2 remaps ids), rope base,
attention window and KV dtype (K/V stored in bfloat16 are rounded on write). Siblings built by
`sibling(field)` share the cache store, like workers behind one shared KV tier, so a key that
drops a field lets one worker consume another's state.

Requests through `new_session` (the DecodePath protocol) run a plain per-request cache: a prefill
must return logits for every prompt position, and a position served from the prefix cache has
none. Cross-request reuse is reached through `request` (the PrefixCaching protocol).

Faults (gate.prefix_faults) replace one cache rule, or, for skip-invalidation, the worker's update
hook; the cache and the model know nothing of them.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from gate.adapters.prefix_options import PrefixOptions
from gate.models.reference import KVCache, ModelConfig, Transformer, build_model
from gate.paths import UnknownFault
from gate.prefix_cache import (
    CacheIdentity,
    CacheRules,
    PrefixCache,
    PrefixReply,
    RequestStats,
    RestoreReport,
)
from gate.prefix_faults import PREFIX_FAULTS, apply_rule_faults

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
ADAPTER_NAMES = ("lora-a", "lora-b")
TOKENIZERS = ("tok-v1", "tok-v2")
"""tok-v1 is the model's own id space; tok-v2 is a revision that remaps every id (same text, other ids)."""
LORA_RANK = 4
UPDATE_SCALE = 0.3
"""A weight update moves every matrix by this fraction of its own scale (a visible fine-tuning step)."""


@dataclass(frozen=True)
class WorkerSpec:
    """Everything that determines a worker's weights and its worker-level identity."""

    base: Transformer = field(compare=False, hash=False)
    """The checkpoint the worker was built from (seeded or trained weights)."""
    config: ModelConfig
    """The base config with this worker's rope base and window."""
    seed: int
    device: str
    dtype: str
    kv_dtype: str
    tokenizer: str = "tok-v1"
    weight_updates: tuple[int, ...] = ()
    """Seeds of the weight updates loaded since the base checkpoint, in order."""
    adapter_updates: tuple[tuple[str, int], ...] = ()
    """(adapter, seed) of the adapter updates loaded, in order."""

    @property
    def base_id(self) -> int:
        return id(self.base)

    def adapter_seeds(self, name: str) -> tuple[int, ...]:
        return tuple(seed for n, seed in self.adapter_updates if n == name)


def _perturb(model: Transformer, seed: int, scale: float, names: Callable[[str], bool]) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() == 2 and names(name):
                noise = torch.randn(param.shape, generator=gen) * float(param.float().std()) * scale
                param.add_(noise.to(param.dtype).to(param.device))


def _lora(model: Transformer, name: str, seeds: tuple[int, ...]) -> None:
    """Add a seeded rank-4 delta B @ A to every layer's K and V projections (the adapter)."""
    base = int(hashlib.sha256(name.encode()).hexdigest()[:8], 16)
    with torch.no_grad():
        for rev, seed in enumerate((0, *seeds)):
            gen = torch.Generator().manual_seed(base + 7919 * rev + seed)
            for module_name, proj in model.named_modules():
                if isinstance(proj, torch.nn.Linear) and module_name.endswith(("attention.wk", "attention.wv")):
                    out_dim, in_dim = proj.weight.shape
                    a = torch.randn(LORA_RANK, in_dim, generator=gen) / in_dim**0.5
                    b = torch.randn(out_dim, LORA_RANK, generator=gen) / LORA_RANK**0.5
                    proj.weight.add_((0.5 * b @ a).to(proj.weight.dtype).to(proj.weight.device))


def _weights_digest(model: Transformer) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().float().cpu().numpy().tobytes())
    return "sha256:" + digest.hexdigest()[:16]


def _built(spec: WorkerSpec, adapter: str | None) -> tuple[Transformer, str]:
    """The worker's model (with `adapter` applied) and the revision digest of its checkpoint."""
    return _memo(spec, spec.base_id, adapter)


@lru_cache(maxsize=32)
def _memo(spec: WorkerSpec, base_id: int, adapter: str | None) -> tuple[Transformer, str]:
    base = spec.base
    if spec.config == base.config:
        model = copy.deepcopy(base)
    else:  # same weights under another rope base or window (inv_freq is rebuilt from the config)
        model = build_model(spec.config, device=spec.device, dtype=DTYPES[spec.dtype])
        model.load_state_dict(base.state_dict())
    for seed in spec.weight_updates:
        _perturb(model, seed, UPDATE_SCALE, lambda name: "embeddings" not in name)
    revision = _weights_digest(model)  # the checkpoint; the tokenizer revision is its own field
    if spec.tokenizer == "tok-v2":  # id i of tok-v2 is id perm[i] of the model's own vocabulary
        perm = torch.randperm(spec.config.vocab_size, generator=torch.Generator().manual_seed(7))
        with torch.no_grad():
            for table in (model.tok_embeddings.weight, model.output.weight):
                table.copy_(table[perm.to(table.device)])
    if adapter is not None:
        _lora(model, adapter, spec.adapter_seeds(adapter))
    return model, revision


class RoundedKVCache(KVCache):
    """A per-request cache whose K/V are stored in a narrower dtype: rounded on every write."""

    kv_dtype: torch.dtype = torch.float32

    def update(self, layer: int, start_pos: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return super().update(layer, start_pos, k.to(self.kv_dtype).to(k.dtype), v.to(self.kv_dtype).to(v.dtype))


class PlainSession:
    """A per-request session (the DecodePath protocol): no cross-request reuse."""

    def __init__(self, worker: PrefixWorker, batch_size: int) -> None:
        self.worker, self.cache = worker, worker.kv_cache(batch_size)
        self.steps = 0

    def prefill(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.append(tokens)

    def append(self, tokens: torch.Tensor) -> torch.Tensor:
        self.steps += 1
        return self.worker.model().step(tokens.to(self.worker.spec.device), self.cache, self.cache.pos).float()

    def reset(self) -> None:
        self.cache.reset()

    def exercise(self) -> dict[str, Any]:
        return {"cache_len": self.cache.pos, "cached_steps": self.steps, "cache_bytes": self.cache.nbytes()}


def _correct_update(worker: PrefixWorker, attr: str, old: str | None, new: str | None) -> str | None:
    """After loading new weights: drop every entry keyed on the old revision; key on the new one."""
    worker.cache.invalidate(lambda block: getattr(block.identity, attr) == old)
    return new


def _skip_invalidation(worker: PrefixWorker, attr: str, old: str | None, new: str | None) -> str | None:
    """The fault: the weights are loaded, the cache is kept and still keyed on the old revision."""
    return old


UpdateHook = Callable[["PrefixWorker", str, "str | None", "str | None"], "str | None"]


@dataclass
class WorkerState:
    """What a worker keys on now (normally derived from its weights; see `UpdateHook`)."""

    revision: str
    adapter_labels: dict[str, str] = field(default_factory=dict)


class PrefixWorker:
    """One worker of the reference decoder with a cross-request prefix cache (DecodePath and
    PrefixCaching)."""

    uses_cache = True

    def __init__(
        self, spec: WorkerSpec, cache: PrefixCache, faults: tuple[str, ...] = (), state: WorkerState | None = None
    ) -> None:
        self.spec, self.cache, self._faults = spec, cache, faults
        self.block_size = cache.block_size
        self.vocab_size, self.max_len, self.dtype = spec.config.vocab_size, spec.config.max_len, spec.dtype
        self.name = "reference:prefix-cache" + "".join(f"+{f}" for f in faults)
        self._on_update: UpdateHook = _skip_invalidation if "skip-invalidation" in faults else _correct_update
        self.state = state or WorkerState(
            revision=_built(spec, None)[1], adapter_labels={n: f"{n}@r0" for n in ADAPTER_NAMES}
        )

    @classmethod
    def create(
        cls,
        spec: WorkerSpec,
        *,
        block_size: int,
        byte_budget: int,
        faults: tuple[str, ...] = (),
        hash_fn: Callable[[bytes], bytes] | None = None,
    ) -> PrefixWorker:
        rules = (
            CacheRules()
            if hash_fn is None
            else CacheRules(hash=hash_fn, hash_name=getattr(hash_fn, "__name__", "custom"))
        )
        return cls(spec, PrefixCache(block_size, byte_budget, apply_rule_faults(rules, faults)), faults)

    # -- DecodePath ----------------------------------------------------------------------------
    def model(self, adapter: str | None = None) -> Transformer:
        return _built(self.spec, adapter)[0]

    def kv_cache(self, batch: int) -> KVCache:
        kv_dtype = DTYPES[self.spec.kv_dtype]
        if kv_dtype == DTYPES[self.spec.dtype]:
            return KVCache.for_model(
                self.spec.config,
                batch,
                layout="dynamic",
                block_size=self.block_size,
                dtype=DTYPES[self.spec.dtype],
                device=self.spec.device,
            )
        cache = RoundedKVCache.for_model(
            self.spec.config,
            batch,
            layout="dynamic",
            block_size=self.block_size,
            dtype=DTYPES[self.spec.dtype],
            device=self.spec.device,
        )
        assert isinstance(cache, RoundedKVCache)
        cache.kv_dtype = kv_dtype
        return cache

    def identity(self) -> dict[str, Any]:
        return {
            "config": self.spec.config.as_dict(),
            "seed": self.spec.seed,
            "model_revision": self.state.revision,
            "tokenizer": self.spec.tokenizer,
            "kv_dtype": self.spec.kv_dtype,
            "block_size": self.block_size,
            "byte_budget": self.cache.byte_budget,
            "hash": self.cache.rules.hash_name,
            "faults": list(self._faults),
        }

    def full_logits(self, tokens: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.model()(tokens.to(self.spec.device))
        return logits.float()

    def new_session(self, batch_size: int) -> PlainSession:
        return PlainSession(self, batch_size)

    def faults(self) -> tuple[str, ...]:
        return PREFIX_FAULTS

    def with_fault(self, fault: str) -> PrefixWorker:
        if fault not in PREFIX_FAULTS:
            raise UnknownFault(f"path {self.name} cannot apply fault {fault!r} (known: {', '.join(PREFIX_FAULTS)})")
        return PrefixWorker.create(
            self.spec, block_size=self.block_size, byte_budget=self.cache.byte_budget, faults=(*self._faults, fault)
        )

    # -- PrefixCaching -------------------------------------------------------------------------
    def adapters(self) -> tuple[str, ...]:
        return ADAPTER_NAMES

    def identity_for(self, *, adapter: str | None = None, tenant: str | None = None) -> CacheIdentity:
        cfg = self.spec.config
        rope = f"base={cfg.rope_base:g}" if cfg.rope else "none"
        if adapter is not None and adapter not in ADAPTER_NAMES:
            raise ValueError(f"unknown adapter {adapter!r} (served: {', '.join(ADAPTER_NAMES)})")
        return CacheIdentity(
            model_revision=self.state.revision,
            tokenizer=self.spec.tokenizer,
            rope=rope + (",abs" if cfg.abs_positions else ""),
            attention_window=cfg.window,
            attention_mask="causal",
            kv_dtype=self.spec.kv_dtype,
            adapter=self.state.adapter_labels[adapter] if adapter else None,
            tenant=tenant,
        )

    def _payload(self, kv: KVCache, start: int) -> tuple[torch.Tensor, ...]:
        # per layer k, v: [H_kv, block_size, D] in the KV dtype
        kv_dtype, end = DTYPES[self.spec.kv_dtype], start + self.block_size
        return tuple(
            buf[layer][0, :, start:end].to(kv_dtype).clone()
            for layer in range(self.spec.config.n_layers)
            for buf in (kv.k, kv.v)
        )

    def _inject(self, kv: KVCache, payload: tuple[torch.Tensor, ...], start: int, n: int) -> None:
        model_dtype = DTYPES[self.spec.dtype]
        for layer in range(self.spec.config.n_layers):
            k, v = payload[2 * layer], payload[2 * layer + 1]
            kv.update(layer, start, k[None, :, :n].to(model_dtype), v[None, :, :n].to(model_dtype))
        kv.pos = start + n

    def request(
        self, tokens: Sequence[int], *, adapter: str | None = None, tenant: str | None = None, new_tokens: int = 0
    ) -> PrefixReply:
        prompt = [int(t) for t in tokens]
        if not prompt:
            raise ValueError("a request needs at least one token")
        identity, model, kv = self.identity_for(adapter=adapter, tenant=tenant), self.model(adapter), self.kv_cache(1)
        before = (self.cache.counters.collisions_detected, self.cache.counters.evicted)
        hits = dict(self.cache.match(prompt, identity))
        starts = sorted(s for s in hits if s < len(prompt) - 1)
        rows: list[torch.Tensor] = []
        computed: list[int] = []
        spans: list[tuple[int, int]] = []
        served_at: list[int] = []
        served_from: list[int] = []
        pos = 0
        while pos < len(prompt):
            block = hits.get(pos)
            if block is not None and pos < len(prompt) - 1:  # the last prompt token is always computed
                n = min(self.block_size, len(prompt) - 1 - pos)
                self._inject(kv, block.payload, pos, n)
                spans = (
                    [*spans[:-1], (spans[-1][0], pos + n)]
                    if spans and spans[-1][1] == pos
                    else [*spans, (pos, pos + n)]
                )
                served_at.append(pos)
                served_from.append(block.start)
                pos += n
                continue
            end = next((s for s in starts if s > pos), len(prompt))
            out = model.step(torch.tensor([prompt[pos:end]], device=self.spec.device), kv, pos)  # [1, n, V]
            rows.append(out[0].float())
            computed.extend(range(pos, end))
            pos = end
        stored = self._store(prompt, identity, hits, kv)
        logits = torch.cat(rows)
        continuation, steps = self._greedy(model, kv, logits[-1], len(prompt), new_tokens)
        reused = sum(e - s for s, e in spans)
        stats = RequestStats(
            prompt_tokens=len(prompt),
            hit_blocks=len(served_from),
            reused_tokens=reused,
            computed_tokens=len(prompt) - reused,
            reused_spans=spans,
            served_at=served_at,
            served_from=served_from,
            stored_blocks=stored,
            collisions_detected=self.cache.counters.collisions_detected - before[0],
            evicted_blocks=self.cache.counters.evicted - before[1],
        )
        return PrefixReply(logits, computed, continuation, steps, stats)

    def _store(self, prompt: list[int], identity: CacheIdentity, hits: dict[int, Any], kv: KVCache) -> int:
        """Store every full prompt block not served from the cache, chained after its parent."""
        pinned = {b.uid for b in hits.values()}
        parent, stored = None, 0
        for start in range(0, len(prompt) - len(prompt) % self.block_size, self.block_size):
            if start in hits:
                parent = hits[start]
                continue
            block = self.cache.insert(
                parent, start, prompt[start : start + self.block_size], identity, self._payload(kv, start), pinned
            )
            if block is None:
                break  # no room: a child without its parent could never be matched
            stored += block.uid not in pinned
            pinned.add(block.uid)
            parent = block
        return stored

    @staticmethod
    def _greedy(
        model: Transformer, kv: KVCache, last: torch.Tensor, start: int, n: int
    ) -> tuple[list[int], torch.Tensor]:
        tokens: list[int] = []
        rows = [last]
        for i in range(n):
            tokens.append(int(rows[-1].argmax()))
            if i + 1 < n:
                out = model.step(torch.tensor([[tokens[-1]]], device=last.device), kv, start + i)
                rows.append(out[0, -1].float())
        return tokens, torch.stack(rows[:n]) if n else last.new_zeros(0, last.shape[-1])

    def recompute(self, tokens: Sequence[int], *, adapter: str | None = None, new_tokens: int = 0) -> PrefixReply:
        prompt = [int(t) for t in tokens]
        model, kv = self.model(adapter), self.kv_cache(1)
        logits = model.step(torch.tensor([prompt], device=self.spec.device), kv, 0)[0].float()
        continuation, steps = self._greedy(model, kv, logits[-1], len(prompt), new_tokens)
        stats = RequestStats(len(prompt), 0, 0, len(prompt), [], [], [], 0, 0, 0)
        return PrefixReply(logits, list(range(len(prompt))), continuation, steps, stats)

    def _derived(self, spec: WorkerSpec) -> PrefixWorker:
        """A worker on `spec` sharing this worker's cache store."""
        return PrefixWorker(spec, self.cache, self._faults)

    def sibling(self, field: str) -> PrefixWorker | None:
        spec, cfg = self.spec, self.spec.config
        if field == "model-revision":
            return self._derived(replace(spec, weight_updates=(*spec.weight_updates, 9001)))
        if field == "tokenizer":
            return self._derived(replace(spec, tokenizer="tok-v2" if spec.tokenizer == "tok-v1" else "tok-v1"))
        if field == "rope-scaling" and cfg.rope:
            return self._derived(replace(spec, config=replace(cfg, rope_base=cfg.rope_base * 4)))
        if field == "attention-window":
            window = None if cfg.window is not None else max(2, self.block_size)
            return self._derived(replace(spec, config=replace(cfg, window=window)))
        if field == "kv-dtype":
            return self._derived(replace(spec, kv_dtype="bfloat16" if spec.kv_dtype == "float32" else "float32"))
        return None

    def fresh(
        self,
        *,
        block_size: int | None = None,
        byte_budget: int | None = None,
        hash_fn: Callable[[bytes], bytes] | None = None,
    ) -> PrefixWorker:
        return PrefixWorker.create(
            self.spec,
            block_size=block_size or self.block_size,
            byte_budget=byte_budget or self.cache.byte_budget,
            faults=self._faults,
            hash_fn=hash_fn,
        )

    def update_weights(self, target: str = "model", *, seed: int = 1) -> None:
        if target == "model":
            self.spec = replace(self.spec, weight_updates=(*self.spec.weight_updates, seed))
            new = _built(self.spec, None)[1]
            self.state.revision = self._on_update(self, "model_revision", self.state.revision, new) or new
            return
        if target not in ADAPTER_NAMES:
            raise ValueError(f"unknown adapter {target!r}")
        self.spec = replace(self.spec, adapter_updates=(*self.spec.adapter_updates, (target, seed)))
        old, new = self.state.adapter_labels[target], f"{target}@r{len(self.spec.adapter_seeds(target))}"
        self.state.adapter_labels[target] = self._on_update(self, "adapter", old, new) or new

    def save_cache(self, file: Path) -> int:
        return self.cache.save(file)

    def _admissible(self, identity: CacheIdentity, payload: tuple[torch.Tensor, ...]) -> str | None:
        """Why a restored block may not be revived here, or None."""
        mine = self.identity_for()
        for name, value in identity.worker_part():
            if getattr(mine, name) != value:
                return f"{name} {value} is not this worker's {getattr(mine, name)}"
        if identity.adapter is not None and identity.adapter not in self.state.adapter_labels.values():
            return f"adapter {identity.adapter} is not served here"
        cfg = self.spec.config
        shape = (cfg.n_kv_heads, self.block_size, cfg.head_dim)
        if len(payload) != 2 * cfg.n_layers or any(tuple(t.shape) != shape for t in payload):
            return "K/V layout differs"
        return None

    def restore_cache(self, file: Path) -> RestoreReport:
        return self.cache.restore(file, self._admissible, device=self.spec.device)

    def cache_state(self) -> dict[str, Any]:
        c = self.cache.counters
        return {
            "blocks": len(self.cache),
            "bytes_held": self.cache.bytes_held,
            "byte_budget": self.cache.byte_budget,
            "block_size": self.block_size,
            "hash": self.cache.rules.hash_name,
            "lookups": c.lookups,
            "hits": c.hits,
            "stored": c.stored,
            "evicted": c.evicted,
            "invalidated": c.invalidated,
            "collisions_detected": c.collisions_detected,
            "not_stored": c.not_stored,
        }


def build(model: Transformer, options: Any, *, device: str, dtype: str, seed: int) -> PrefixWorker:
    """The `prefix-cache` path builder of the reference adapter (its PATHS table)."""
    settings = getattr(options, "prefix", None) or PrefixOptions()
    kv_dtype = settings.kv_dtype or dtype
    spec = WorkerSpec(base=model, config=model.config, seed=seed, device=device, dtype=dtype, kv_dtype=kv_dtype)
    worker = PrefixWorker.create(spec, block_size=options.block_size, byte_budget=settings.cache_bytes)
    fault = getattr(options, "fault", None)
    return worker.with_fault(fault) if fault else worker
