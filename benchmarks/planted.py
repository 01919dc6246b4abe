"""Planted slowdowns, from outside the model: a DecodePath wrapper whose sessions do extra work.

The model code, the adapter and the path's options are untouched; `SlowPath` wraps any built
`DecodePath` and adds, after every prefill and append, either a sleep (`sleep_s`) or a wasted full
recompute of the session's context (`recompute=True`: the work a cache exists to avoid). Used by
benchmarks/perf_gate.py and the phase-performance tests to show the check can deny.
"""

from __future__ import annotations

import time
from typing import Any

import torch


class SlowSession:
    """A session that does its inner session's work, then the planted extra work."""

    def __init__(self, inner: Any, path: SlowPath) -> None:
        self.inner, self.path = inner, path
        self.context: torch.Tensor | None = None
        self.planted_steps = 0

    def _extra(self, tokens: torch.Tensor) -> None:
        self.context = tokens if self.context is None else torch.cat([self.context, tokens.to(self.context.device)], 1)
        self.planted_steps += 1
        if self.path.sleep_s:
            time.sleep(self.path.sleep_s)
        if self.path.recompute:
            self.path.inner.full_logits(self.context)

    def prefill(self, tokens: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.inner.prefill(tokens)
        self._extra(tokens)
        return out

    def append(self, tokens: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.inner.append(tokens)
        self._extra(tokens)
        return out

    def reset(self) -> None:
        self.inner.reset()
        self.context = None

    def exercise(self) -> dict[str, Any]:
        return {**self.inner.exercise(), "planted_steps": self.planted_steps}


class SlowPath:
    """`inner` with a planted slowdown on every session step (sleep, or a wasted full recompute)."""

    def __init__(self, inner: Any, *, sleep_s: float = 0.0, recompute: bool = False) -> None:
        self.inner, self.sleep_s, self.recompute = inner, sleep_s, recompute
        what = [f"sleep {sleep_s * 1000:g} ms"] if sleep_s else []
        what += ["recompute"] if recompute else []
        self.name = f"{inner.name}+planted[{', '.join(what) or 'nothing'}]"

    def new_session(self, batch_size: int) -> SlowSession:
        return SlowSession(self.inner.new_session(batch_size), self)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
