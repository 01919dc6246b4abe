"""Planted KV-cache bugs (negative controls, release-gate step 5), applied from outside the model.

Each fault patches a *built* object (masks, positions, an attention layer, or each new cache or
session through a hook in gate.models.cache_faults); `apply_fault(target, name)` mutates a copy made
by the path's `with_fault`. torch is imported only inside the patching functions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gate.models.cache_faults import (
    FaultTarget,
    cross_request_handle,
    pad_attended,
    poisoned_tail_read,
    reset_keeps_position,
    stale_slot_on_join,
    stale_weights,
    truncated_last_block,
)

if TYPE_CHECKING:
    import torch

    from gate.models.reference import KVCache


@dataclass(frozen=True)
class Fault:
    """One planted bug: its name, where it lives and the bug class a diagnosis should name."""

    name: str
    target: str
    """model, cache or session: what the fault patches."""
    bug_class: str
    """The diagnosis it should produce (gate.checks._diagnosis bug classes)."""
    summary: str


CATALOGUE: tuple[Fault, ...] = (
    Fault(
        "mask-origin-reset",
        "model",
        "mask-offset",
        "a local triangular mask on a cached chunk: torch.tril(ones(q_len, k_len)) ignores the "
        "cache offset, so the appended token sees only position 0 (background: parity, mask oracle)",
    ),
    Fault(
        "missing-start-pos",
        "model",
        "positional-index",
        "appended tokens are encoded as if they started at position 0 (start_pos omitted)",
    ),
    Fault(
        "off-by-one-pos",
        "model",
        "positional-index",
        "appended tokens are encoded one position too far (position = cache length + 1)",
    ),
    Fault(
        "rope-after-write",
        "model",
        "per-layer-ordering",
        "the last layer writes K into the cache before RoPE and rotates only the new keys: "
        "layer 0 agrees, the last layer drifts",
    ),
    Fault(
        "reset-keeps-position",
        "cache",
        "reset-leak",
        "reset clears K and V but not the position counter: the next request starts at the "
        "previous request's offset (background: mask oracle)",
    ),
    Fault(
        "truncated-last-block",
        "cache",
        "kv-truncation",
        "the read covers only full blocks (len // block_size blocks, not ceil): the partial last "
        "block of the prefix is missing",
    ),
    Fault(
        "stale-weights",
        "session",
        "stale-state",
        "weights changed, cache kept: the prefix K/V were computed by the previous weights",
    ),
    Fault(
        "cross-request-handle",
        "cache",
        "foreign-state",
        "the cache handle points at another request's slot: each row reads the next row's prefix",
    ),
    Fault(
        "poisoned-tail-read",
        "cache",
        "read-past-valid-length",
        "attention reads the whole allocated buffer, past the valid length, with a mask offset "
        "computed from the buffer size; the unused tail holds garbage (NaN), as uninitialised memory would",
    ),
    Fault(
        "sliding-window-mask",
        "model",
        "mask-window",
        "a sliding window (max_len // 4 tokens) where full attention is declared",
    ),
    Fault(
        "padding-in-positions",
        "model",
        "padding",
        "in a left-padded batch, decode steps (one token per row) take their position from the cache "
        "slot, not from the row's mask: after a correct prefill, a row with p pad tokens decodes p "
        "positions too far (a constant shift over the whole row would be invisible to RoPE)",
    ),
    Fault(
        "pad-attended",
        "cache",
        "padding",
        "in a left-padded batch, the read carries no padding mask: every real token attends to its row's pad tokens",
    ),
    Fault(
        "stale-slot-on-join",
        "cache",
        "continuous-batching",
        "in a continuously batched session, a request that joins a slot another request has left inherits "
        "the slot's length: its prompt is written after the previous occupant's K/V and attends to them "
        "(a slot table not cleared on reuse); a slot used once is never wrong",
    ),
    Fault(
        "kv-head-map",
        "model",
        "kv-head-mapping",
        "at read time query head h reads KV head h % n_kv_heads (the KV heads tiled) instead of "
        "h // (n_heads / n_kv_heads) (each repeated in place): the cache stores every head right, "
        "attention reads the wrong one for all but the first and last query heads",
    ),
    Fault(
        "chunk-mask-origin",
        "model",
        "mask-offset",
        "a chunk of several tokens appended over a non-empty cache gets a causal mask from the chunk's "
        "own origin (row i sees keys 0..i); one-token steps and a prefill into an empty cache are right",
    ),
)
FAULTS: dict[str, Fault] = {f.name: f for f in CATALOGUE}
FAULT_NAMES: tuple[str, ...] = tuple(FAULTS)


def apply_fault(target: FaultTarget, name: str) -> None:
    """Plant fault `name` into `target` (a copy of the path; its model a copy too where the fault
    patches the model, shared otherwise). Raises KeyError for an unknown name."""
    _APPLY[name](target)


# -- model patches ---------------------------------------------------------------------------


def _origin_reset_mask(q_len: int, k_len: int, window: int | None, device: torch.device) -> torch.Tensor:
    import torch

    # torch.tril(torch.ones(q_len, k_len)): row i sees keys 0..i, whatever is cached before it
    return ~torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril()


def _mask_origin_reset(target: FaultTarget) -> None:
    for layer in target.model.blocks:
        layer.attention.core.mask_fn = _origin_reset_mask


def _chunk_mask_origin(target: FaultTarget) -> None:
    from gate.models.reference import causal_mask

    def mask(q_len: int, k_len: int, window: int | None, device: torch.device) -> torch.Tensor:
        if q_len > 1 and k_len > q_len:  # a chunk over a cache: the origin at the chunk
            return _origin_reset_mask(q_len, k_len, window, device)
        return causal_mask(q_len, k_len, window, device)

    for layer in target.model.blocks:
        layer.attention.core.mask_fn = mask


def _kv_head_map(target: FaultTarget) -> None:
    for layer in target.model.blocks:
        core = layer.attention.core
        inner = core.forward

        def forward(
            q: torch.Tensor,
            k: torch.Tensor,
            v: torch.Tensor,
            padding: torch.Tensor | None = None,
            inner: Callable[..., torch.Tensor] = inner,
        ) -> torch.Tensor:
            # the KV heads tiled (0, 1, 0, 1) where each is repeated in place (0, 0, 1, 1)
            rep = q.shape[1] // k.shape[1]
            if rep > 1:
                k, v = k.repeat(1, rep, 1, 1), v.repeat(1, rep, 1, 1)
            return inner(q, k, v, padding)

        core.forward = forward  # type: ignore[method-assign]


def _sliding_window_mask(target: FaultTarget) -> None:
    from gate.models.reference import causal_mask

    window = max(2, target.model.config.max_len // 4)

    def mask(q_len: int, k_len: int, _window: int | None, device: torch.device) -> torch.Tensor:
        return causal_mask(q_len, k_len, window, device)

    for layer in target.model.blocks:
        layer.attention.core.mask_fn = mask


def _shift_positions(target: FaultTarget, shift: Callable[[int], int]) -> None:
    import torch

    model = target.model
    device = model.inv_freq.device
    last = model.config.max_len - 1

    def positions(start_pos: int, n: int) -> torch.Tensor:
        # only tokens appended against a cache (start_pos > 0) are mis-encoded; the cache write
        # still lands at start_pos, so the stored layout looks right. Clamped like position ids
        # of engines that clamp, so learned position tables never index out of range.
        first = shift(start_pos) if start_pos > 0 else 0
        return torch.arange(first, first + n, device=device).clamp(max=last)

    model.positions = positions  # type: ignore[method-assign]


def _rope_after_write(target: FaultTarget) -> None:
    import torch

    from gate.models.reference import apply_rope

    attn = target.model.blocks[-1].attention

    def forward(
        x: torch.Tensor, rot: tuple[torch.Tensor, torch.Tensor] | None, cache: KVCache | None, start_pos: int
    ) -> torch.Tensor:
        q, k, v = attn.project(x)
        # the padding mask of a left-padded batch is passed on as the correct forward does: this
        # fault is the ordering of RoPE and the write, nothing else
        if rot is None:  # no RoPE in this model: the ordering cannot matter
            if cache is None:
                return attn.merge(attn.core(q, k, v))
            k_all, v_all = cache.update(attn.layer_id, start_pos, k, v)
            return attn.merge(attn.core(q, k_all, v_all, cache.padding(k_all.shape[2])))
        q = apply_rope(q, *rot)
        if cache is None:
            return attn.merge(attn.core(q, apply_rope(k, *rot), v))
        # write K before rotation, then rotate only this call's keys: cached keys stay unrotated
        k_all, v_all = cache.update(attn.layer_id, start_pos, k, v)
        n = k.shape[2]
        k_all = torch.cat([k_all[:, :, :-n], apply_rope(k_all[:, :, -n:], *rot)], dim=2)
        return attn.merge(attn.core(q, k_all, v_all, cache.padding(k_all.shape[2])))

    attn.forward = forward  # type: ignore[method-assign]


def _padding_in_positions(target: FaultTarget) -> None:
    model = target.model

    def row_positions(slots: torch.Tensor, origin: torch.Tensor) -> torch.Tensor:
        if slots.shape[0] > 1 or int(slots[0]) == 0:  # the prompt's passes count from each row's origin
            return (slots[None, :] - origin[:, None]).clamp(min=0)
        return slots[None, :].expand(origin.shape[0], -1)  # a decode step: the pads are counted

    model.row_positions = row_positions  # type: ignore[method-assign]


_APPLY: dict[str, Callable[[FaultTarget], None]] = {
    "mask-origin-reset": _mask_origin_reset,
    "missing-start-pos": lambda target: _shift_positions(target, lambda _start: 0),
    "off-by-one-pos": lambda target: _shift_positions(target, lambda start: start + 1),
    "rope-after-write": _rope_after_write,
    "reset-keeps-position": reset_keeps_position,
    "truncated-last-block": truncated_last_block,
    "stale-weights": stale_weights,
    "cross-request-handle": cross_request_handle,
    "poisoned-tail-read": poisoned_tail_read,
    "sliding-window-mask": _sliding_window_mask,
    "padding-in-positions": _padding_in_positions,
    "pad-attended": pad_attended,
    "stale-slot-on-join": stale_slot_on_join,
    "kv-head-map": _kv_head_map,
    "chunk-mask-origin": _chunk_mask_origin,
}
assert set(_APPLY) == set(FAULT_NAMES)
