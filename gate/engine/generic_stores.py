"""Generic stand-ins for prefix stores: wrappers that break, from outside and through the protocol
alone, the rule a prefix-reuse check judges, so a store that plants no faults of its own still gets
a control (gate.engine.generic_faults.STORE_FAULTS says what each breaks). A wrapper cannot reach
inside a store's key: it changes what the store is asked or what state a request is served from.
This module imports no torch at import time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gate.engine.generic_sessions import GenericCarrier
from gate.protocols import PrefixServing, offered

STORE_ATTRS = (
    "identity_for",
    "sibling",
    "with_hash",
    "with_budget",
    "update_weights",
    "save_cache",
    "restore_cache",
    "restarted",
)
"""The optional prefix capabilities a wrapper offers exactly where the store it wraps offers them."""
DERIVED = ("fresh", "with_hash", "with_budget", "restarted")
"""Capabilities that return a new store: it is wrapped with the same fault."""
PATH_ATTRS = ("vocab_size", "max_len", "dtype", "uses_cache", "full_logits", "new_session")


def as_store(path: Any) -> PrefixServing | None:
    """The path as a prefix store (a store written against the single protocol of earlier releases
    through `LegacyStore`, as the checks serve it), or None."""
    if (store := offered(path, PrefixServing)) is not None:
        return store
    from gate.checks.planning import LEGACY_METHODS, LegacyStore

    if all(callable(getattr(path, name, None)) for name in LEGACY_METHODS):
        return LegacyStore(path)
    return None


class WrappedStore(GenericCarrier):
    """A prefix store forwarding to `inner`; subclasses change what the store is asked. As the
    top-level candidate it is a DecodePath too (`path`: the subject's own path)."""

    def __init__(self, inner: PrefixServing, path: Any = None, fault: str = "") -> None:
        self.inner, self.path, self.fault, self.carried = inner, path, fault, fault
        self.name = f"{getattr(path or inner, 'name', 'store')}+generic:{fault}"

    def __getattr__(self, attr: str) -> Any:
        if attr in ("inner", "path", "fault", "carried"):
            raise AttributeError(attr)
        if attr == "block_size":
            return self.inner.block_size
        if attr in PATH_ATTRS:
            source = self.path if self.path is not None and hasattr(self.path, attr) else self.inner
            return getattr(source, attr)
        if attr not in STORE_ATTRS:
            raise AttributeError(attr)
        value = getattr(self.inner, attr)  # absent on the inner store: absent here
        if attr in DERIVED:
            return lambda *args, **kw: self.derived(value(*args, **kw))
        return value

    def derived(self, store: PrefixServing) -> WrappedStore:
        """A new store made by the inner one (fresh, another hash or budget, restarted), wrapped alike."""
        return type(self)(store, None, self.fault)

    def identity(self) -> dict[str, Any]:
        return {**(self.path.identity() if self.path is not None else {}), "generic_fault": self.fault}

    def fresh(self, *, block_size: int | None = None) -> WrappedStore:
        return self.derived(self.inner.fresh(block_size=block_size))

    def request(self, tokens: Sequence[int], **options: Any) -> Any:
        return self.inner.request(tokens, **options)

    def recompute(self, tokens: Sequence[int], **options: Any) -> Any:
        return self.inner.recompute(tokens, **options)

    def adapters(self) -> tuple[str, ...]:
        return tuple(self.inner.adapters())

    def reset_cache(self) -> int:
        return int(self.inner.reset_cache())

    def cache_state(self) -> dict[str, Any]:
        return dict(self.inner.cache_state())


class TenantShared(WrappedStore):
    """Every request is served unsalted: the tenant never reaches the key (the report still names it)."""

    def request(self, tokens: Sequence[int], **options: Any) -> Any:
        return self.inner.request(tokens, **{**options, "tenant": None})


class AdapterShared(WrappedStore):
    """A request naming an adapter is served as a base-model request: the adapter never reaches the
    key (nor the computation); its uncached computation stays the adapter's."""

    def request(self, tokens: Sequence[int], **options: Any) -> Any:
        return self.inner.request(tokens, **{**options, "adapter": None})


class _ServedByBase:
    """A sibling (another revision, tokenizer, ...) whose requests the base store serves from its
    cache: the field it differs in is not in the shared store's key."""

    def __init__(self, base: PrefixServing, real: PrefixServing) -> None:
        self.base, self.real = base, real
        self.block_size = real.block_size

    def __getattr__(self, attr: str) -> Any:
        if attr in ("base", "real"):
            raise AttributeError(attr)
        if attr in ("identity_for", "adapters", "recompute"):
            return getattr(self.real, attr)
        if attr in ("reset_cache", "cache_state"):
            return getattr(self.base, attr)
        raise AttributeError(attr)

    def request(self, tokens: Sequence[int], **options: Any) -> Any:
        return self.base.request(tokens, **options)

    def fresh(self, *, block_size: int | None = None) -> Any:
        return self.real.fresh(block_size=block_size)


class SiblingShared(WrappedStore):
    """`sibling(field)` for the one field this fault names is served from the base store's cache."""

    field: str = ""

    def __getattr__(self, attr: str) -> Any:
        if attr == "sibling":
            store: Any = self.inner
            inner_sibling = store.sibling  # absent: no siblings here either

            def sibling(field: str) -> Any:
                real = inner_sibling(field)
                if real is None or field != self.field:
                    return real
                return _ServedByBase(self.inner, real)

            return sibling
        return super().__getattr__(attr)


class ParentBlind(WrappedStore):
    """A block is matched by its position and tokens alone: a request is served after an earlier
    context of the same identity that held the same block at the same position."""

    def __init__(self, inner: PrefixServing, path: Any = None, fault: str = "") -> None:
        super().__init__(inner, path, fault)
        self.seen: list[tuple[tuple[int, ...], tuple[Any, ...]]] = []

    def request(self, tokens: Sequence[int], **options: Any) -> Any:
        prompt = [int(t) for t in tokens]
        who = (options.get("adapter"), options.get("tenant"))
        served = _after_other_parent(prompt, who, self.seen, int(self.inner.block_size)) or prompt
        self.seen.append((tuple(prompt), who))
        return self.inner.request(served, **options)

    def reset_cache(self) -> int:
        self.seen.clear()
        return super().reset_cache()


def _after_other_parent(
    prompt: list[int], who: tuple[Any, ...], seen: list[tuple[tuple[int, ...], tuple[Any, ...]]], bs: int
) -> list[int] | None:
    """The prompt with its prefix replaced by an earlier context of the same identity that holds the
    deepest of its blocks at the same position after other tokens (never its last token), or None."""
    for end in range((len(prompt) - 1) // bs * bs, bs, -bs):
        start = end - bs
        for earlier, earlier_who in seen:
            if earlier_who != who or len(earlier) < end:
                continue
            if list(earlier[start:end]) == prompt[start:end] and list(earlier[:start]) != prompt[:start]:
                return [*earlier[:end], *prompt[end:]]
    return None


class HashTrusted(WrappedStore):
    """Under a replaced hash (`with_hash`), a block whose bucket already holds another context's block
    is served that context's state (prefix and identity); under the store's own hash it forwards."""

    def __init__(
        self, inner: PrefixServing, path: Any = None, fault: str = "", hash_fn: Callable[[bytes], bytes] | None = None
    ) -> None:
        super().__init__(inner, path, fault)
        self.hash_fn = hash_fn
        self.buckets: dict[tuple[bytes, int], tuple[tuple[int, ...], dict[str, Any]]] = {}

    def __getattr__(self, attr: str) -> Any:
        if attr == "with_hash":
            store: Any = self.inner
            with_hash = store.with_hash

            def weak(hash_fn: Callable[[bytes], bytes]) -> HashTrusted:
                return HashTrusted(with_hash(hash_fn), None, self.fault, hash_fn)

            return weak
        return super().__getattr__(attr)

    def derived(self, store: PrefixServing) -> WrappedStore:
        return HashTrusted(store, None, self.fault, self.hash_fn)

    def request(self, tokens: Sequence[int], **options: Any) -> Any:
        if self.hash_fn is None:
            return self.inner.request(tokens, **options)
        prompt, bs = [int(t) for t in tokens], int(self.inner.block_size)
        who = {k: options.get(k) for k in ("adapter", "tenant")}
        parent, served, as_who = b"", prompt, options
        for block, end in enumerate(range(bs, len(prompt), bs)):
            material = repr((parent, block, prompt[end - bs : end], sorted(who.items()))).encode()
            parent = self.hash_fn(material)
            stored = self.buckets.setdefault((parent, block), (tuple(prompt[:end]), who))
            if stored != (tuple(prompt[:end]), who):  # another context in the bucket: trusted, served
                served, as_who = [*stored[0], *prompt[end:]], {**options, **stored[1]}
        return self.inner.request(served, **as_who)

    def reset_cache(self) -> int:
        self.buckets.clear()
        return super().reset_cache()


class InvalidationSkipped(WrappedStore):
    """A weight or adapter update never reaches the cache: requests are served by the store as it was,
    its uncached computation by a store with every update applied."""

    def __init__(self, inner: PrefixServing, path: Any = None, fault: str = "") -> None:
        super().__init__(inner, path, fault)
        self.updates: list[tuple[str, int]] = []
        self.updated: Any = None

    def __getattr__(self, attr: str) -> Any:
        if attr == "update_weights":
            store: Any = self.inner
            _ = store.update_weights  # absent: no weight updates here either

            def update_weights(target: str = "model", *, seed: int = 1) -> None:
                self.updates.append((target, seed))
                updated: Any = self.inner.fresh(block_size=self.inner.block_size)
                for name, each in self.updates:
                    updated.update_weights(name, seed=each)
                self.updated = updated

            return update_weights
        return super().__getattr__(attr)

    def recompute(self, tokens: Sequence[int], **options: Any) -> Any:
        return (self.updated or self.inner).recompute(tokens, **options)
