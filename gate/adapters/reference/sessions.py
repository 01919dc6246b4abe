"""The sessions of a reference path (gate.adapters.reference.paths): a full recompute per call, prefill
and append against one KV cache, a padded batch, and continuous batching over one `SlotCache`. A session
reads its path only through `SessionPath`; `model` and `cache` are public (faults wrap them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import torch

from gate.adapters.slots import SlotTable
from gate.models.reference import KVCache, Layout, SlotCache, Transformer, prefill
from gate.protocols import subject_call
from gate.protocols.paths import NO_CACHE


class SessionPath(Protocol):
    """What a session reads from its path (a gate.adapters.reference.paths.ReferencePath)."""

    model: Transformer
    device: str
    layout: Layout | None
    chunk_size: int | None

    @property
    def vocab_size(self) -> int: ...

    def full_logits(self, tokens: torch.Tensor) -> torch.Tensor: ...

    def make_cache(self, batch: int) -> KVCache: ...


class FullSession:
    """No cache: every call recomputes one full pass over the request so far."""

    def __init__(self, path: SessionPath, batch: int) -> None:
        self.path, self.batch = path, batch
        self.tokens = torch.zeros(batch, 0, dtype=torch.long, device=path.device)
        self.passes = 0

    def prefill(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.append(tokens)

    def append(self, tokens: torch.Tensor) -> torch.Tensor:
        self.tokens = torch.cat([self.tokens, tokens.to(self.path.device)], dim=1)
        self.passes += 1
        return (
            self.path.full_logits(self.tokens)[:, -tokens.shape[1] :]
            if tokens.shape[1]
            else torch.zeros(self.batch, 0, self.path.vocab_size, device=self.path.device)
        )

    def reset(self) -> None:
        self.tokens = self.tokens[:, :0]

    def exercise(self) -> dict[str, Any]:
        return {
            **NO_CACHE,
            "full_passes": self.passes,
            "tokens": int(self.tokens.shape[1]),
        }


class CachedSession:
    """Prefill and append against one KV cache; `model` and `cache` are public (faults wrap them)."""

    def __init__(self, path: SessionPath, batch: int) -> None:
        self.path, self.model = path, path.model
        self.cache = path.make_cache(batch)
        self.cached_steps = 0
        self.model_steps = 0
        self.tokens_processed = 0

    @torch.no_grad()
    def _run(self, tokens: torch.Tensor) -> torch.Tensor:
        tokens = tokens.to(self.path.device)
        start, n = self.cache.pos, tokens.shape[1]
        chunk = self.path.chunk_size or max(n, 1)
        self.model_steps += len(range(0, n, chunk))
        self.cached_steps += sum(1 for i in range(0, n, chunk) if start + i > 0)
        self.tokens_processed += n
        # the decoder and its cache are the subject: a crash inside is a finding (class crash), not gate's error
        with subject_call(f"{type(self.model).__name__}.step", length=start, tokens=n):
            logits = prefill(self.model, tokens, self.cache, start_pos=start, chunk_size=self.path.chunk_size)
        return logits.float()

    prefill = append = _run

    def reset(self) -> None:
        with subject_call(f"{type(self.cache).__name__}.reset", length=self.cache.pos):
            self.cache.reset()

    def exercise(self) -> dict[str, Any]:
        return {
            "cache_len": self.cache.pos,
            "cached_steps": self.cached_steps,
            "cache_bytes": self.cache.nbytes(),
            "model_steps": self.model_steps,
            "tokens_processed": self.tokens_processed,
            "layout": self.path.layout,
            "capacity": self.cache.capacity,
        }


PAD_TOKEN = 0
"""The token id padded slots hold (any id: a correct read never sees it)."""


class PaddedSession(CachedSession):
    """Requests of different lengths in one batch over one KV cache: left padding sets each row's
    origin in the cache (positions count from it, the pad slots before it are masked) and decodes
    on; right padding needs neither (the pads come after every real token) and is prefill-only."""

    def __init__(self, path: SessionPath, batch: int, padding: str) -> None:
        super().__init__(path, batch)
        self.batch, self.padding = batch, padding
        self.pad_tokens = 0

    def prefill(self, prompts: Sequence[torch.Tensor]) -> list[torch.Tensor]:  # type: ignore[override]
        if len(prompts) != self.batch:
            raise ValueError(f"session has batch {self.batch}, got {len(prompts)} prompts")
        lengths = [int(p.shape[0]) for p in prompts]
        width = max(lengths)
        rows = torch.full((self.batch, width), PAD_TOKEN, dtype=torch.long, device=self.path.device)
        starts = [width - n if self.padding == "left" else 0 for n in lengths]
        for row, (prompt, start) in enumerate(zip(prompts, starts, strict=True)):
            rows[row, start : start + prompt.shape[0]] = prompt.to(self.path.device)
        if self.padding == "left":
            self.cache.origin = torch.tensor(starts, device=self.path.device)
        self.pad_tokens += sum(width - n for n in lengths)
        logits = self._run(rows)
        return [logits[row, start : start + n] for row, (start, n) in enumerate(zip(starts, lengths, strict=True))]

    def append(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.padding != "left":
            raise ValueError("a right-padded batch is prefill-only: its requests end at different slots")
        return self._run(tokens)

    def exercise(self) -> dict[str, Any]:
        return {**super().exercise(), "padding": self.padding, "pad_tokens": self.pad_tokens, "rows": self.batch}


class SlotSession:
    """Continuous batching over one `SlotCache` (slots as gate.adapters.slots.SlotTable hands them out):
    each `step` is one forward of the rows it feeds, right-padded to the longest, each at its own offset."""

    def __init__(self, path: SessionPath, cache: SlotCache) -> None:
        self.path, self.model, self.cache = path, path.model, cache
        self.table = SlotTable(len(cache.lengths))

    def join(self) -> int:
        handle, slot = self.table.join()
        with subject_call(f"{type(self.cache).__name__}.claim", slot=slot):
            self.cache.claim(slot)
        return handle

    def leave(self, request: int) -> None:
        self.table.leave(request)

    @torch.no_grad()
    def step(self, feeds: Mapping[int, torch.Tensor]) -> dict[int, torch.Tensor]:
        fed = {h: int(t.shape[0]) for h, t in feeds.items()}
        slots = self.table.plan(fed)
        width = max(fed.values())
        tokens = torch.full((len(fed), width), PAD_TOKEN, dtype=torch.long, device=self.path.device)
        for row, (h, n) in enumerate(fed.items()):
            tokens[row, :n] = feeds[h].to(self.path.device)
        self.cache.bind(slots, list(fed.values()))
        with subject_call(f"{type(self.model).__name__}.step_rows", rows=len(fed), tokens=width):
            logits = self.model.step_rows(tokens, self.cache).float()
        return {h: logits[row, :n] for row, (h, n) in enumerate(fed.items())}

    def exercise(self) -> dict[str, Any]:
        return {**self.table.exercise(), "cache_len": max(self.cache.lengths), "cache_bytes": self.cache.nbytes()}
