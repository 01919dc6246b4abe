"""Prefix lengths and the cached sweep schedule behind `prefix-sweep`.

For every length L the candidate must produce the logits of token L appended to a cache that
holds tokens 0..L-1. Doing that from scratch per length costs sum(L^2). The schedule here grows
one session instead: prefill the first length, then for each next length append the tokens in
between as one chunk and append token L alone, reading its row. Total work is about one causal
pass over the longest prefix plus one single-token append per length, and it uses only the
Session protocol (prefill, append), so it runs on any engine.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from gate.protocols import DecodePath

SEED_LENGTHS = (0, 1, 2, 16, 64, 200, 2000, 8000)
"""the standard prefix lengths (background: parity)."""


def log_spaced(count: int, longest: int) -> list[int]:
    """At least `count` distinct integer lengths, log-spaced from 1 to `longest` (fewer only if
    there are fewer integers in range)."""
    if longest < 1:
        return []
    target = min(count, longest)
    k = target
    while True:
        values = sorted({max(1, round(math.exp(math.log(longest) * i / (k - 1)))) for i in range(k)}) if k > 1 else [1]
        if len(values) >= target or k > 4 * longest:
            return values
        k += max(1, (target - len(values)))


def around(boundaries: Iterable[int], longest: int) -> list[int]:
    """Every boundary b as b-1, b, b+1, within 0..longest."""
    out = {x for b in boundaries for x in (b - 1, b, b + 1)}
    return sorted(x for x in out if 0 <= x <= longest)


def sweep_lengths(
    longest: int,
    *,
    seed_lengths: Iterable[int] = SEED_LENGTHS,
    log_count: int = 64,
    boundaries: Iterable[int] = (),
    every_up_to: int | None = None,
) -> list[int]:
    """The sweep's prefix lengths: seed lengths clipped to `longest`, log-spaced lengths, every
    layout boundary ±1, and optionally every length 1..every_up_to."""
    lengths = {min(int(x), longest) for x in seed_lengths if x >= 0}
    lengths.update(log_spaced(log_count, longest))
    lengths.update(around(boundaries, longest))
    if every_up_to:
        lengths.update(range(1, min(every_up_to, longest) + 1))
    return sorted(lengths)


def cached_sweep(
    path: DecodePath,
    tokens: torch.Tensor,
    lengths: list[int],
    progress: Callable[[str, int, int], None] | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Logits of token L appended to a cache of tokens[:, :L], for each L in sorted `lengths`:
    [len(lengths), B, V] float32, plus the session's proof of exercise. `progress(task, done, total)`
    hears about each length swept."""
    task = f"{path.name}: lengths swept"
    import torch

    rows: list[torch.Tensor] = []
    exercise: dict[str, Any] = {}
    if lengths and lengths[0] == 0:
        # prefix length 0: the first token appended to an empty cache
        empty = path.new_session(tokens.shape[0])
        rows.append(empty.append(tokens[:, :1])[:, -1].float().cpu())
    grow = [length for length in lengths if length > 0]
    if grow:
        session = path.new_session(tokens.shape[0])
        session.prefill(tokens[:, : grow[0]])
        done = grow[0]
        for length in grow:
            if length > done:
                session.append(tokens[:, done:length])
            rows.append(session.append(tokens[:, length : length + 1])[:, -1].float().cpu())
            done = length + 1
            if progress is not None:
                progress(task, len(rows), len(lengths))
        exercise = dict(session.exercise())
    exercise["schedule"] = "progressive: prefill the first length, then chunk + single-token append per length"
    exercise["sweep_lengths"] = len(lengths)
    return torch.stack(rows), exercise
