"""Protocol-level faults: negative controls every adapter that offers sessions gets for free.

The faults here wrap a `DecodePath` and its `Session`s (or its store or sampler) from the outside,
so power does not depend on faults only gate's own adapters can plant. Each stands in for the
catalogue faults it imitates (`stands_for`) and proves only the checks that observe the candidate
through what it wraps (`proves`). A session fault applies only to a path that keeps a cache
(`uses_cache`). The wrappers are gate.engine.generic_sessions and generic_stores. This module
imports no torch at import time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gate.engine import generic_stores as stores
from gate.engine.generic_sessions import (
    BlockTruncated,
    CacheDropped,
    GenericCarrier,
    HandleSwap,
    ResetIgnored,
    RowsCrossed,
    TokenSkipped,
    WeightsChanged,
    needs_crop,
    needs_reload,
)

if TYPE_CHECKING:
    import torch

    from gate.protocols import DecodePath, Session

SESSION_CHECKS = ("prefix-sweep", "greedy-parity", "schedule-fuzz")
"""Built-in checks that compare the candidate's session outputs with the reference's (schedule-fuzz:
every step of a random schedule of sessions against a full pass)."""


@dataclass(frozen=True)
class GenericFault:
    """A fault applied from outside the adapter, through the Session protocol."""

    name: str
    stands_for: tuple[str, ...]
    """Catalogue fault names (gate.models.faults) a policy may name, that this one imitates."""
    proves: tuple[str, ...]
    """Checks this fault can show power for."""
    summary: str
    session: Callable[[DecodePath, int], Any] | None
    """Builds the faulty session: (clean path, batch size) -> Session (None: `wrap` builds the path)."""
    needs: Callable[[DecodePath], str | None] = lambda _path: None
    """None when the path offers what the fault needs, else the reason it cannot apply."""
    wrap: Callable[[DecodePath], DecodePath] | None = None
    """Builds the faulty candidate from the clean path when the fault wraps a store or a sampler
    rather than sessions (gate.engine.generic_stores); such a fault needs no cache of sessions."""


GENERIC_FAULTS: tuple[GenericFault, ...] = (
    GenericFault(
        "handle-swap",
        ("cross-request-handle",),
        (*SESSION_CHECKS, "batch-invariance"),
        "appends run against another request's session (the next row's prompt; the reversed prompt when B = 1)",
        HandleSwap,
    ),
    GenericFault(
        "rows-crossed",
        ("cross-request-handle",),
        ("batch-invariance",),
        "in a session of several requests, each request is answered with the next request's logits "
        "(tried when handle-swap could not show: a model whose greedy tokens barely depend on the context)",
        RowsCrossed,
    ),
    GenericFault(
        "reset-ignored",
        ("reset-keeps-position",),
        ("reset-isolation", "schedule-fuzz"),
        "reset() does nothing: the next request is appended to the previous request's cache",
        ResetIgnored,
    ),
    GenericFault(
        "cache-dropped",
        ("missing-start-pos",),
        SESSION_CHECKS,
        "every append runs against an empty session: the cached prefix is dropped",
        CacheDropped,
    ),
    GenericFault(
        "token-skipped",
        ("off-by-one-pos",),
        SESSION_CHECKS,
        "the first token of every multi-token prefill or append is skipped: later positions are off by one",
        TokenSkipped,
    ),
    GenericFault(
        "weights-changed",
        ("stale-weights",),
        SESSION_CHECKS,
        "appends run after the weights changed while the cache written by the old weights is kept",
        WeightsChanged,
        needs_reload,
    ),
    GenericFault(
        "block-truncated",
        ("truncated-last-block",),
        SESSION_CHECKS,
        "the partial last block of the cache is cropped before each append",
        BlockTruncated,
        needs_crop,
    ),
)
PREFIX_CHECKS = ("prefix-reuse-parity", "cache-identity", "tenant-isolation", "invalidation", "hash-collision")
"""The checks of the prefix-reuse policy, which judge a store (gate.protocols.PrefixServing)."""
SPEC_CHECKS = ("spec-greedy", "spec-distribution")
"""The checks of the proposal-and-verify policy, which judge a sampler (gate.protocols.SpeculativePath)."""


def _store_needs(*capabilities: str, adapters: bool = False) -> Callable[[DecodePath], str | None]:
    def needs(path: DecodePath) -> str | None:
        store = stores.as_store(path)
        if store is None:
            return f"path {path.name} is no prefix store (gate.plugin.PrefixServing)"
        missing = [c for c in capabilities if not callable(getattr(store, c, None))]
        if missing:
            return f"the store {path.name} offers no {', '.join(missing)}"
        if adapters and not store.adapters():
            return f"the store {path.name} serves no adapters"
        return None

    return needs


def _store_fault(
    name: str, stands_for: tuple[str, ...], proves: tuple[str, ...], summary: str, cls: Any, *needs: str, **more: bool
) -> GenericFault:
    def wrap(path: DecodePath) -> DecodePath:
        wrapped: DecodePath = cls(stores.as_store(path), path, name)
        return wrapped

    return GenericFault(name, stands_for, proves, summary, None, _store_needs(*needs, **more), wrap)


SIBLING_FIELDS = {
    "revision": ("model-revision", "key-ignores-revision"),
    "tokenizer": ("tokenizer", "key-ignores-tokenizer"),
    "rope": ("rope-scaling", "key-ignores-rope"),
    "window": ("attention-window", "key-ignores-window"),
    "kv-dtype": ("kv-dtype", "key-ignores-kv-dtype"),
}
"""Generic name prefix -> (the worker-level identity field, the catalogue fault a key that drops it is)."""

STORE_FAULTS: tuple[GenericFault, ...] = (
    _store_fault(
        "tenant-shared",
        ("key-ignores-tenant", "verify-ignores-identity"),
        ("cache-identity", "tenant-isolation", "hash-collision"),
        "every request is served unsalted: the tenant never reaches the store's key",
        stores.TenantShared,
    ),
    _store_fault(
        "adapter-shared",
        ("key-ignores-adapter", "verify-ignores-identity"),
        ("cache-identity", "hash-collision"),
        "a request naming an adapter is served as a base-model request: the adapter never reaches the key",
        stores.AdapterShared,
        adapters=True,
    ),
    *(
        _store_fault(
            f"{short}-shared",
            (catalogue,),
            ("cache-identity",),
            f"the sibling that differs in {field} alone is served from the base store's cache",
            type(f"SiblingShared[{field}]", (stores.SiblingShared,), {"field": field}),
            "sibling",
        )
        for short, (field, catalogue) in SIBLING_FIELDS.items()
    ),
    _store_fault(
        "parent-blind",
        ("unordered-blocks", "key-ignores-position"),
        ("prefix-reuse-parity", "cache-identity"),
        "a block seen at the same position after other tokens is served after that earlier context",
        stores.ParentBlind,
    ),
    _store_fault(
        "hash-trusted",
        ("trust-hash", "verify-ignores-identity"),
        ("hash-collision", "tenant-isolation"),
        "under a replaced (weak) hash, a block whose bucket holds another context's block is served that "
        "context's state, identity included",
        stores.HashTrusted,
        "with_hash",
    ),
    _store_fault(
        "invalidation-skipped",
        ("skip-invalidation",),
        ("invalidation",),
        "a weight or adapter update never reaches the cache: requests are served as before the update",
        stores.InvalidationSkipped,
        "update_weights",
    ),
)
"""Wrappers around a prefix store (gate.engine.generic_stores)."""


def _sampler_fault(rule: str) -> GenericFault:
    from gate.engine.generic_samplers import FaultySampler, sampler_needs

    return GenericFault(
        f"sampler:{rule}",
        (rule,),
        SPEC_CHECKS,
        f"gate's reference speculative sampler with {rule} over the candidate's own target and draft distributions",
        None,
        sampler_needs,
        lambda path: FaultySampler(path, rule),
    )


SAMPLER_FAULTS: tuple[GenericFault, ...] = tuple(
    _sampler_fault(rule)
    for rule in (
        "accept-all",
        "inverted-ratio",
        "residual-abs",
        "residual-from-target",
        "bonus-from-draft",
        "drop-bonus",
    )
)
"""Wrapper samplers, one per rule fault of gate.speculative.sampler.FAULTS (listed here so this module
imports no torch)."""


GENERIC_FAULTS += STORE_FAULTS + SAMPLER_FAULTS


class FaultedPath(GenericCarrier):
    """A clean path whose sessions come from a generic fault; everything else is the path's own, save
    the capabilities the fault cannot reach (an attention probe, per-layer traces): not offered."""

    _PASS_THROUGH = ("layout_boundaries", "block_size", "reload_weights")

    def __init__(self, inner: DecodePath, fault: GenericFault) -> None:
        self.inner, self.fault, self.carried = inner, fault, fault.name
        self.name = f"{inner.name}+generic:{fault.name}"
        self.vocab_size, self.max_len = inner.vocab_size, inner.max_len
        self.uses_cache, self.dtype = inner.uses_cache, inner.dtype

    def identity(self) -> dict[str, Any]:
        return {**self.inner.identity(), "generic_fault": self.carried}

    def __getattr__(self, attr: str) -> Any:
        if attr in FaultedPath._PASS_THROUGH:
            return getattr(self.inner, attr)
        raise AttributeError(attr)

    def full_logits(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.inner.full_logits(tokens)

    def new_session(self, batch_size: int) -> Session:
        assert self.fault.session is not None, self.fault.name
        session: Session = self.fault.session(self.inner, batch_size)
        return session


@dataclass(frozen=True)
class Planted:
    """A faulty candidate for one control, and which kind of fault made it."""

    path: DecodePath
    kind: str
    """adapter: the adapter's own with_fault; generic: a protocol-level fault from this module."""
    applied: str
    """The fault actually applied (the generic fault's name for kind generic)."""


def plant(path: DecodePath, check: str, fault: str, *, own: bool = True, after: str | None = None) -> Planted | str:
    """The candidate with `fault` planted: the adapter's own fault when it offers one (and `own`),
    else a generic fault that stands in for it and can prove power for `check`; else why neither can.
    `after`: a generic stand-in that ran and could not show; only the ones listed after it are tried."""
    if own and after is None and fault in path.faults():
        return Planted(path.with_fault(fault), "adapter", fault)
    matching = [g for g in GENERIC_FAULTS if fault == g.name or fault in g.stands_for]
    if after is not None:
        names = [g.name for g in matching]
        matching = matching[names.index(after) + 1 :] if after in names else []
        if not matching:
            return f"no other generic fault stands in for {fault!r} after {after}"
    if not matching:
        return f"path {path.name} cannot apply fault {fault!r}, and no generic fault stands in for it"
    reasons = []
    for generic in matching:
        if check not in generic.proves:
            reasons.append(f"generic {generic.name} proves only {', '.join(generic.proves)}")
            continue
        if generic.wrap is None and not path.uses_cache:
            reasons.append(f"generic {generic.name} needs a path that keeps a cache; {path.name} recomputes")
            continue
        missing = generic.needs(path)
        if missing:
            reasons.append(f"generic {generic.name}: {missing}")
            continue
        faulty = generic.wrap(path) if generic.wrap is not None else FaultedPath(path, generic)
        return Planted(faulty, "generic", generic.name)
    return f"path {path.name} cannot apply fault {fault!r}; " + "; ".join(reasons)


def stand_ins(check: str, fault: str) -> list[GenericFault]:
    """The generic faults that can stand in for `fault` under `check`, in the order a run tries them."""
    return [g for g in GENERIC_FAULTS if (fault == g.name or fault in g.stands_for) and check in g.proves]


def stand_in_table() -> str:
    """docs/faults.md's table of stand-ins: for every check and control fault the built-in policies
    name, the generic faults that stand in for it (in the order `plant` tries them) and what each needs."""
    from gate.core.policy import load_policies

    named: dict[tuple[str, str], None] = {}
    for resolved in load_policies().interventions.values():
        for claim in resolved.claims.values():
            for rule, _ in claim.checks:
                for control in rule.controls:
                    named[(rule.check, control.fault)] = None
    rows = [
        "| check | control the policy names | generic stand-in (tried in order) | what it breaks |",
        "|---|---|---|---|",
    ]
    for check, fault in sorted(named):
        generics = stand_ins(check, fault)
        if generics:
            names = ", ".join(f"`{g.name}`" for g in generics)
            rows.append(f"| {check} | {fault} | {names} | {'; '.join(g.summary for g in generics)} |")
        else:
            rows.append(f"| {check} | {fault} | none | only the adapter's own fault can show it |")
    return "\n".join(rows) + "\n"
