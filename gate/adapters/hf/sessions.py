"""Sessions: one request's prefill and appends through a transformers cache.

The position state is explicit, as in gpt-fast: the session counts the absolute position of the next
token (`pos`) and sends it, instead of letting the model infer it from the cache length (which is not
the position under presses and sliding windows).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import torch

from gate.adapters.hf import compat
from gate.adapters.hf.faults import Tamper
from gate.adapters.hf.view import SessionPath
from gate.protocols.paths import NO_CACHE


class CacheSession:
    """Prefill then append against a cache built by the path (dynamic, static, quantized, ...)."""

    def __init__(self, path: SessionPath, batch_size: int) -> None:
        self.path = path
        self.model = path.model
        self.batch_size = batch_size
        self.device = path.device
        self.tamper: Tamper = path.tamper
        self.positions_from_cache = False
        """True where the library, not the session, counts positions (generate)."""
        self.cache: Any | None = None
        self.pos = 0
        """Absolute position of the next token (the request's position state)."""
        self.cached_steps = 0
        """Forward calls that read a non-empty cache."""
        self.forward_calls = 0
        self.last_prefill = torch.empty(batch_size, 0, dtype=torch.long, device=self.device)
        self.prefill_positions = self.last_prefill
        self.pending_positions = self.last_prefill

    def prefill(self, tokens: torch.Tensor) -> torch.Tensor:
        return self._step("prefill", tokens)

    def append(self, tokens: torch.Tensor) -> torch.Tensor:
        return self._step("append", tokens)

    def reset(self) -> None:
        self.tamper.reset(self)

    def exercise(self) -> dict[str, Any]:
        cache = self.cache
        return {
            "cache_len": compat.seq_length(cache) if cache is not None else 0,
            "cached_steps": self.cached_steps,
            "cache_bytes": compat.cache_bytes(cache) if cache is not None else 0,
            "tokens_seen": self.pos,
            "forward_calls": self.forward_calls,
            "cache_class": type(cache).__name__ if cache is not None else None,
            "layer_classes": sorted({type(layer).__name__ for layer in cache.layers}) if cache is not None else [],
            "transformers": compat.cache_api(self.model).version,
            **self.path.extra_exercise(self),
        }

    def clear_cache(self) -> None:
        """Drop stored K/V, keeping the cache object when it has a reset (reuse of one allocation)."""
        if self.cache is not None:
            compat.reset(self.cache)

    def other_request_cache(self) -> Any:
        """A cache this path prefilled with another request of the same length and positions."""
        other = (self.last_prefill * 7 + 3) % self.path.vocab_size
        decoy = self.path.make_cache(other.shape[0])
        with torch.no_grad():
            compat.forward(self.model, other, decoy, self.prefill_positions)
        return decoy

    def _record_prefill(self, tokens: torch.Tensor) -> None:
        """Remember the prompt and its positions (for other_request_cache)."""
        self.last_prefill = tokens
        self.prefill_positions = self._positions(tokens.shape[1])

    def _positions(self, n: int) -> torch.Tensor:
        return torch.arange(self.pos, self.pos + n, device=self.device).unsqueeze(0).expand(self.batch_size, n)

    def _step(self, phase: str, tokens: torch.Tensor) -> torch.Tensor:
        tokens = tokens.to(self.device)
        n = tokens.shape[1]
        self._check_batch(tokens, self.batch_size)
        if n == 0:
            return torch.empty(self.batch_size, 0, self.path.vocab_size)
        if self.cache is None:
            self.cache = self.path.make_cache(self.batch_size)
        logits = self._forward(phase, tokens)
        if phase == "prefill":
            self._record_prefill(tokens)
        self.pos += n
        self.tamper.after_write(phase, self, n)
        return logits

    def _check_batch(self, tokens: torch.Tensor, rows: int) -> None:
        if tokens.shape[0] != rows:
            raise ValueError(f"session has batch {rows}, got tokens of shape {tuple(tokens.shape)}")

    def _forward(self, phase: str, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        positions = self.tamper.positions(phase, self._call_positions(phase, n))
        self.pending_positions = positions
        had_cache = self.cache is not None and compat.seq_length(self.cache) > 0
        self.tamper.before_forward(phase, self, n)
        with torch.no_grad(), self.tamper.weights(phase, self.model), self.path.around_forward(self, phase):
            logits: torch.Tensor = compat.forward(
                self.model,
                tokens,
                self.cache,
                positions,
                cache_position=self._cache_position(phase, positions),
                attention_mask=self._attention_mask(phase, n),
            ).logits.float()
        self.forward_calls += 1
        self.cached_steps += int(had_cache)
        return logits

    def _call_positions(self, phase: str, n: int) -> torch.Tensor:
        return self._positions(n)

    def _cache_position(self, phase: str, positions: torch.Tensor) -> torch.Tensor | None:
        """An explicit `cache_position` (a planted fault), or None: compat.forward derives it."""
        return self.tamper.cache_position(phase, positions)

    def _attention_mask(self, phase: str, n: int) -> torch.Tensor | None:
        return self.tamper.attention_mask(phase, self, n)


class PaddedSession(CacheSession):
    """Requests of different lengths in one batch through one cache, padded the way a serving stack
    pads for `generate` (docs/hf-adapter.md, "Paths"); right-padded batches are prefill-only."""

    def __init__(self, path: SessionPath, batch_size: int, padding: str) -> None:
        super().__init__(path, batch_size)
        self.padding = padding
        self.mask = torch.empty(batch_size, 0, dtype=torch.long, device=self.device)
        """[B, tokens so far] 1 on real tokens, 0 on pads."""
        self.pad_tokens = 0

    def prefill(self, prompts: Any) -> Any:  # Sequence[Tensor] -> list[Tensor] (gate.protocols.BatchedSession)
        if len(prompts) != self.batch_size:
            raise ValueError(f"session has batch {self.batch_size}, got {len(prompts)} prompts")
        lengths = [int(p.shape[0]) for p in prompts]
        width = max(lengths)
        rows = torch.full((self.batch_size, width), self.path.pad_token_id, dtype=torch.long, device=self.device)
        self.mask = torch.zeros(self.batch_size, width, dtype=torch.long, device=self.device)
        starts = [width - n if self.padding == "left" else 0 for n in lengths]
        for row, (prompt, start) in enumerate(zip(prompts, starts, strict=True)):
            rows[row, start : start + prompt.shape[0]] = prompt.to(self.device)
            self.mask[row, start : start + prompt.shape[0]] = 1
        self.pad_tokens += sum(width - n for n in lengths)
        logits = self._step("prefill", rows)
        return [logits[row, start : start + n] for row, (start, n) in enumerate(zip(starts, lengths, strict=True))]

    def append(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.padding != "left":
            raise ValueError("a right-padded batch is prefill-only: its requests end at different slots")
        self.mask = torch.cat([self.mask, torch.ones_like(tokens, device=self.device)], dim=1)
        return self._step("append", tokens)

    def _positions(self, n: int) -> torch.Tensor:
        # the last n columns of the mask are this call's tokens; pads get position 0 (masked anyway)
        return (self.mask.cumsum(dim=1)[:, -n:] - 1).clamp(min=0)

    def _call_positions(self, phase: str, n: int) -> torch.Tensor:
        slots = torch.arange(self.pos, self.pos + n, device=self.device).expand(self.batch_size, n)
        return self.tamper.batch_positions(phase, self._positions(n), slots)

    def _cache_position(self, phase: str, positions: torch.Tensor) -> torch.Tensor | None:
        planted = self.tamper.cache_position(phase, positions)
        if planted is not None:
            return planted
        return compat.batch_cache_position(self.model, self.pos, positions.shape[1], self.device)

    def _attention_mask(self, phase: str, n: int) -> torch.Tensor | None:
        planted = self.tamper.attention_mask(phase, self, n)
        return planted if planted is not None else self.tamper.padding_mask(phase, self.mask)

    def exercise(self) -> dict[str, Any]:
        return {**super().exercise(), "padding": self.padding, "pad_tokens": self.pad_tokens, "rows": self.batch_size}


class HistorySession(CacheSession):
    """A session that hands the request's whole token history to the engine on every call."""

    def __init__(self, path: SessionPath, batch_size: int) -> None:
        super().__init__(path, batch_size)
        self.history = torch.empty(batch_size, 0, dtype=torch.long, device=self.device)

    def clear_cache(self) -> None:
        super().clear_cache()
        self.history = self.history[:, :0]

    def _step(self, phase: str, tokens: torch.Tensor) -> torch.Tensor:
        self._check_batch(tokens, self.batch_size)
        self.history = torch.cat([self.history, tokens.to(self.device)], dim=1)
        n = int(tokens.shape[1])
        return self._run(phase, n) if n else torch.empty(self.batch_size, 0, self.path.vocab_size)

    def _run(self, phase: str, n: int) -> torch.Tensor:
        """Run the history, whose last `n` tokens are this call's: their logits [B, n, V]."""
        raise NotImplementedError


class RecomputeSession(HistorySession):
    """No cache at all: every call recomputes the whole history with one full causal pass."""

    def _run(self, phase: str, n: int) -> torch.Tensor:
        logits = self.path.full_logits(self.history)[:, -n:]
        self.pos += n
        self.forward_calls += 1
        return logits

    def exercise(self) -> dict[str, Any]:
        return {
            **NO_CACHE,
            "tokens_seen": self.pos,
            "recomputed_tokens": int(self.history.shape[1]),
            "forward_calls": self.forward_calls,
        }


@dataclass
class PrefixEntry:
    tokens: torch.Tensor
    """[B, T] token ids; an entry matches a request whose first T ids are equal, row by row."""
    cache: Any
    logits: torch.Tensor
    """[B, T, V] float32: what the prefill returned, served again on a hit."""


@dataclass
class PrefixStore:
    """The cross-request store of one path: entries keyed by exact token ids; the counters prove reuse."""

    entries: list[PrefixEntry] = field(default_factory=list)
    hits: int = 0
    misses: int = 0
    hit_tokens: int = 0

    def longest(self, tokens: torch.Tensor) -> tuple[PrefixEntry | None, int]:
        """The entry sharing the longest prefix (< T) with `tokens` [B, T], and that length."""
        best: tuple[PrefixEntry | None, int] = (None, 0)
        for entry in self.entries:
            if entry.tokens.shape[0] != tokens.shape[0]:
                continue
            limit = min(entry.tokens.shape[1], tokens.shape[1] - 1)
            same = (entry.tokens[:, :limit] == tokens[:, :limit]).all(dim=0)
            length = int(same.long().cumprod(0).sum()) if limit > 0 else 0
            if length > best[1]:
                best = (entry, length)
        return best


class PrefixReuseSession(CacheSession):
    """Prefix reuse across requests: a prefill extends the cache of the longest stored prefix (a deep
    copy, or the stored object then cropped back on reset); one that found nothing stores its own."""

    def __init__(self, path: SessionPath, batch_size: int, store: PrefixStore, mode: str) -> None:
        super().__init__(path, batch_size)
        self.store = store
        self.mode = mode
        self.borrowed: tuple[PrefixEntry, int] | None = None
        self.prompt: torch.Tensor | None = None

    def prefill(self, tokens: torch.Tensor) -> torch.Tensor:
        tokens = tokens.to(self.device)
        if self.cache is not None and compat.seq_length(self.cache) > 0:
            return super().prefill(tokens)  # a second prefill in one request extends it as usual
        entry, shared = self.store.longest(tokens)
        if entry is not None and not compat.can_drop(entry.cache, entry.tokens.shape[1] - shared):
            entry = None  # a sliding window already evicted what the shorter prefix held
        if entry is None:
            self.store.misses += 1
            logits = super().prefill(tokens)
            if self.cache is not None and tokens.shape[1] > 0:
                self.store.entries.append(PrefixEntry(tokens.clone(), copy.deepcopy(self.cache), logits.clone()))
            return logits
        self.store.hits += 1
        self.store.hit_tokens += shared
        stored = entry.tokens.shape[1]
        if self.mode == "crop" and shared == stored:
            # extend the stored base in place; reset() crops it back to `stored`
            self.cache = entry.cache
            self.borrowed = (entry, stored)
        else:
            self.cache = copy.deepcopy(entry.cache)
            compat.drop_last(self.cache, compat.seq_length(self.cache) - shared)
        self.pos = shared
        self.prompt = tokens
        return torch.cat([entry.logits[:, :shared], self._step("prefill", tokens[:, shared:])], dim=1)

    def _record_prefill(self, tokens: torch.Tensor) -> None:
        # on a hit the request's prompt is the stored prefix plus `tokens`, from position 0
        prompt = self.prompt if self.prompt is not None else tokens
        self.last_prefill = prompt
        self.prefill_positions = torch.arange(prompt.shape[1], device=self.device).expand_as(prompt)
        self.prompt = None

    def clear_cache(self) -> None:
        if self.borrowed is not None:
            compat.drop_last(self.cache, compat.seq_length(self.cache) - self.borrowed[1])
            self.borrowed = None
            self.cache = None
            return
        super().clear_cache()
