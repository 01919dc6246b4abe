"""A third-party gate adapter for BlockStore (store.py), a prefix cache that is not gate's.

`store.py` is the cache as its authors would write it, with no import from gate. This file wraps it
in what gate's prefix checks test for, and only what the store naturally offers (gate.protocols):
serve and recompute, an identity report, a pluggable hash, weight updates, save and restore, a byte
budget. It has no sibling workers (one model, one configuration) and serves no adapters, so the
assertions that need those are `unproven` in its dossier. Its planted bugs (store.Bugs) are offered
as faults under the names gate's prefix-reuse policy uses for the same mistakes, and as `bug:`.

Its two design choices are options, each with a safe setting (the default) and a hazardous one that
gate names (docs/plugins.md, design hazards): `verify: tokens` (`weak-hash-across-tenants`),
`verify: nothing` (`weak-hash-across-contexts`) and `restore_by: revision`
(`restart-admits-same-revision`). `api: single-protocol` serves the same store through the single
`PrefixCaching` protocol of earlier releases (`fresh(block_size=, byte_budget=, hash_fn=)`, no
`reset_cache`, `with_hash`, `with_budget` or `restarted`), as a plugin written then still does.

Written against docs/plugins.md alone: every gate name it uses is imported from `gate.plugin`.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

FAULTS: dict[str, str] = {
    "verify-ignores-identity": "namespace_unverified",
    "trust-hash": "nothing_verified",
    "key-ignores-tenant": "tenant_unkeyed",
    "key-ignores-position": "parent_unkeyed",
    "ignore-byte-budget": "budget_ignored",
    "restore-trusts-label": "restore_trusts_label",
    "skip-invalidation": "update_keeps_entries",
}
"""Fault name -> the store.Bugs field it turns on."""


class Options(BaseModel):
    """How to build one BlockStore path."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    block_size: int = Field(default=4, ge=1, le=64)
    """Tokens per block."""
    capacity_bytes: int = Field(default=1 << 20, ge=1)
    """Byte budget of the block cache."""
    revision: str = "main"
    """The revision label the operator gives the deployed weights."""
    verify: Literal["key", "tokens", "nothing"] = "key"
    """What a hash hit is compared with before it is served: `key` (parent, tokens, tenant and
    weights), `tokens` (parent and tokens: the digest is trusted to keep tenants and weights apart),
    `nothing` (the digest is trusted entirely)."""
    restore_by: Literal["fingerprint", "revision"] = "fingerprint"
    """Which saved entries a restore admits: those of the same weights fingerprint, or every entry
    of a snapshot saved under the same revision label."""
    api: Literal["capabilities", "single-protocol"] = "capabilities"
    """The gate store API the path is written against: the split prefix capabilities, or the single
    PrefixCaching protocol of earlier releases."""
    bug: Literal[
        "none",
        "verify-ignores-identity",
        "trust-hash",
        "key-ignores-tenant",
        "key-ignores-position",
        "ignore-byte-budget",
        "restore-trusts-label",
        "skip-invalidation",
    ] = "none"
    """A planted bug (store.Bugs), by fault name."""
    layers: int = Field(default=2, ge=1, le=8)
    """TinyLM decoder layers (as tinylm's own adapter builds it)."""
    max_len: int = Field(default=192, ge=8, le=4096)
    """TinyLM positions."""


class BlockStoreAdapter:
    """Builds a BlockStore over a TinyLM seeded as tinylm's adapter seeds it (same weights)."""

    name: ClassVar[str] = "blockstore"
    Options: ClassVar[type[BaseModel]] = Options

    def build(self, options: BaseModel, *, device: str, dtype: str, seed: int) -> Any:
        import torch
        from gate_plugin_tinylm.tinylm import Config, TinyLM

        opts = options if isinstance(options, Options) else Options.model_validate(options.model_dump())
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = TinyLM(Config(n_layers=opts.layers, max_len=opts.max_len)).to(
                device=device, dtype=getattr(torch, dtype)
            )
        path = BlockStorePath(model.eval(), opts, bugs=() if opts.bug == "none" else (opts.bug,))
        return path if opts.api == "capabilities" else SingleProtocolPath(path)


class BlockStorePath:
    """gate.protocols.DecodePath plus the prefix capabilities BlockStore offers."""

    uses_cache = True

    def __init__(
        self,
        model: Any,
        options: Options,
        *,
        bugs: tuple[str, ...] = (),
        hash_fn: Callable[[bytes], bytes] | None = None,
        checkpoint_seed: int | None = None,
    ) -> None:
        from gate_plugin_blockstore.store import BlockStore, Bugs, blake2b

        self.options, self.bugs, self._hash_fn = options, bugs, hash_fn
        self._built = {k: v.clone() for k, v in model.state_dict().items()}
        self.model = model
        if checkpoint_seed is not None:
            self._load(_perturbed(self._built, checkpoint_seed), into_store=False)
        self.store = BlockStore(
            model,
            block_size=options.block_size,
            capacity_bytes=options.capacity_bytes,
            revision=options.revision,
            hash_fn=hash_fn or blake2b,
            verify=options.verify,
            restore_by=options.restore_by,
            bugs=Bugs(**{FAULTS[b]: True for b in bugs}),
        )
        self.name = "blockstore" + "".join(f"+{b}" for b in bugs)
        self.block_size = options.block_size
        self.vocab_size, self.max_len = model.config.vocab_size, model.config.max_len
        self.dtype = str(next(model.parameters()).dtype).removeprefix("torch.")

    def _spawn(self, **changes: Any) -> BlockStorePath:
        """A new store process on the weights as built (empty cache)."""
        model = copy.deepcopy(self.model)
        model.load_state_dict(self._built)
        opts = self.options.model_copy(update=changes.pop("options", {}))
        args: dict[str, Any] = {"bugs": self.bugs, "hash_fn": self._hash_fn, **changes}
        return BlockStorePath(model, opts, **args)

    def _load(self, state: dict[str, Any], *, into_store: bool = True) -> None:
        if into_store:
            self.store.load_weights(state)
        else:
            self.model.load_state_dict(state)

    # -- DecodePath --------------------------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        return {
            "store": "gate_plugin_blockstore",
            "weights": self.store.fingerprint,
            "revision": self.options.revision,
            "block_size": self.block_size,
            "capacity_bytes": self.options.capacity_bytes,
            "bugs": list(self.bugs),
            "options": json.loads(self.options.model_dump_json()),
        }

    def full_logits(self, tokens: Any) -> Any:
        import torch

        with torch.no_grad():
            return self.model(tokens).float()

    def new_session(self, batch_size: int) -> Any:
        from gate_plugin_tinylm.tinylm import CachedSession

        return CachedSession(self.model)

    def faults(self) -> tuple[str, ...]:
        return tuple(FAULTS)

    def with_fault(self, fault: str) -> BlockStorePath:
        from gate.plugin import UnknownFault

        if fault not in FAULTS:
            raise UnknownFault(f"blockstore cannot plant {fault!r} (its faults: {', '.join(FAULTS)})")
        return self._spawn(bugs=(*self.bugs, fault))

    # -- serve and recompute -----------------------------------------------------------------------
    def adapters(self) -> tuple[str, ...]:
        return ()

    def request(
        self, tokens: Sequence[int], *, adapter: str | None = None, tenant: str | None = None, new_tokens: int = 0
    ) -> Any:
        from gate.plugin import PrefixReply, RequestStats

        if adapter is not None:
            raise ValueError("blockstore serves no adapters")
        prompt = [int(t) for t in tokens]
        store, bs = self.store, self.block_size
        evicted = store.counters.evicted
        found = store.lookup(prompt, tenant)
        reused = min(len(found.entries) * bs, len(prompt) - 1)
        used = found.entries[: -(-reused // bs)]
        logits, kv = store.prefill(prompt, store.joined(used, reused), reused)
        stored = store.store(prompt, tenant, kv, found.entries)
        continuation, rows = self._greedy(logits[-1], kv, len(prompt), new_tokens)
        stats = RequestStats(
            prompt_tokens=len(prompt),
            hit_blocks=len(used),
            reused_tokens=reused,
            computed_tokens=len(prompt) - reused,
            reused_spans=[(0, reused)] if reused else [],
            served_at=[i * bs for i in range(len(used))],
            served_from=[e.depth * bs for e in used],
            stored_blocks=stored,
            collisions_detected=found.collisions,
            evicted_blocks=store.counters.evicted - evicted,
        )
        return PrefixReply(logits, list(range(reused, len(prompt))), continuation, rows, stats)

    def recompute(self, tokens: Sequence[int], *, adapter: str | None = None, new_tokens: int = 0) -> Any:
        from gate.plugin import PrefixReply, RequestStats

        if adapter is not None:
            raise ValueError("blockstore serves no adapters")
        prompt = [int(t) for t in tokens]
        logits, kv = self.store.prefill(prompt, None, 0)
        continuation, rows = self._greedy(logits[-1], kv, len(prompt), new_tokens)
        stats = RequestStats(len(prompt), 0, 0, len(prompt), [], [], [], 0, 0, 0)
        return PrefixReply(logits, list(range(len(prompt))), continuation, rows, stats)

    def _greedy(self, last: Any, kv: Any, start: int, n: int) -> tuple[list[int], Any]:
        import torch

        tokens: list[int] = []
        rows = [last]
        for i in range(n):
            tokens.append(int(rows[-1].argmax()))
            if i + 1 < n:
                step, kv = self._step(tokens[-1], kv, start + i)
                rows.append(step)
        return tokens, torch.stack(rows[:n]) if n else last.new_zeros(0, last.shape[-1])

    def _step(self, token: int, kv: Any, pos: int) -> tuple[Any, Any]:
        import torch

        with torch.no_grad():
            logits, kv = self.model.step(torch.tensor([[token]]), pos, kv)
        return logits[0, -1].float(), kv

    def fresh(self, *, block_size: int | None = None) -> BlockStorePath:
        return self._spawn(options={"block_size": block_size or self.block_size})

    def reset_cache(self) -> int:
        return self.store.drop_where(lambda _e: True)

    def cache_state(self) -> dict[str, Any]:
        c = self.store.counters
        return {
            "blocks": len(self.store.entries),
            "bytes_held": self.store.bytes_held,
            "byte_budget": self.store.capacity_bytes,
            "evicted": c.evicted,
            "stored": c.stored,
            "hits": c.hits,
            "lookups": c.lookups,
            "collisions_detected": c.collisions,
        }

    # -- identity report -----------------------------------------------------------------------------
    def identity_for(self, *, adapter: str | None = None, tenant: str | None = None) -> Any:
        from gate.plugin import CacheIdentity

        return CacheIdentity(
            model_revision=self.store.fingerprint,
            tokenizer="tinylm-ids",
            rope="learned-positions",
            attention_window=None,
            attention_mask="causal",
            kv_dtype=self.dtype,
            adapter=adapter,
            tenant=tenant,
        )

    # -- pluggable hash, budget -----------------------------------------------------------------------
    def with_hash(self, hash_fn: Callable[[bytes], bytes]) -> BlockStorePath:
        return self._spawn(hash_fn=hash_fn)

    def with_budget(self, byte_budget: int) -> BlockStorePath:
        return self._spawn(options={"capacity_bytes": byte_budget})

    # -- weight update, save and restore ---------------------------------------------------------------
    def update_weights(self, target: str = "model", *, seed: int = 1) -> None:
        if target != "model":
            raise ValueError("blockstore serves no adapters")
        self._load(_perturbed(self.model.state_dict(), seed))

    def save_cache(self, file: Path) -> int:
        return self.store.save(file)

    def restore_cache(self, file: Path) -> Any:
        from gate.plugin import RestoreReport

        admitted, refused = self.store.restore(file)
        return RestoreReport(restored=admitted, dropped=refused)

    def restarted(self, *, checkpoint_seed: int | None = None) -> BlockStorePath:
        return self._spawn(checkpoint_seed=checkpoint_seed)


class SingleProtocolPath:
    """The same store as a plugin written against the single PrefixCaching protocol of earlier
    releases serves it: `fresh` takes the block size and hash, and, like many stores written then,
    keeps the byte budget it was configured with (`capacity_bytes`, declared in `cache_state`)
    rather than the `byte_budget` asked; there is no `reset_cache`, `with_hash`, `with_budget` or
    `restarted` (gate serves such a path through its own wrapper of that API)."""

    uses_cache = True

    def __init__(self, inner: BlockStorePath) -> None:
        self.inner = inner
        self.name = inner.name + "+single-protocol"
        self.block_size, self.dtype = inner.block_size, inner.dtype
        self.vocab_size, self.max_len = inner.vocab_size, inner.max_len

    def identity(self) -> dict[str, Any]:
        return {**self.inner.identity(), "api": "single-protocol"}

    def full_logits(self, tokens: Any) -> Any:
        return self.inner.full_logits(tokens)

    def new_session(self, batch_size: int) -> Any:
        return self.inner.new_session(batch_size)

    def faults(self) -> tuple[str, ...]:
        return self.inner.faults()

    def with_fault(self, fault: str) -> SingleProtocolPath:
        return SingleProtocolPath(self.inner.with_fault(fault))

    def request(self, tokens: Sequence[int], **options: Any) -> Any:
        return self.inner.request(tokens, **options)

    def recompute(self, tokens: Sequence[int], **options: Any) -> Any:
        return self.inner.recompute(tokens, **options)

    def identity_for(self, **options: Any) -> Any:
        return self.inner.identity_for(**options)

    def adapters(self) -> tuple[str, ...]:
        return ()

    def sibling(self, field: str) -> None:
        return None

    def fresh(
        self,
        *,
        block_size: int | None = None,
        byte_budget: int | None = None,
        hash_fn: Callable[[bytes], bytes] | None = None,
    ) -> SingleProtocolPath:
        changes: dict[str, Any] = {"options": {"block_size": block_size or self.block_size}}
        if hash_fn is not None:
            changes["hash_fn"] = hash_fn
        return SingleProtocolPath(self.inner._spawn(**changes))

    def update_weights(self, target: str = "model", *, seed: int = 1) -> None:
        self.inner.update_weights(target, seed=seed)

    def save_cache(self, file: Path) -> int:
        return self.inner.save_cache(file)

    def restore_cache(self, file: Path) -> Any:
        return self.inner.restore_cache(file)

    def cache_state(self) -> dict[str, Any]:
        return self.inner.cache_state()


def _perturbed(state: dict[str, Any], seed: int) -> dict[str, Any]:
    """Every floating weight nudged by a seeded perturbation (a new checkpoint)."""
    import torch

    gen = torch.Generator().manual_seed(int(hashlib.sha256(str(seed).encode()).hexdigest()[:8], 16))
    out = {k: v.clone() for k, v in state.items()}
    for value in out.values():
        if value.is_floating_point():
            value.add_(0.2 * value.float().std() * torch.randn(value.shape, generator=gen).to(value))
    return out
