"""TinyLM: a small decoder-only language model with learned positions and a growing KV cache.

Written independently of gate (no import from it): the shape of model code a third party brings.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


@dataclass
class Config:
    vocab_size: int = 96
    d_model: int = 48
    n_heads: int = 4
    n_layers: int = 2
    max_len: int = 192


class Attention(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.n_heads, self.head_dim = c.n_heads, c.d_model // c.n_heads
        self.qkv = nn.Linear(c.d_model, 3 * c.d_model)
        self.out = nn.Linear(c.d_model, c.d_model)

    def forward(
        self, x: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None, roll: bool = False
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # each [B, H, T, D]
        y, kv = attention(q, k, v, past, roll)
        return self.out(y.transpose(1, 2).reshape(b, t, -1)), kv


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    past: tuple[torch.Tensor, torch.Tensor] | None,
    roll: bool = False,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """The cache and the mask: new keys and values appended to `past`, each query attending to every
    cached position and to the new ones up to its own. q [B, H, T, D], k and v [B, H, T, D]. `roll`
    (the planted head-roll bug): query head h reads head h + 1's keys and values (the cache keeps
    them right)."""
    t = q.shape[2]
    if past is not None:
        k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
    offset = k.shape[2] - t
    # query i (absolute offset + i) sees keys 0..offset + i
    mask = torch.ones(t, k.shape[2], dtype=torch.bool, device=q.device).tril(diagonal=offset)
    read_k, read_v = (k.roll(-1, dims=1), v.roll(-1, dims=1)) if roll else (k, v)
    return F.scaled_dot_product_attention(q, read_k, read_v, attn_mask=mask), (k, v)


class Block(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(c.d_model), nn.LayerNorm(c.d_model)
        self.attn = Attention(c)
        self.mlp = nn.Sequential(nn.Linear(c.d_model, 4 * c.d_model), nn.GELU(), nn.Linear(4 * c.d_model, c.d_model))

    def forward(
        self, x: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None, roll: bool = False
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        h, kv = self.attn(self.ln1(x), past, roll)
        x = x + h
        return x + self.mlp(self.ln2(x)), kv


class TinyLM(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.config = c
        self.tok = nn.Embedding(c.vocab_size, c.d_model)
        self.pos = nn.Embedding(c.max_len, c.d_model)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.n_layers))
        self.ln = nn.LayerNorm(c.d_model)
        self.head = nn.Linear(c.d_model, c.vocab_size, bias=False)

    def step(
        self,
        tokens: torch.Tensor,
        start: int,
        past: list[tuple[torch.Tensor, torch.Tensor]] | None,
        roll: bool = False,
    ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """tokens [B, T] at absolute positions start..start+T-1 -> logits [B, T, V], new cache."""
        positions = torch.arange(start, start + tokens.shape[1], device=tokens.device)
        x = self.tok(tokens) + self.pos(positions)
        cache = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, past[i] if past else None, roll)
            cache.append(kv)
        return self.head(self.ln(x)), cache

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.step(tokens, 0, None)[0]


class CachedSession:
    """Prefill and append against a per-layer K/V list; `restart_positions` and `head_roll` are the
    planted bugs."""

    def __init__(self, model: TinyLM, *, restart_positions: bool = False, head_roll: bool = False) -> None:
        self.model, self.restart_positions, self.head_roll = model, restart_positions, head_roll
        self.cache: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self.steps = 0

    def cache_length(self) -> int:
        return 0 if self.cache is None else int(self.cache[0][0].shape[2])

    @torch.no_grad()
    def prefill(self, tokens: torch.Tensor) -> torch.Tensor:
        start = self.cache_length()
        if self.restart_positions:
            start = 0  # the bug: appended tokens forget the cache offset
        logits, self.cache = self.model.step(tokens, start, self.cache, self.head_roll)
        self.steps += 1
        return logits.float()

    def append(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.prefill(tokens)

    def reset(self) -> None:
        self.cache = None

    def crop(self, length: int) -> None:
        if self.cache is not None:
            self.cache = [(k[:, :, :length], v[:, :, :length]) for k, v in self.cache]

    def exercise(self) -> dict[str, int]:
        held = sum(k.numel() * k.element_size() * 2 for k, _ in self.cache or [])
        return {"cache_len": self.cache_length(), "cached_steps": max(0, self.steps - 1), "cache_bytes": held}


class RecomputeSession:
    """No cache: every call runs the whole sequence so far."""

    def __init__(self, model: TinyLM) -> None:
        self.model = model
        self.tokens: torch.Tensor | None = None
        self.passes = 0

    @torch.no_grad()
    def prefill(self, tokens: torch.Tensor) -> torch.Tensor:
        self.tokens = tokens if self.tokens is None else torch.cat([self.tokens, tokens], dim=1)
        self.passes += 1
        return self.model(self.tokens)[:, -tokens.shape[1] :].float()

    def append(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.prefill(tokens)

    def reset(self) -> None:
        self.tokens = None

    def exercise(self) -> dict[str, int]:
        return {"cache_len": 0, "cached_steps": 0, "cache_bytes": 0, "full_passes": self.passes}
