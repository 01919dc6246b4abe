"""Continuous batching on the hf `dynamic` path (gate.protocols.ContinuousSession): each step is ONE
forward of the model over every request it feeds.

Each slot keeps its request's K/V as the model wrote them. A step lays the fed requests' K/V into one
DynamicCache as a left-padded batch, sends this step's tokens right-padded to the longest, a 2D
`attention_mask` (0 on the pads) and `position_ids` counted from each request's own length; each
row's new K/V go back to its slot (docs/hf-adapter.md, "Paths").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from gate.adapters.hf import compat
from gate.adapters.hf.view import SessionPath
from gate.adapters.slots import SlotTable


class ContinuousHFSession:
    """One running batch through the model's forward; slots hold per-layer K/V [H_kv, T, D]."""

    def __init__(self, path: SessionPath, slots: int) -> None:
        self.path, self.model, self.device = path, path.model, path.device
        self.tamper = path.tamper
        self.table = SlotTable(slots)
        self.kv: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in range(slots)]
        """Per slot, per layer: the K/V its request's tokens wrote (empty: nothing yet)."""
        self.lengths = [0] * slots

    def clear_slot(self, slot: int) -> None:
        """A new request takes `slot`: the previous occupant's K/V are dropped."""
        self.kv[slot], self.lengths[slot] = [], 0

    def join(self) -> int:
        handle, slot = self.table.join()
        self.tamper.join_slot(self, slot)
        return handle

    def leave(self, request: int) -> None:
        self.table.leave(request)

    def step(self, feeds: Mapping[int, torch.Tensor]) -> dict[int, torch.Tensor]:
        fed = [int(t.shape[0]) for t in feeds.values()]
        slots = self.table.plan(dict(zip(feeds, fed, strict=True)))
        starts = [self.lengths[s] for s in slots]
        rows, width, n = len(slots), max(starts), max(fed)
        tokens = torch.full((rows, n), self.path.pad_token_id, dtype=torch.long, device=self.device)
        mask = torch.zeros(rows, width + n, dtype=torch.long, device=self.device)
        for row, (t, start, m) in enumerate(zip(feeds.values(), starts, fed, strict=True)):
            tokens[row, :m] = t.to(self.device)
            mask[row, width - start : width + m] = 1
        offsets = torch.arange(n, device=self.device)
        positions = torch.tensor(starts, device=self.device)[:, None] + offsets
        # the pad columns after a shorter feed are masked and their outputs dropped: position 0 keeps
        # them inside the model's range; a real token keeps its own position, in range or not
        positions = positions.masked_fill(offsets[None, :] >= torch.tensor(fed, device=self.device)[:, None], 0)
        phase = "append" if width else "prefill"
        positions = self.tamper.batch_positions(phase, positions, (width + offsets).expand(rows, n))
        cache = compat.full_dynamic_cache()
        if width:
            for layer in range(len(self.kv[slots[starts.index(width)]])):
                k, v = self._gather(slots, starts, width, layer)
                cache.update(k, v, layer)
        with torch.no_grad():
            logits = compat.forward(
                self.model,
                tokens,
                cache,
                positions,
                cache_position=compat.batch_cache_position(self.model, width, n, self.device),
                attention_mask=self.tamper.padding_mask(phase, mask),
            ).logits.float()
        for layer in range(len(cache.layers)):
            k_all, v_all = compat.layer_kv(cache, layer)
            for row, (slot, start, m) in enumerate(zip(slots, starts, fed, strict=True)):
                keep = (k_all[row, :, width - start : width + m], v_all[row, :, width - start : width + m])
                if layer < len(self.kv[slot]):
                    self.kv[slot][layer] = (keep[0].clone(), keep[1].clone())
                else:
                    self.kv[slot].append((keep[0].clone(), keep[1].clone()))
        for slot, m in zip(slots, fed, strict=True):
            self.lengths[slot] += m
        return {h: logits[row, :m] for row, (h, m) in enumerate(zip(feeds, fed, strict=True))}

    def _gather(self, slots: list[int], starts: list[int], width: int, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One layer's K/V of the fed requests as a left-padded batch [R, H_kv, width, D]."""
        k0, _ = next(self.kv[s][layer] for s, start in zip(slots, starts, strict=True) if start == width)
        k = k0.new_zeros((len(slots), k0.shape[0], width, k0.shape[2]))
        v = torch.zeros_like(k)
        for row, (slot, start) in enumerate(zip(slots, starts, strict=True)):
            if start:
                k[row, :, width - start :] = self.kv[slot][layer][0][:, :start]
                v[row, :, width - start :] = self.kv[slot][layer][1][:, :start]
        return k, v

    def exercise(self) -> dict[str, Any]:
        return {
            **self.table.exercise(),
            "cache_len": max(self.lengths),
            "cache_bytes": sum(k.numel() * k.element_size() * 2 for slot in self.kv for k, _ in slot),
            "cache_class": "DynamicCache",
            "transformers": compat.cache_api(self.model).version,
        }
