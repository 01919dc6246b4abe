"""Beam search's cache traffic on the dynamic, static and quantized paths (option `beams`).

A session runs each request as one hypothesis among `beams` rows of one cache: a prefill writes the
prompt into all of them; before every append the cache is reordered through the library's own
`reorder_cache`; the hypothesis' row is fed the request's tokens, every other row tokens of its own,
so a reorder that lands wrong is read (docs/hf-adapter.md, "Beam search").
"""

from __future__ import annotations

from typing import Any

import torch

from gate.adapters.hf import compat
from gate.adapters.hf.sessions import CacheSession
from gate.adapters.hf.view import SessionPath


def beam_parents(beams: int, tracked: int) -> tuple[list[int], int]:
    """One reselection of `beams` beams, the hypothesis in row `tracked`: each new row's parent row
    and the hypothesis' new row. It moves to the next row; the first other new row takes a second
    copy of its parent, the rest take the other beams in order (the last of them is dropped)."""
    moved = (tracked + 1) % beams
    others = iter([tracked, *(b for b in range(beams) if b != tracked)])
    return [tracked if row == moved else next(others) for row in range(beams)], moved


class BeamSession(CacheSession):
    """A request as one hypothesis among `beams` rows of one cache (the module docstring)."""

    def __init__(self, path: SessionPath, batch_size: int) -> None:
        self.beams = int(path.options.beams or 1)
        self.requests = batch_size
        super().__init__(path, batch_size * self.beams)
        self.tracked = 0
        """The beam (row within each request's block) holding the request's hypothesis."""
        self.reorders = 0
        self.moves = 0

    @property
    def tracked_rows(self) -> torch.Tensor:
        """Cache rows [B] of the requests' hypotheses."""
        return torch.arange(self.requests, device=self.device) * self.beams + self.tracked

    def prefill(self, tokens: torch.Tensor) -> torch.Tensor:
        self._check_batch(tokens, self.requests)
        return self._step("prefill", tokens.to(self.device).repeat_interleave(self.beams, dim=0))[self.tracked_rows]

    def append(self, tokens: torch.Tensor) -> torch.Tensor:
        self._check_batch(tokens, self.requests)
        tokens = tokens.to(self.device)
        if tokens.shape[1] == 0:
            return torch.empty(self.requests, 0, self.path.vocab_size)
        if self.cache is not None and compat.seq_length(self.cache) > 0:
            parents, moved = beam_parents(self.beams, self.tracked)
            flat = torch.tensor([r * self.beams + p for r in range(self.requests) for p in parents], device=self.device)
            self.tamper.reorder(self, flat)
            self.reorders += 1
            self.moves += int(moved != self.tracked)
            self.tracked = moved
        rows = torch.empty(self.batch_size, tokens.shape[1], dtype=tokens.dtype, device=self.device)
        for beam in range(self.beams):
            # every other beam continues with tokens of its own (a distinct hypothesis per row)
            rows[beam :: self.beams] = tokens if beam == self.tracked else (tokens + 1 + beam) % self.path.vocab_size
        return self._step("append", rows)[self.tracked_rows]

    def clear_cache(self) -> None:
        super().clear_cache()
        self.tracked = 0

    def exercise(self) -> dict[str, Any]:
        return {
            **super().exercise(),
            "beams": self.beams,
            "beam_rows": self.batch_size,
            "reorder_calls": self.reorders,
            "hypothesis_moves": self.moves,
            "hypothesis_row": self.tracked,
        }
