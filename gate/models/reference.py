"""A small decoder-only transformer in the gpt-fast style, with an explicit KV cache.

Faults and interventions are applied to a *built* model, cache or session from outside
(gate/models/faults.py). Architecture: token embedding (+ optional learned absolute positions),
RMSNorm, grouped-query attention with RoPE and an explicit-offset causal mask (optional sliding
window), SwiGLU MLP, untied output head; weights are seeded random normals.

    model = build_model(ModelConfig.from_preset("tiny", n_layers=3), seed=0, device="cpu", dtype=torch.float32)
    logits = model(tokens)                                    # full causal pass: [B, T] -> [B, T, V]
    logits = prefill(model, prompt, cache, chunk_size=64)     # cache = KVCache.for_model(...)
    logits = model.step(tokens, cache, start_pos=cache.pos)   # append n tokens: [B, n] -> [B, n, V]
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from gate.models.config import PRESETS, ModelConfig
from gate.models.kv_cache import KVCache, Layout, SlotCache

__all__ = [
    "PRESETS",
    "KVCache",
    "Layout",
    "ModelConfig",
    "SlotCache",
    "Transformer",
    "build_model",
    "causal_mask",
    "prefill",
]

MaskFn = Callable[[int, int, "int | None", torch.device], torch.Tensor]

GQA_IN_PLACE = torch.__version__ >= "2.5"
"""scaled_dot_product_attention takes grouped KV heads (`enable_gqa`) from torch 2.5 on."""


QUERY_BLOCK = 512
"""Queries per attention block: bounds the score matrix to [B, H, 512, T_k]."""


def causal_mask(q_len: int, k_len: int, window: int | None, device: torch.device) -> torch.Tensor:
    """Blocked entries (True) of a [q_len, k_len] score matrix whose queries are the LAST q_len
    of k_len positions: `offset = k_len - q_len` keys were already cached (background: parity)."""
    offset = k_len - q_len
    q_pos = torch.arange(q_len, device=device)[:, None] + offset
    k_pos = torch.arange(k_len, device=device)[None, :]
    blocked = k_pos > q_pos
    if window is not None:
        blocked |= k_pos <= q_pos - window
    return blocked


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [B, H, T, D]; cos, sin: [T, D/2] (float32). Rotates the two halves of D."""
    half = x.shape[-1] // 2
    a, b = x.float()[..., :half], x.float()[..., half:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1).type_as(x)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


class AttentionCore(nn.Module):
    """softmax(q k^T / sqrt(D) + mask) v over grouped KV heads. The mask comes from `mask_fn`
    with the explicit cache offset; queries are processed in blocks to bound memory."""

    def __init__(self, window: int | None) -> None:
        super().__init__()
        self.window = window
        self.mask_fn: MaskFn = causal_mask

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, padding: torch.Tensor | None = None
    ) -> torch.Tensor:
        # q: [B, H, Tq, D]; k, v: [B, H_kv, Tk, D] -> [B, H, Tq, D]
        # padding: [B, Tk] True where a key slot holds a pad token (left-padded batches)
        rep = q.shape[1] // k.shape[1]
        # on CPU the attention kernel reads each KV head for its query heads in place (bit-identical
        # to repeating them); copying the whole cache per step made a decode step O(cache), and a
        # sweep of single-token appends quadratic in copies. Other devices repeat as before.
        gqa = rep > 1 and q.device.type == "cpu" and GQA_IN_PLACE
        grouped = {"enable_gqa": True} if gqa else {}
        if rep > 1 and not gqa:
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        q_len, k_len = q.shape[2], k.shape[2]
        blocked = self.mask_fn(q_len, k_len, self.window, q.device)
        if padding is not None:
            return self._padded(q, k, v, blocked, padding, grouped)
        out = []
        for i in range(0, q_len, QUERY_BLOCK):
            rows = blocked[i : i + QUERY_BLOCK]
            # skip key columns this query block cannot see (the upper triangle of a full pass)
            seen = (~rows).any(dim=0).nonzero()
            lo, hi = (int(seen[0]), int(seen[-1]) + 1) if len(seen) else (0, k_len)
            out.append(
                F.scaled_dot_product_attention(
                    q[:, :, i : i + QUERY_BLOCK],
                    k[:, :, lo:hi],
                    v[:, :, lo:hi],
                    attn_mask=~rows[:, lo:hi],
                    **grouped,
                )
            )
        return torch.cat(out, dim=2)

    def _padded(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        blocked: torch.Tensor,
        padding: torch.Tensor,
        grouped: dict[str, bool],
    ) -> torch.Tensor:
        """Attention with per-row pad keys blocked; a pad query still sees itself (no empty row)."""
        q_len, k_len = q.shape[2], k.shape[2]
        q_slot = torch.arange(q_len, device=q.device)[:, None] + (k_len - q_len)
        own = q_slot == torch.arange(k_len, device=q.device)[None, :]
        # [B, 1, Tq, Tk]: causal (and window) mask of the cache offset, plus each row's pad slots
        rows = blocked[None] | (padding[:, None, :] & ~own[None])
        out = [
            F.scaled_dot_product_attention(
                q[:, :, i : i + QUERY_BLOCK], k, v, attn_mask=~rows[:, None, i : i + QUERY_BLOCK], **grouped
            )
            for i in range(0, q_len, QUERY_BLOCK)
        ]
        return torch.cat(out, dim=2)


class Attention(nn.Module):
    def __init__(self, config: ModelConfig, layer_id: int) -> None:
        super().__init__()
        self.layer_id = layer_id
        self.n_heads, self.n_kv_heads, self.head_dim = config.n_heads, config.n_kv_heads, config.head_dim
        self.wq = nn.Linear(config.d_model, config.n_heads * config.head_dim, bias=False)
        self.wk = nn.Linear(config.d_model, config.n_kv_heads * config.head_dim, bias=False)
        self.wv = nn.Linear(config.d_model, config.n_kv_heads * config.head_dim, bias=False)
        self.wo = nn.Linear(config.n_heads * config.head_dim, config.d_model, bias=False)
        self.core: AttentionCore = AttentionCore(config.window)

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # x: [B, T, d] -> q: [B, H, T, D], k, v: [B, H_kv, T, D]
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, t, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, t, self.n_kv_heads, self.head_dim).transpose(1, 2)
        return q, k, v

    def merge(self, y: torch.Tensor) -> torch.Tensor:
        # y: [B, H, T, D] -> [B, T, d]
        b, _, t, _ = y.shape
        out: torch.Tensor = self.wo(y.transpose(1, 2).reshape(b, t, self.n_heads * self.head_dim))
        return out

    def forward(
        self, x: torch.Tensor, rot: tuple[torch.Tensor, torch.Tensor] | None, cache: KVCache | None, start_pos: int
    ) -> torch.Tensor:
        q, k, v = self.project(x)
        if rot is not None:
            q, k = apply_rope(q, *rot), apply_rope(k, *rot)  # RoPE BEFORE the cache write
        if cache is not None:
            k, v = cache.update(self.layer_id, start_pos, k, v)
            return self.merge(self.core(q, k, v, cache.padding(k.shape[2])))
        return self.merge(self.core(q, k, v))


class FeedForward(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(config.d_model, config.hidden, bias=False)
        self.w3 = nn.Linear(config.d_model, config.hidden, bias=False)
        self.w2 = nn.Linear(config.hidden, config.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.w2(F.silu(self.w1(x)) * self.w3(x))
        return out


class Block(nn.Module):
    def __init__(self, config: ModelConfig, layer_id: int) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(config.d_model, config.norm_eps)
        self.attention: Attention = Attention(config, layer_id)
        self.ffn_norm = RMSNorm(config.d_model, config.norm_eps)
        self.feed_forward = FeedForward(config)

    def forward(
        self, x: torch.Tensor, rot: tuple[torch.Tensor, torch.Tensor] | None, cache: KVCache | None, start_pos: int
    ) -> torch.Tensor:
        h: torch.Tensor = x + self.attention(self.attention_norm(x), rot, cache, start_pos)
        out: torch.Tensor = h + self.feed_forward(self.ffn_norm(h))
        return out


class Transformer(nn.Module):
    inv_freq: torch.Tensor

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.d_model)
        self.pos_embeddings = nn.Embedding(config.max_len, config.d_model) if config.abs_positions else None
        self.layers = nn.ModuleList(Block(config, i) for i in range(config.n_layers))
        self.norm = RMSNorm(config.d_model, config.norm_eps)
        self.output = nn.Linear(config.d_model, config.vocab_size, bias=False)
        half = config.head_dim // 2
        inv_freq = config.rope_base ** (-torch.arange(half, dtype=torch.float32) / half)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    @property
    def blocks(self) -> list[Block]:
        return [b for b in self.layers if isinstance(b, Block)]

    def positions(self, start_pos: int, n: int) -> torch.Tensor:
        """Absolute positions of n tokens starting at start_pos: [n] int64."""
        return torch.arange(start_pos, start_pos + n, device=self.inv_freq.device)

    def row_positions(self, slots: torch.Tensor, origin: torch.Tensor) -> torch.Tensor:
        """Positions [B, n] of tokens at cache slots [n] in rows whose first real token sits at slot
        `origin` [B] (left padding): counted from each row's origin; pad slots get 0."""
        return (slots[None, :] - origin[:, None]).clamp(min=0)

    def rotary(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin tables [n, D/2] (or [B, 1, n, D/2] for per-row positions [B, n]), float32."""
        angles = positions.float()[..., None] * self.inv_freq
        if positions.dim() == 2:
            angles = angles[:, None]
        return angles.cos(), angles.sin()

    def step(self, tokens: torch.Tensor, cache: KVCache | None, start_pos: int) -> torch.Tensor:
        """tokens [B, n] at absolute positions start_pos.. against `cache` -> logits [B, n, V].
        Writes their K/V into the cache and advances `cache.pos` to start_pos + n."""
        n = tokens.shape[1]
        positions = self.positions(start_pos, n)
        if cache is not None and cache.origin is not None:
            positions = self.row_positions(positions, cache.origin.to(positions.device))
        logits = self._run(tokens, positions, cache, start_pos)
        if cache is not None:
            cache.pos = start_pos + n
        return logits

    def step_rows(self, tokens: torch.Tensor, cache: SlotCache) -> torch.Tensor:
        """Continuous batching: ONE forward over rows of different requests, each at its own offset.
        tokens [R, n] (real tokens first, then pads), `cache` bound to the rows' slots (`SlotCache.bind`)
        -> logits [R, n, V]; the slots' lengths move on."""
        n = tokens.shape[1]
        last = self.config.max_len - 1
        positions = torch.stack([self.positions(start, n) for start in cache.starts]).clamp(max=last)
        # the read's columns before this forward's tokens: the longest history among the rows
        logits = self._run(tokens, positions, cache, max(cache.starts))
        cache.advance()
        return logits

    def _run(self, tokens: torch.Tensor, positions: torch.Tensor, cache: KVCache | None, start: int) -> torch.Tensor:
        x = self.tok_embeddings(tokens)
        if self.pos_embeddings is not None:
            x = x + self.pos_embeddings(positions)
        rot = self.rotary(positions) if self.config.rope else None
        for block in self.blocks:
            x = block(x, rot, cache, start)
        logits: torch.Tensor = self.output(self.norm(x))
        return logits

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Full causal pass, no cache: [B, T] -> [B, T, V]."""
        return self.step(tokens, None, 0)


def init_weights(model: Transformer, seed: int) -> None:
    """Seeded normal weights, drawn in float32 on CPU so every device and dtype gets the same model.
    Scales keep attention sharp enough that mask and position errors move the logits."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
                continue
            # embeddings: unit normal rows; linear [out, in]: std gain / sqrt(in)
            fan_in = 1 if name.endswith("embeddings.weight") else param.shape[1]
            gain = 2.0 if name.split(".")[-2] in ("wq", "wk", "output") else 1.0
            w = torch.randn(param.shape, generator=gen) * gain / math.sqrt(fan_in)
            param.copy_(w.to(param.dtype))


def build_model(
    config: ModelConfig, *, seed: int = 0, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
) -> Transformer:
    """A seeded model in evaluation mode on `device` in `dtype` (rope tables stay float32)."""
    model = Transformer(config)
    init_weights(model, seed)
    return placed(model, device, dtype)


def placed(model: Transformer, device: str | torch.device, dtype: torch.dtype) -> Transformer:
    """`model` on `device` with its parameters in `dtype` (buffers untouched), in evaluation mode."""
    model = model.to(device=device)
    for p in model.parameters():
        p.data = p.data.to(dtype)
    return model.eval().requires_grad_(False)


def prefill(
    model: Transformer,
    tokens: torch.Tensor,
    cache: KVCache,
    *,
    start_pos: int | None = None,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """Process tokens [B, T] against the cache from `start_pos` (default cache.pos), in chunks of
    `chunk_size` tokens when given -> logits [B, T, V]."""
    start = cache.pos if start_pos is None else start_pos
    step = chunk_size or max(tokens.shape[1], 1)
    outs = [model.step(tokens[:, i : i + step], cache, start + i) for i in range(0, tokens.shape[1], step)]
    if not outs:
        return torch.zeros(tokens.shape[0], 0, model.config.vocab_size, device=tokens.device)
    return torch.cat(outs, dim=1)
