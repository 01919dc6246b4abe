"""A serving worker with a cross-request block prefix cache, over any model code.

`PrefixWorker` implements gate.protocols.PrefixCaching (and DecodePath) once; what differs between
model codes is a `ModelFamily` (gate.prefix.family). Siblings built by `sibling(field)` share the
cache store, like workers behind one shared KV tier. Sessions (`new_session`) run a plain
per-request cache: a position served from the prefix cache has no logits. Faults (gate.prefix.faults)
replace one cache rule, or, for skip-invalidation, the worker's update hook.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypedDict, Unpack

import torch

from gate.errors import UnknownFault
from gate.prefix.cache import CacheIdentity, CacheRules, PrefixCache, PrefixReply, RequestStats, RestoreReport
from gate.prefix.family import ADAPTER_NAMES, REVISION_SIBLING_SEED, WorkerSpec, built
from gate.prefix.faults import PREFIX_FAULTS, apply_rule_faults
from gate.protocols import subject_call
from gate.tensors import DTYPES


class Fresh(TypedDict, total=False):
    """What a fresh worker may change (`PrefixWorker.fresh`; unset or None: as this one)."""

    block_size: int | None
    byte_budget: int | None
    hash_fn: Callable[[bytes], bytes] | None


class PlainSession:
    """A per-request session (the DecodePath protocol): no cross-request reuse."""

    def __init__(self, worker: PrefixWorker, batch_size: int) -> None:
        self.worker, self.batch_size = worker, batch_size
        self.cache = worker.kv_cache(batch_size)
        self.pos = self.steps = 0

    def prefill(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.append(tokens)

    def append(self, tokens: torch.Tensor) -> torch.Tensor:
        self.steps += 1
        worker = self.worker
        logits = worker.spec.family.step(worker.model(), tokens.to(worker.spec.device), self.cache, self.pos)
        self.pos += tokens.shape[1]
        return logits

    def reset(self) -> None:
        self.cache, self.pos = self.worker.kv_cache(self.batch_size), 0

    def exercise(self) -> dict[str, Any]:
        return {
            "cache_len": self.pos,
            "cached_steps": self.steps,
            "cache_bytes": self.worker.spec.family.kv_bytes(self.cache),
        }


def _correct_update(worker: PrefixWorker, attr: str, old: str | None, new: str | None) -> str | None:
    """After loading new weights: drop every entry keyed on the old revision; key on the new one."""
    worker.cache.invalidate(lambda block: getattr(block.identity, attr) == old)
    return new


def _skip_invalidation(worker: PrefixWorker, attr: str, old: str | None, new: str | None) -> str | None:
    """The fault: the weights are loaded, the cache is kept and still keyed on the old revision."""
    return old


UpdateHook = Callable[["PrefixWorker", str, "str | None", "str | None"], "str | None"]


class PrefixWorker:
    """One serving worker with a cross-request prefix cache (DecodePath and PrefixCaching)."""

    uses_cache = True

    def __init__(self, spec: WorkerSpec, cache: PrefixCache, faults: tuple[str, ...] = ()) -> None:
        family = spec.family
        self.spec, self.cache, self._faults = spec, cache, faults
        self.block_size = cache.block_size
        self.vocab_size, self.max_len, self.dtype = family.vocab_size, family.max_len, spec.dtype
        self.name = f"{family.name}:prefix-cache" + "".join(f"+{f}" for f in faults)
        self._on_update: UpdateHook = _skip_invalidation if "skip-invalidation" in faults else _correct_update
        # what the worker keys on now (derived from its weights unless `_on_update` keeps an old label)
        model, self.revision = built(spec, None)
        self._adapters = ADAPTER_NAMES if family.kv_projections(model) else ()
        self.adapter_labels = {n: f"{n}@r0" for n in self._adapters}

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
    def model(self, adapter: str | None = None) -> torch.nn.Module:
        return built(self.spec, adapter)[0]

    def kv_cache(self, batch: int) -> Any:
        spec = self.spec
        return spec.family.new_kv(spec.config, batch, device=spec.device, dtype=spec.dtype, kv_dtype=spec.kv_dtype)

    def identity(self) -> dict[str, Any]:
        return {
            **self.spec.family.describe(self.spec.config),
            "seed": self.spec.seed,
            "model_revision": self.revision,
            "tokenizer": self.spec.tokenizer,
            "kv_dtype": self.spec.kv_dtype,
            "block_size": self.block_size,
            "byte_budget": self.cache.byte_budget,
            "hash": self.cache.rules.hash_name,
            "faults": list(self._faults),
        }

    def full_logits(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.spec.family.full_logits(self.model(), tokens.to(self.spec.device))

    def new_session(self, batch_size: int) -> PlainSession:
        return PlainSession(self, batch_size)

    def faults(self) -> tuple[str, ...]:
        return PREFIX_FAULTS

    def with_fault(self, fault: str) -> PrefixWorker:
        if fault not in PREFIX_FAULTS:
            raise UnknownFault(f"path {self.name} cannot apply fault {fault!r} (known: {', '.join(PREFIX_FAULTS)})")
        return type(self).create(
            self.spec, block_size=self.block_size, byte_budget=self.cache.byte_budget, faults=(*self._faults, fault)
        )

    # -- PrefixCaching -------------------------------------------------------------------------
    def adapters(self) -> tuple[str, ...]:
        return self._adapters

    def identity_for(self, *, adapter: str | None = None, tenant: str | None = None) -> CacheIdentity:
        family, config = self.spec.family, self.spec.config
        if adapter is not None and adapter not in self._adapters:
            raise ValueError(f"unknown adapter {adapter!r} (served: {', '.join(self._adapters) or 'none'})")
        return CacheIdentity(
            model_revision=self.revision,
            tokenizer=self.spec.tokenizer,
            rope=family.rope(config),
            attention_window=family.window(config),
            attention_mask="causal",
            kv_dtype=self.spec.kv_dtype,
            adapter=self.adapter_labels[adapter] if adapter else None,
            tenant=tenant,
        )

    def _payload(self, kv: Any, start: int) -> tuple[torch.Tensor, ...]:
        # per layer k, v: [H_kv, block_size, D] in the KV dtype
        kv_dtype = DTYPES[self.spec.kv_dtype]
        return tuple(t.to(kv_dtype).clone() for t in self.spec.family.read_block(kv, start, start + self.block_size))

    def _step(self, model: torch.nn.Module, tokens: Sequence[int], kv: Any, pos: int) -> torch.Tensor:
        """tokens of one request at positions pos.. -> logits [n, V] float32."""
        batch = torch.tensor([list(tokens)], device=self.spec.device)
        return self.spec.family.step(model, batch, kv, pos)[0]

    def request(
        self, tokens: Sequence[int], *, adapter: str | None = None, tenant: str | None = None, new_tokens: int = 0
    ) -> PrefixReply:
        prompt = [int(t) for t in tokens]
        if not prompt:
            raise ValueError("a request needs at least one token")
        # the worker's own serving code (match, inject, store, hash): the subject's work and crashes
        with subject_call(f"{type(self).__name__}.request", length=len(prompt)):
            return self._serve(prompt, adapter, tenant, new_tokens)

    def _serve(self, prompt: list[int], adapter: str | None, tenant: str | None, new_tokens: int) -> PrefixReply:
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
                self.spec.family.write_block(kv, tuple(t.to(DTYPES[self.spec.dtype]) for t in block.payload), pos, n)
                if spans and spans[-1][1] == pos:
                    spans[-1] = (spans[-1][0], pos + n)
                else:
                    spans.append((pos, pos + n))
                served_at.append(pos)
                served_from.append(block.start)
                pos += n
                continue
            end = next((s for s in starts if s > pos), len(prompt))
            rows.append(self._step(model, prompt[pos:end], kv, pos).float())
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

    def _store(self, prompt: list[int], identity: CacheIdentity, hits: dict[int, Any], kv: Any) -> int:
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

    def _greedy(
        self, model: torch.nn.Module, kv: Any, last: torch.Tensor, start: int, n: int
    ) -> tuple[list[int], torch.Tensor]:
        tokens: list[int] = []
        rows = [last]
        for i in range(n):
            tokens.append(int(rows[-1].argmax()))
            if i + 1 < n:
                rows.append(self._step(model, tokens[-1:], kv, start + i)[-1].float())
        return tokens, torch.stack(rows[:n]) if n else last.new_zeros(0, last.shape[-1])

    def recompute(self, tokens: Sequence[int], *, adapter: str | None = None, new_tokens: int = 0) -> PrefixReply:
        prompt = [int(t) for t in tokens]
        with subject_call(f"{type(self).__name__}.recompute", length=len(prompt)):
            model, kv = self.model(adapter), self.kv_cache(1)
            logits = self._step(model, prompt, kv, 0).float()
            continuation, steps = self._greedy(model, kv, logits[-1], len(prompt), new_tokens)
        stats = RequestStats(len(prompt), 0, 0, len(prompt), [], [], [], 0, 0, 0)
        return PrefixReply(logits, list(range(len(prompt))), continuation, steps, stats)

    def _derived(self, spec: WorkerSpec) -> PrefixWorker:
        """A worker on `spec` sharing this worker's cache store."""
        return type(self)(spec, self.cache, self._faults)

    def sibling(self, field: str) -> PrefixWorker | None:
        spec = self.spec
        if field == "model-revision":
            return self._derived(replace(spec, weight_updates=(*spec.weight_updates, REVISION_SIBLING_SEED)))
        if field == "tokenizer":
            return self._derived(replace(spec, tokenizer="tok-v2" if spec.tokenizer == "tok-v1" else "tok-v1"))
        if field == "kv-dtype":
            return self._derived(replace(spec, kv_dtype="bfloat16" if spec.kv_dtype == "float32" else "float32"))
        if field in ("rope-scaling", "attention-window"):
            config = spec.family.varied(spec.config, field, self.block_size)
            return None if config is None else self._derived(replace(spec, config=config))
        return None

    def fresh(self, **changes: Unpack[Fresh]) -> PrefixWorker:
        return type(self).create(
            self.spec,
            block_size=changes.get("block_size") or self.block_size,
            byte_budget=changes.get("byte_budget") or self.cache.byte_budget,
            faults=self._faults,
            hash_fn=changes.get("hash_fn"),
        )

    def with_hash(self, hash_fn: Callable[[bytes], bytes]) -> PrefixWorker:
        return self.fresh(hash_fn=hash_fn)

    def with_budget(self, byte_budget: int) -> PrefixWorker:
        return self.fresh(byte_budget=byte_budget)

    def reset_cache(self) -> int:
        return self.cache.clear()

    def restarted(self, *, checkpoint_seed: int | None = None) -> PrefixWorker:
        """A new worker process with an empty cache; on another checkpoint it keys on that
        checkpoint's digest, whatever label the operator gives it."""
        spec = self.spec
        if checkpoint_seed is not None:
            spec = replace(spec, weight_updates=(*spec.weight_updates, checkpoint_seed))
        return type(self).create(
            spec, block_size=self.block_size, byte_budget=self.cache.byte_budget, faults=self._faults
        )

    def update_weights(self, target: str = "model", *, seed: int = 1) -> None:
        if target == "model":
            self.spec = replace(self.spec, weight_updates=(*self.spec.weight_updates, seed))
            new = built(self.spec, None)[1]
            self.revision = self._on_update(self, "model_revision", self.revision, new) or new
            return
        if target not in self._adapters:
            raise ValueError(f"unknown adapter {target!r}")
        self.spec = replace(self.spec, adapter_updates=(*self.spec.adapter_updates, (target, seed)))
        old, new = self.adapter_labels[target], f"{target}@r{len(self.spec.adapter_seeds(target))}"
        self.adapter_labels[target] = self._on_update(self, "adapter", old, new) or new

    def save_cache(self, file: Path) -> int:
        return self.cache.save(file)

    def _admissible(self, identity: CacheIdentity, payload: tuple[torch.Tensor, ...]) -> str | None:
        """Why a restored block may not be revived here, or None."""
        mine = self.identity_for()
        for name, value in identity.worker_part():
            if getattr(mine, name) != value:
                return f"{name} {value} is not this worker's {getattr(mine, name)}"
        if identity.adapter is not None and identity.adapter not in self.adapter_labels.values():
            return f"adapter {identity.adapter} is not served here"
        layers, kv_heads, head_dim = self.spec.family.kv_layout(self.spec.config)
        shape = (kv_heads, self.block_size, head_dim)
        if len(payload) != 2 * layers or any(tuple(t.shape) != shape for t in payload):
            return "K/V layout differs"
        return None

    def restore_cache(self, file: Path) -> RestoreReport:
        return self.cache.restore(file, self._admissible, device=self.spec.device)

    def cache_state(self) -> dict[str, Any]:
        cache = self.cache
        return {
            "blocks": len(cache),
            "bytes_held": cache.bytes_held,
            "byte_budget": cache.byte_budget,
            "block_size": self.block_size,
            "hash": cache.rules.hash_name,
            **dataclasses.asdict(cache.counters),
        }
