"""GQA-LM: a small decoder with grouped-query attention, rotary positions applied when K is read,
and a preallocated (static) KV cache whose unused tail holds NaN.

Written independently of gate (no import from it): the shape of model code a third party brings.
The cache stores keys unrotated; every read rotates the valid prefix by its slot index and the
queries by the session's position counter, so the counter and the slots must agree. `bug` plants
one of the mistakes gate_plugin_gqa.bugs lists in this code (for the tests): none by default.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


@dataclass
class Config:
    vocab_size: int = 128
    d_model: int = 64
    n_heads: int = 4
    n_kv_heads: int = 2
    n_layers: int = 2
    max_len: int = 8256
    rope_base: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


def rotate(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """Rotary embedding of x [B, H, T, D] at integer positions [T] (half-split layout), computed in float32."""
    d = x.shape[-1]
    inv = 1.0 / (base ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
    angles = positions.to(torch.float32)[:, None] * inv[None, :]  # [T, D/2]
    cos, sin = angles.cos(), angles.sin()
    x1, x2 = x[..., : d // 2].float(), x[..., d // 2 :].float()
    out = torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
    return out.to(x.dtype)


class RMSNorm(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * self.weight


class Attention(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.c = c
        self.q = nn.Linear(c.d_model, c.n_heads * c.head_dim, bias=False)
        self.kv = nn.Linear(c.d_model, 2 * c.n_kv_heads * c.head_dim, bias=False)
        self.o = nn.Linear(c.n_heads * c.head_dim, c.d_model, bias=False)
        self.core = Core(c)

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, t, _ = x.shape
        c = self.c
        q = self.q(x).view(b, t, c.n_heads, c.head_dim).transpose(1, 2)
        k, v = self.kv(x).view(b, t, 2, c.n_kv_heads, c.head_dim).permute(2, 0, 3, 1, 4)
        return q, k, v  # [B, H, T, D], [B, Hkv, T, D] x 2 (k unrotated)

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_pos: torch.Tensor, mask: torch.Tensor, bug: str
    ) -> torch.Tensor:
        """q [B, H, T, D] at positions q_pos; k, v [B, Hkv, S, D] unrotated, key j at position j."""
        c = self.c
        group = c.n_heads // c.n_kv_heads
        q = rotate(q, q_pos, c.rope_base)
        k = rotate(k, torch.arange(k.shape[2], device=k.device), c.rope_base)
        y = self.core(q, k, v, mask, group if bug != "kv-head-map" else -group)
        b, _, t, _ = y.shape
        return self.o(y.transpose(1, 2).reshape(b, t, -1))


class Core(nn.Module):
    """Grouped-query attention over rotated q [B, H, T, D] and rotated k, v [B, Hkv, S, D] ->
    per-head output [B, H, T, D]. A module of its own (no weights), so a tracer can watch what
    attention was given and returned per head. `group` query heads share a KV head (h // group);
    a negative group is the planted kv-head-map bug (h % n_kv)."""

    def __init__(self, c: Config) -> None:
        super().__init__()

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, group: int
    ) -> torch.Tensor:
        if group < 0:
            k, v = k.repeat(1, -group, 1, 1), v.repeat(1, -group, 1, 1)
        else:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = (q.float() @ k.float().transpose(-1, -2)) / q.shape[-1] ** 0.5  # head_dim, also for a probe's own q
        weights = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        return (weights @ v.float()).to(q.dtype)


class Block(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.n1, self.n2 = RMSNorm(c.d_model), RMSNorm(c.d_model)
        self.attn = Attention(c)
        self.up = nn.Linear(c.d_model, 2 * 3 * c.d_model, bias=False)
        self.down = nn.Linear(3 * c.d_model, c.d_model, bias=False)

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


class GQALM(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.config = c
        self.embed = nn.Embedding(c.vocab_size, c.d_model)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.n_layers))
        self.norm = RMSNorm(c.d_model)
        self.head = nn.Linear(c.d_model, c.vocab_size, bias=False)

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """The whole sequence at positions 0..T-1, no cache -> logits [B, T, V]."""
        t = tokens.shape[1]
        positions = torch.arange(t, device=tokens.device)
        mask = torch.ones(t, t, dtype=torch.bool, device=tokens.device).tril()
        x = self.embed(tokens)
        for block in self.blocks:
            q, k, v = block.attn.project(block.n1(x))
            x = x + block.attn.attend(q, k, v, positions, mask, "none")
            x = x + block.mlp(block.n2(x))
        return self.head(self.norm(x))


WINDOW = 16
"""Keys a query sees under the planted sliding-window bug (itself included)."""


def step_mask(start: int, t: int, bug: str, device: torch.device) -> tuple[int, torch.Tensor, str]:
    """For a step of `t` tokens over `start` cached: how many slots it reads, its mask [t, read] and
    the bug its attention call runs with (the decode kernel's own head map)."""
    end = start + t
    read = end + 1 if bug == "read-past-end" else end
    keys = torch.arange(read, device=device)
    if bug == "chunk-mask-origin" and start > 0 and t > 1:
        mask = keys[None, :] <= torch.arange(t, device=device)[:, None]  # origin at the chunk
    else:
        mask = keys[None, :] <= torch.arange(start, end, device=device)[:, None]
    if bug == "sliding-window":
        mask = mask & (keys[None, :] > torch.arange(start, end, device=device)[:, None] - WINDOW)
    return read, mask, "kv-head-map" if bug == "kv-head-map-decode" and start > 0 and t == 1 else bug


@torch.no_grad()
def probe(
    model: GQALM, chunks: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], bug: str, prefill_chunk: int = 0
) -> list[torch.Tensor]:
    """One request's chunks (q [B, H, n, D], k and v [B, Hkv, n, D], no position encoding) through the
    session's cache, masks and attention core (StaticSession's, chunking included) from position 0:
    the attention output per chunk. A fresh NaN-filled cache is the request's reset."""
    q0, k0, _ = chunks[0]
    total = sum(q.shape[2] for q, _, _ in chunks)
    cache = torch.full((2, k0.shape[0], k0.shape[1], total + 1, k0.shape[3]), float("nan"), dtype=k0.dtype)
    group = q0.shape[1] // k0.shape[1]
    core, length, answers = model.blocks[0].attn.core, 0, []
    for q, k, v in chunks:
        size = prefill_chunk or q.shape[2]
        pieces = []
        for i in range(0, q.shape[2], size):
            t = min(size, q.shape[2] - i)
            cache[0, :, :, length : length + t], cache[1, :, :, length : length + t] = (
                k[:, :, i : i + t],
                v[:, :, i : i + t],
            )
            read, mask, step_bug = step_mask(length, t, bug, q.device)
            pieces.append(
                core(
                    q[:, :, i : i + t],
                    cache[0, :, :, :read],
                    cache[1, :, :, :read],
                    mask,
                    -group if step_bug == "kv-head-map" else group,
                )
            )
            length += t
        answers.append(torch.cat(pieces, dim=2))
    return answers


class StaticSession:
    """A preallocated K/V buffer per layer, [B, Hkv, max_len, D], unused slots NaN."""

    def __init__(self, model: GQALM, batch: int, bug: str = "none", prefill_chunk: int = 0) -> None:
        c = model.config
        self.model, self.bug, self.prefill_chunk = model, bug, prefill_chunk
        """prefill_chunk: calls longer than this run as consecutive chunks of at most this many
        tokens (chunked prefill, as serving engines schedule it); 0: each call in one piece."""
        param = next(model.parameters())
        shape = (c.n_layers, 2, batch, c.n_kv_heads, c.max_len, c.head_dim)
        self.buffer = torch.full(shape, float("nan"), dtype=param.dtype, device=param.device)
        self.length = 0
        """Valid slots."""
        self.position = 0
        """The position of the next token (equal to `length` in correct code)."""
        self.steps = 0

    @torch.no_grad()
    def prefill(self, tokens: torch.Tensor) -> torch.Tensor:
        size = self.prefill_chunk or tokens.shape[1]
        pieces = [self._step(tokens[:, i : i + size]) for i in range(0, tokens.shape[1], size)]
        return torch.cat(pieces, dim=1)

    def _step(self, tokens: torch.Tensor) -> torch.Tensor:
        c = self.model.config
        t = tokens.shape[1]
        start, end = self.length, self.length + t
        if end > c.max_len:
            raise ValueError(f"static cache holds {c.max_len} tokens; {end} requested")
        q_pos = torch.arange(self.position, self.position + t, device=tokens.device)
        read, mask, bug = step_mask(start, t, self.bug, tokens.device)
        x = self.model.embed(tokens)
        for i, block in enumerate(self.model.blocks):
            q, k, v = block.attn.project(block.n1(x))
            self.buffer[i, 0, :, :, start:end] = k
            self.buffer[i, 1, :, :, start:end] = v
            ks, vs = self.buffer[i, 0, :, :, :read], self.buffer[i, 1, :, :, :read]
            x = x + block.attn.attend(q, ks, vs, q_pos, mask, bug)
            x = x + block.mlp(block.n2(x))
        self.length, self.position = end, self.position + t
        self.steps += 1
        return self.model.head(self.model.norm(x)).float()

    def append(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.prefill(tokens)

    def reset(self) -> None:
        self.buffer.fill_(float("nan"))
        self.length = 0
        self.position = 1 if self.bug == "reset-position" else 0

    def exercise(self) -> dict[str, int]:
        c = self.model.config
        used = self.length * c.n_layers * 2 * self.buffer.shape[2] * c.n_kv_heads * c.head_dim
        return {
            "cache_len": self.length,
            "cached_steps": max(0, self.steps - 1),
            "cache_bytes": used * self.buffer.element_size(),
            "capacity": c.max_len,
        }


class RecomputeSession:
    """No cache: every call runs the whole sequence so far."""

    def __init__(self, model: GQALM) -> None:
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
