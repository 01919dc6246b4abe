"""The candidate of a prefix-reuse check as a store, and the `StorePool` one run's prefix checks share
(one store per variant, reset between scenarios, every start counted: on an engine a new process)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

from gate.core.check import CheckContext
from gate.prefix.cache import PrefixReply
from gate.protocols import PREFIX_CAPABILITIES, PrefixServing, offered

C = TypeVar("C")


class NotPrefixCaching(TypeError):
    """The candidate path offers no cross-request prefix cache."""


def prefix_candidate(ctx: CheckContext) -> PrefixServing:
    """The candidate as a prefix store (through `LegacyStore` for a path written against the single
    `PrefixCaching` protocol of earlier releases), or a clear error naming the capability it lacks."""
    if (store := offered(ctx.candidate, PrefixServing)) is not None:
        return store
    if all(callable(getattr(ctx.candidate, name, None)) for name in LEGACY_METHODS):
        legacy = ctx.candidate
        return ctx.cache.get(("legacy prefix store", legacy), lambda: LegacyStore(legacy))
    raise NotPrefixCaching(
        f"candidate path {ctx.candidate.name!r} offers no cross-request prefix cache "
        "(gate.protocols.PrefixServing: request, recompute, adapters, fresh, reset_cache, cache_state); "
        "use e.g. {adapter: reference, options: {path: prefix-cache}}"
    )


LEGACY_METHODS = (
    "request",
    "recompute",
    "identity_for",
    "adapters",
    "sibling",
    "fresh",
    "update_weights",
    "save_cache",
    "restore_cache",
    "cache_state",
)
"""The single PrefixCaching protocol before the capabilities were split (policy prefix-reuse v2)."""


class BudgetNotTaken(ValueError):
    """A store of the single protocol did not take the byte budget asked through `fresh(byte_budget=)`."""


class LegacyStore:
    """A store written against the earlier single protocol (`fresh(block_size=, byte_budget=, hash_fn=)`),
    offering every capability through its old methods: a reset and a restart are a fresh store made as
    this one was (`made_with`: the hash or budget it was given stays), a restart on another checkpoint
    is such a store with updated weights."""

    def __init__(self, inner: Any, **made_with: Any) -> None:
        self.inner = inner
        self.block_size: int = inner.block_size
        self.made_with = made_with

    def request(self, tokens: Sequence[int], **options: Any) -> PrefixReply:
        return cast(PrefixReply, self.inner.request(tokens, **options))

    def recompute(self, tokens: Sequence[int], **options: Any) -> PrefixReply:
        return cast(PrefixReply, self.inner.recompute(tokens, **options))

    def adapters(self) -> tuple[str, ...]:
        return tuple(self.inner.adapters())

    def identity_for(self, **options: Any) -> Any:
        return self.inner.identity_for(**options)

    def sibling(self, field: str) -> PrefixServing | None:
        sibling = self.inner.sibling(field)
        return None if sibling is None else LegacyStore(sibling)

    def fresh(self, *, block_size: int | None = None) -> LegacyStore:
        return LegacyStore(self.inner.fresh(block_size=block_size))

    def reset_cache(self) -> int:
        blocks = int(self.inner.cache_state().get("blocks") or 0)
        self.inner = self.inner.fresh(block_size=self.block_size, **self.made_with)
        return blocks

    def cache_state(self) -> dict[str, Any]:
        return cast(dict[str, Any], self.inner.cache_state())

    def with_hash(self, hash_fn: Callable[[bytes], bytes]) -> LegacyStore:
        return LegacyStore(self.inner.fresh(hash_fn=hash_fn), hash_fn=hash_fn)

    def with_budget(self, byte_budget: int) -> LegacyStore:
        """A store holding at most `byte_budget` bytes; BudgetNotTaken where its `cache_state` declares another."""
        store = LegacyStore(self.inner.fresh(byte_budget=byte_budget), byte_budget=byte_budget)
        declared = store.cache_state().get("byte_budget")
        if declared != byte_budget:
            raise BudgetNotTaken(
                f"the store (single PrefixCaching protocol) did not take the byte budget asked through "
                f"fresh(byte_budget={byte_budget}): it declares {declared}"
            )
        return store

    def update_weights(self, target: str = "model", *, seed: int = 1) -> None:
        self.inner.update_weights(target, seed=seed)

    def save_cache(self, file: Path) -> int:
        return int(self.inner.save_cache(file))

    def restore_cache(self, file: Path) -> Any:
        return self.inner.restore_cache(file)

    def restarted(self, *, checkpoint_seed: int | None = None) -> LegacyStore:
        store = LegacyStore(self.inner.fresh(**self.made_with), **self.made_with)
        if checkpoint_seed is not None:
            store.update_weights("model", seed=checkpoint_seed)
        return store


def capability_name(protocol: type) -> str:
    return next(name for name, proto in PREFIX_CAPABILITIES.items() if proto is protocol)


class StorePool:
    """The stores one run's prefix checks use, per candidate path (module docstring)."""

    def __init__(self) -> None:
        self.stores: dict[tuple[Any, ...], PrefixServing] = {}
        self.starts: list[str] = []

    def start(self, why: str, build: Callable[[], C]) -> C:
        """A store that cannot be shared (its weights change, or it restores a file): counted."""
        self.starts.append(why)
        return build()

    def shared(self, key: tuple[Any, ...], build: Callable[[], PrefixServing]) -> PrefixServing:
        """The store for `key`, started once and reset on every later use."""
        store = self.stores.get(key)
        if store is None:
            store = self.stores[key] = self.start("/".join(map(str, key)), build)
        else:
            store.reset_cache()
        return store


def store_pool(ctx: CheckContext, candidate: PrefixServing) -> StorePool:
    """The pool of this run for this candidate path (a control's faulty path gets its own)."""
    return ctx.cache.get(("prefix-store-pool", candidate), StorePool)
