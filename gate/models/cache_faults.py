"""The cache and session faults of gate.models.faults: each adds a hook every new `KVCache` (or
`SlotCache`) or session of the path passes through, replacing its `update`, `padding`, `reset` or
`claim`, or prefilling on stale weights. torch is imported only inside the patching functions."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

    from gate.models.reference import KVCache, Transformer


class FaultTarget(Protocol):
    """What a fault patches: a path's model and the hooks its new caches and sessions go through."""

    model: Transformer
    block_size: int
    cache_hooks: list[Callable[[KVCache], None]]
    session_hooks: list[Callable[[Any], Any]]


# -- cache patches ---------------------------------------------------------------------------

Update = Callable[[int, int, "torch.Tensor", "torch.Tensor"], "tuple[torch.Tensor, torch.Tensor]"]


def _patch_update(target: FaultTarget, wrap: Callable[[KVCache, Update], Update]) -> None:
    def hook(cache: KVCache) -> None:
        cache.update = wrap(cache, cache.update)  # type: ignore[method-assign,assignment]

    target.cache_hooks.append(hook)


def truncated_last_block(target: FaultTarget) -> None:
    import torch

    block = target.block_size

    def wrap(_cache: KVCache, inner: Update) -> Update:
        def update(layer: int, start_pos: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            k_all, v_all = inner(layer, start_pos, k, v)
            kept = (start_pos // block) * block  # floor, where ceil was meant
            return (
                torch.cat([k_all[:, :, :kept], k_all[:, :, start_pos:]], dim=2),
                torch.cat([v_all[:, :, :kept], v_all[:, :, start_pos:]], dim=2),
            )

        return update

    _patch_update(target, wrap)


def cross_request_handle(target: FaultTarget) -> None:
    import torch

    def wrap(_cache: KVCache, inner: Update) -> Update:
        def update(layer: int, start_pos: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            k_all, v_all = inner(layer, start_pos, k, v)
            # the cached prefix is read from the next request's slot (row b -> b + 1)
            return (
                torch.cat([k_all[:, :, :start_pos].roll(1, dims=0), k_all[:, :, start_pos:]], dim=2),
                torch.cat([v_all[:, :, :start_pos].roll(1, dims=0), v_all[:, :, start_pos:]], dim=2),
            )

        return update

    _patch_update(target, wrap)


def poisoned_tail_read(target: FaultTarget) -> None:
    def wrap(cache: KVCache, inner: Update) -> Update:
        def update(layer: int, start_pos: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            inner(layer, start_pos, k, v)
            # the unused tail holds garbage, as an uninitialised allocation would: NaN here
            valid = start_pos + k.shape[2]
            cache.k[layer][:, :, valid:] = float("nan")
            cache.v[layer][:, :, valid:] = float("nan")
            # the whole allocation: the mask offset (k_len - q_len) then admits the unused tail
            return cache.k[layer], cache.v[layer]

        return update

    _patch_update(target, wrap)


def pad_attended(target: FaultTarget) -> None:
    def hook(cache: KVCache) -> None:
        cache.padding = lambda _k_len: None  # type: ignore[method-assign,assignment]

    target.cache_hooks.append(hook)


def stale_slot_on_join(target: FaultTarget) -> None:
    def hook(cache: KVCache) -> None:
        # SlotCache.claim would empty the slot; here the joining request takes it as it was left
        cache.claim = lambda _slot: None  # type: ignore[attr-defined]

    target.cache_hooks.append(hook)


def reset_keeps_position(target: FaultTarget) -> None:
    def hook(cache: KVCache) -> None:
        def reset() -> None:
            for bufs in (cache.k, cache.v):
                for t in bufs:
                    t.zero_()
            # cache.pos is left where the previous request ended

        cache.reset = reset  # type: ignore[method-assign]

    target.cache_hooks.append(hook)


# -- session patches -------------------------------------------------------------------------


def stale_model(model: Transformer) -> Transformer:
    """The 'previous weights': a copy with every matrix perturbed by half of its scale (a
    revision far enough from the current one that its K/V change the argmax in bfloat16 too)."""
    import torch

    old = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(12345)
    with torch.no_grad():
        for p in old.parameters():
            if p.ndim == 2:
                noise = torch.randn(p.shape, generator=gen).to(device=p.device, dtype=p.dtype)
                p.add_(0.5 * p.float().std().to(p.dtype) * noise)
    return old


class _StalePrefill:
    """A session whose prefill runs on the previous weights: the prompt's K/V are stale."""

    def __init__(self, inner: Any, stale: Transformer) -> None:
        self._inner, self._stale = inner, stale

    def prefill(self, tokens: torch.Tensor) -> torch.Tensor:
        current = self._inner.model
        self._inner.model = self._stale
        try:
            out: torch.Tensor = self._inner.prefill(tokens)
        finally:
            self._inner.model = current
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def stale_weights(target: FaultTarget) -> None:
    stale = stale_model(target.model)
    target.session_hooks.append(lambda session: _StalePrefill(session, stale))
