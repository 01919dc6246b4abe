"""The reference decoder's KV cache: per-layer K/V buffers plus explicit position state.

`pos` is the absolute position of the next token and the number of valid entries. Layouts:
"static" preallocates `max_len` slots (gpt-fast); "dynamic" grows in blocks of `block_size`
slots. Slots at and past `pos` are allocated but invalid; a correct read never touches them.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal, TypedDict, Unpack

import torch

if TYPE_CHECKING:
    from gate.models.config import ModelConfig

Layout = Literal["dynamic", "static"]


class CacheLayout(TypedDict, total=False):
    """`KVCache.empty`'s layout keywords, which `for_model` passes on."""

    layout: Layout
    block_size: int
    dtype: torch.dtype
    device: str | torch.device


class KVCache:
    """Per-layer K/V buffers [B, H_kv, capacity, D] and the position state `pos`."""

    def __init__(
        self,
        k: list[torch.Tensor],
        v: list[torch.Tensor],
        pos: int,
        *,
        max_len: int,
        layout: Layout,
        block_size: int = 16,
    ) -> None:
        self.k, self.v, self.pos = k, v, pos
        self.max_len, self.layout, self.block_size = max_len, layout, block_size
        self.origin: torch.Tensor | None = None
        """Left-padded batches: [B] slot of each row's first real token (None: every row starts at 0)."""

    @classmethod
    def empty(
        cls,
        n_layers: int,
        batch: int,
        n_kv_heads: int,
        head_dim: int,
        *,
        max_len: int,
        layout: Layout = "static",
        block_size: int = 16,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
    ) -> KVCache:
        slots = max_len if layout == "static" else 0
        shape = (batch, n_kv_heads, slots, head_dim)
        k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        return cls(k, v, 0, max_len=max_len, layout=layout, block_size=block_size)

    @classmethod
    def for_model(cls, config: ModelConfig, batch: int, **where: Unpack[CacheLayout]) -> KVCache:
        """`empty` in `config`'s shape (layers, KV heads, head_dim, max_len)."""
        return cls.empty(config.n_layers, batch, config.n_kv_heads, config.head_dim, max_len=config.max_len, **where)

    @property
    def capacity(self) -> int:
        return self.k[0].shape[2]

    def _grow(self, layer: int, end: int) -> None:
        # dynamic layout: reallocate to the next block boundary; the tail is allocated, not valid
        if end > self.max_len:
            raise ValueError(f"cache overflow: position {end - 1} >= max_len {self.max_len}")
        if end <= self.k[layer].shape[2]:
            return
        slots = self.block_size * math.ceil(end / self.block_size)
        for bufs in (self.k, self.v):
            old = bufs[layer]
            new = old.new_zeros((*old.shape[:2], slots, old.shape[3]))
            new[:, :, : old.shape[2]] = old
            bufs[layer] = new

    def update(self, layer: int, start_pos: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v [B, H_kv, n, D] at positions start_pos.. and return what attention reads:
        the valid keys and values [B, H_kv, start_pos + n, D]."""
        end = start_pos + k.shape[2]
        self._grow(layer, end)
        if end > self.capacity:
            raise ValueError(f"cache overflow: position {end - 1} >= capacity {self.capacity}")
        self.k[layer][:, :, start_pos:end] = k
        self.v[layer][:, :, start_pos:end] = v
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]

    def kv(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Valid keys and values of one layer: [B, H_kv, pos, D] views."""
        return self.k[layer][:, :, : self.pos], self.v[layer][:, :, : self.pos]

    def padding(self, k_len: int) -> torch.Tensor | None:
        """Pad slots among the first `k_len` a read covers: [B, k_len] bool, None without padding."""
        if self.origin is None:
            return None
        slots = torch.arange(k_len, device=self.k[0].device)
        return slots[None, :] < self.origin.to(slots.device)[:, None]

    def crop(self, n: int) -> None:
        """Forget every position >= n (speculative rollback, prefix restore)."""
        self.pos = min(self.pos, n)

    def reset(self) -> None:
        """Forget the request: stored K/V and the position state."""
        for bufs in (self.k, self.v):
            for t in bufs:
                t.zero_()
        self.pos = 0
        self.origin = None

    def fill_unused(self, value: float) -> None:
        """Write `value` into the allocated-but-invalid tail (a correct read never sees it)."""
        for bufs in (self.k, self.v):
            for t in bufs:
                t[:, :, self.pos :] = value

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for bufs in (self.k, self.v) for t in bufs)


class SlotCache(KVCache):
    """Continuous batching: K/V of up to `slots` requests [slots, H_kv, capacity, D] per layer, each
    slot with its own length, growing in blocks of `block_size` positions.

    `bind(slots, fed)` names one forward's slots in row order and the real tokens each row brings
    (right-padded to the longest); `update` writes them at each slot's length and returns a left-padded
    batch, each row's history right-aligned (`padding` masks the pads); `advance()` moves the lengths
    on. A slot a request leaves keeps its stale K/V; `claim(slot)` empties it for the next request.
    """

    def __init__(
        self,
        n_layers: int,
        slots: int,
        n_kv_heads: int,
        head_dim: int,
        *,
        max_len: int,
        block_size: int = 16,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
    ) -> None:
        shape = (slots, n_kv_heads, 0, head_dim)
        k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        super().__init__(k, v, 0, max_len=max_len, layout="dynamic", block_size=block_size)
        self.lengths = [0] * slots
        """Valid positions per slot."""
        self.rows: list[int] = []
        """Slots the current forward feeds, in row order."""
        self.fed: list[int] = []
        """Real tokens each row of the current forward brings."""

    def claim(self, slot: int) -> None:
        """A new request takes `slot`: its length starts at 0 (the previous occupant's K/V are dead)."""
        self.lengths[slot] = 0

    def bind(self, slots: list[int], fed: list[int]) -> None:
        """The rows of the next forward: their slots and real tokens per row."""
        self.rows, self.fed = list(slots), list(fed)

    @property
    def starts(self) -> list[int]:
        """Each bound row's length before this forward (its first new token's position)."""
        return [self.lengths[s] for s in self.rows]

    def advance(self) -> None:
        """After a forward: every bound slot holds its new tokens too."""
        for slot, n in zip(self.rows, self.fed, strict=True):
            self.lengths[slot] += n
        self.pos = max(self.lengths)

    def update(self, layer: int, start_pos: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v [R, H_kv, n, D] (row r's real tokens are its first `fed[r]`) -> what attention reads,
        [R, H_kv, width + n, D], width the longest history among the rows (`start_pos` unused)."""
        starts = self.starts
        end = max(s + n for s, n in zip(starts, self.fed, strict=True))
        self._grow(layer, end)
        width, n = max(starts), k.shape[2]
        read_k = k.new_zeros((k.shape[0], k.shape[1], width + n, k.shape[3]))
        read_v = torch.zeros_like(read_k)
        for row, (slot, start, m) in enumerate(zip(self.rows, starts, self.fed, strict=True)):
            self.k[layer][slot, :, start : start + m] = k[row, :, :m]
            self.v[layer][slot, :, start : start + m] = v[row, :, :m]
            read_k[row, :, width - start : width] = self.k[layer][slot, :, :start]
            read_v[row, :, width - start : width] = self.v[layer][slot, :, :start]
        read_k[:, :, width:] = k
        read_v[:, :, width:] = v
        return read_k, read_v

    def padding(self, k_len: int) -> torch.Tensor | None:
        """[R, k_len] True on the columns before each row's history (the read's left pads)."""
        width = max(self.starts)
        slots = torch.arange(k_len, device=self.k[0].device)
        first = torch.tensor([width - s for s in self.starts], device=slots.device)
        return slots[None, :] < first[:, None]

    def reset(self) -> None:
        super().reset()
        self.lengths = [0] * len(self.lengths)
