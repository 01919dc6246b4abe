"""Approximate-cache paths through the reference decoder: `quantized` and `evicting`: a cached
`ReferencePath` over a dynamic-layout cache that a cache hook wraps (gate.models.kv_approx) and whose
sessions add the approximation's own numbers to `exercise()`. Faults still apply on top.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Unpack

from gate.adapters.reference import Options
from gate.adapters.reference.options import EvictOptions, QuantOptions
from gate.adapters.reference.paths import ReferencePath, Run
from gate.errors import UnknownFault
from gate.models.evict_faults import EVICT_FAULTS
from gate.models.kv_approx import approx_stats, evict_cache, quantize_cache
from gate.models.kv_evict import EvictingStore
from gate.models.kv_quant import QUANT_FAULTS, QuantizedStore, quant_state, scheme_of
from gate.models.reference import KVCache, Transformer
from gate.protocols import EvictionPolicy, EvictionStep, QuantScheme, QuantState
from gate.tensors import DTYPES


class _ApproxSession:
    """A session whose exercise record also says what the approximate cache holds."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def exercise(self) -> dict[str, Any]:
        return {**self._inner.exercise(), **approx_stats(self._inner.cache)}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _QuantSession(_ApproxSession):
    """A session whose quantised store records what is written (gate.protocols.QuantSession)."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self._store().record = True
        self._store().clear()

    def _store(self) -> QuantizedStore:
        store = getattr(self._inner.cache, "approx", None)
        assert isinstance(store, QuantizedStore), "a quantised session's cache has no quantised store"
        return store

    def quant_state(self) -> QuantState:
        return quant_state(self._store(), DTYPES[self._inner.path.dtype])


@dataclass(frozen=True)
class _QuantHook:
    """Wraps every new cache of the path in the quantised store (with its planted fault, if any)."""

    options: QuantOptions
    fault: str | None = None

    def __call__(self, cache: KVCache) -> None:
        q = self.options
        quantize_cache(
            cache, bits=q.bits, group_size=q.group_size, key_axis=q.key_axis, residual=q.residual, fault=self.fault
        )


@dataclass
class QuantizedPath(ReferencePath):
    """The quantised path: its declared scheme, a readable store (gate.protocols.QuantizedKV) and the
    store's own bookkeeping faults (gate.models.kv_approx.QUANT_FAULTS) beside the reference's."""

    quant: QuantOptions = field(default_factory=QuantOptions)
    quant_fault: str | None = None

    def quant_declared(self) -> QuantScheme:
        q = self.quant
        return scheme_of(q.bits, q.group_size, q.key_axis, q.residual)

    def new_quant_session(self, batch_size: int) -> Any:
        return _QuantSession(self.new_session(batch_size))

    def faults(self) -> tuple[str, ...]:
        return (*super().faults(), *QUANT_FAULTS)

    def with_fault(self, fault: str) -> ReferencePath:
        if fault not in QUANT_FAULTS:
            return super().with_fault(fault)
        if self.quant_fault is not None:
            raise UnknownFault(f"path {self.name} already carries the quantisation fault {self.quant_fault}")
        hooks = [_QuantHook(self.quant, fault) if isinstance(h, _QuantHook) else h for h in self.cache_hooks]
        return self._with(fault, quant_fault=fault, cache_hooks=hooks)


def _approx_path(
    cls: type[ReferencePath], model: Transformer, options: Options, hook: Any, session: Any, **fields: Any
) -> ReferencePath:
    """A `cls` path over a dynamic-layout cache that `hook` wraps, its sessions wrapped in `session`."""
    return cls(
        model=model,
        block_size=options.block_size,
        layout="dynamic",
        cache_hooks=[hook],
        session_hooks=[session],
        **fields,
    )


def build_quantized(model: Transformer, options: Options, **run: Unpack[Run]) -> ReferencePath:
    q = options.quant or QuantOptions()
    name = f"reference:quantized[int{q.bits},g{q.group_size},{q.key_axis}" + (f",r{q.residual}]" if q.residual else "]")
    return _approx_path(QuantizedPath, model, options, _QuantHook(q), _ApproxSession, name=name, quant=q, **run)


class _EvictSession(_ApproxSession):
    """A session of the evicting cache that says what it promises and what it kept (EvictionReport)."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self._store: EvictingStore = inner.cache.approx

    def eviction_policy(self) -> EvictionPolicy:
        s = self._store
        return EvictionPolicy(
            press="sink-window" if s.score == "position" else s.score,
            score=s.score,
            sink=s.sink,
            window=s.window,
            keeps_last=True,
            budget=s.capacity,
            scope="every-write",
        )

    def watch_evictions(self) -> list[EvictionStep]:
        if self._store.log is None:
            self._store.log = []
        return self._store.log


@dataclass(frozen=True)
class _EvictHook:
    """Wraps every new cache of the path in the evicting store (with its planted fault, if any)."""

    options: EvictOptions

    def __call__(self, cache: KVCache) -> None:
        e = self.options
        evict_cache(
            cache,
            window=e.window,
            sink=e.sink,
            refuse_up_to=e.refuse_prompts_up_to,
            budget=e.budget,
            score=e.score,
            fault=e.fault,
        )


@dataclass
class EvictingPath(ReferencePath):
    """The evicting path: its own faults (EVICT_FAULTS) plant a bug in the press's choice of what to keep."""

    evict: EvictOptions | None = None

    def faults(self) -> tuple[str, ...]:
        return (*super().faults(), *EVICT_FAULTS)

    def with_fault(self, fault: str) -> ReferencePath:
        if fault not in EVICT_FAULTS or self.evict is None:
            return super().with_fault(fault)
        evict = self.evict.model_copy(update={"fault": fault})
        hooks = [_EvictHook(evict) if isinstance(h, _EvictHook) else h for h in self.cache_hooks]
        return self._with(fault, evict=evict, cache_hooks=hooks)


def build_evicting(model: Transformer, options: Options, **run: Unpack[Run]) -> ReferencePath:
    e = options.evict
    if e is None:
        raise ValueError("path 'evicting' needs `evict: {window: N}`")
    kept = f"sink{e.sink}+window{e.window}" + (f",{e.score}{e.budget}" if e.budget else "")
    name = f"reference:evicting[{kept},chunk{e.chunk_size}]" + (f"+{e.fault}" if e.fault else "")
    fields = {"name": name, "chunk_size": e.chunk_size, "fault": e.fault, "evict": e}
    return _approx_path(EvictingPath, model, options, _EvictHook(e), _EvictSession, **fields, **run)
