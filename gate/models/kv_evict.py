"""Evicting K/V storage for gate.models.kv_approx.evict_cache: sinks, a window and a scored budget per
layer and KV head, each eviction logged for evict-invariants (gate.protocols.EvictionStep)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from gate.protocols import EvictionStep


@dataclass
class EvictingStore:
    """Kept K/V per layer ([B, H_kv, kept, D]) and the position each carries: the first `sink` tokens,
    the last `window` and, up to `budget`, the highest `score` (`position`: none; `knorm`: minus the
    key's L2 norm); `fault` plants one of EVICT_FAULTS."""

    window: int
    sink: int
    n_layers: int
    budget: int | None = None
    score: str = "position"
    fault: str | None = None
    k: list[torch.Tensor | None] = field(default_factory=list)
    v: list[torch.Tensor | None] = field(default_factory=list)
    pos: list[torch.Tensor | None] = field(default_factory=list)
    seen: int = 0
    """Tokens written to layer 0 since the last reset."""
    log: list[Any] | None = None
    """Where each eviction is recorded (gate.protocols.EvictionStep) once someone watches."""

    def __post_init__(self) -> None:
        self.clear()

    @property
    def capacity(self) -> int:
        return self.budget if self.budget is not None else self.sink + self.window

    def clear(self) -> None:
        self.k = [None] * self.n_layers
        self.v = [None] * self.n_layers
        self.pos = [None] * self.n_layers
        self.seen = 0

    def press_score(self, keys: torch.Tensor) -> torch.Tensor:
        """The press's own score of each key [B, H, N] (higher is kept first)."""
        if self.score == "knorm":
            s: torch.Tensor = -torch.linalg.vector_norm(keys.float(), dim=-1)
        else:
            s = torch.zeros(keys.shape[:3], dtype=torch.float32, device=keys.device)
        return -s if self.fault == "evict-rank-sign" else s

    def _select(self, k: torch.Tensor, pos: torch.Tensor, seen: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(kept pool indices [B, H, K], the press's scores [B, H, N])."""
        scores = self.press_score(k)
        n = k.shape[2]
        if n <= self.capacity:
            return torch.arange(n, device=k.device).expand(*k.shape[:2], n), scores
        protected = (pos < self.sink) | (pos >= seen - self.window) | (pos == seen - 1)
        rank = torch.where(protected, torch.inf, scores)
        victim = {"evict-drop-sink": 0, "evict-window-off-by-one": seen - self.window}.get(self.fault or "")
        if victim is not None:  # the press stops protecting it and ranks it last
            rank = torch.where(pos == victim, -torch.inf, rank)
        extra = int(self.fault == "evict-budget-off-by-one")
        return rank.topk(min(self.capacity + extra, n), dim=-1).indices, scores

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        old_k, old_v, old_pos = self.k[layer], self.v[layer], self.pos[layer]
        b, h, t, _ = k.shape
        seen = self.seen + t if layer == 0 else self.seen  # layer 0 is written first in every forward
        new_pos = torch.arange(seen - t, seen, device=k.device).expand(b, h, t)
        k_all = k if old_k is None else torch.cat([old_k, k], dim=2)
        v_all = v if old_v is None else torch.cat([old_v, v], dim=2)
        pos_all = new_pos if old_pos is None else torch.cat([old_pos, new_pos], dim=2)
        self._keep(layer, k_all, v_all, pos_all, seen)
        if layer == 0:
            self.seen = seen
        return k_all, v_all  # this call's queries still see their own chunk

    def _keep(self, layer: int, k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor, seen: int) -> None:
        keep, scores = self._select(k, pos, seen)
        keep = keep.sort(dim=-1).values
        idx = keep.unsqueeze(-1).expand(-1, -1, -1, k.shape[-1])
        self.k[layer], self.v[layer] = k.gather(2, idx), v.gather(2, idx)
        kept_pos = pos.gather(2, keep)
        if self.fault == "evict-positions-renumbered" and keep.shape[2] < pos.shape[2]:
            kept_pos = torch.arange(keep.shape[2], device=k.device).expand_as(kept_pos).clone()
        self.pos[layer] = kept_pos
        if self.log is not None:
            self.log.append(EvictionStep(layer, seen, pos.clone(), keep, kept_pos.clone(), scores, k.float().clone()))

    def kept(self) -> int:
        k0 = self.k[0]
        return 0 if k0 is None else int(k0.shape[2])

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.k, *self.v) if t is not None)
