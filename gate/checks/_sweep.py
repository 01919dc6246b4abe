"""Prefix lengths and the cached sweep schedule behind `prefix-sweep`.

For every length L the candidate must produce the logits of token L appended to a cache that holds
tokens 0..L-1. Rather than sum(L^2) from scratch, one session grows: prefill the first length, then
per next length append the tokens in between as one chunk and token L alone, reading its row.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gate.checks._compare import thin
from gate.checks.prefix_sweep import SEED_LENGTHS as SEED_LENGTHS  # stated by the check's torch-free face

if TYPE_CHECKING:
    import torch

    from gate.protocols import DecodePath


def log_spaced(count: int, longest: int) -> list[int]:
    """At least `count` distinct integer lengths (if there are), log-spaced from 1 to `longest`."""
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
    return sorted({x for b in boundaries for x in (b - 1, b, b + 1) if 0 <= x <= longest})


def layout_edges(path: Any) -> dict[str, tuple[int, ...]]:
    """The path's layout edges by kind (`LayoutBoundaries` as one kind `layout`)."""
    from gate.protocols import LayoutBoundaries, LayoutEdges, offered

    if (layout := offered(path, LayoutEdges)) is not None:
        return {kind: tuple(sorted(set(edges))) for kind, edges in layout.layout_edges().items() if edges}
    if (bounded := offered(path, LayoutBoundaries)) is not None:
        flat = tuple(sorted(set(bounded.layout_boundaries())))
        return {"layout": flat} if flat else {}
    return {}


@dataclass(frozen=True)
class SweepPlan:
    """The lengths a sweep visits and what they cover."""

    lengths: list[int]
    coverage: dict[str, dict[str, int]]
    """Per edge kind: `edges` within reach, `visited` (the edge and both neighbours swept)."""
    exhaustive: bool
    capped: bool
    """True when the cap left out log-spaced lengths or sampled edges it would otherwise visit."""
    cap: int | None
    seed: int
    context: int = 0
    """Longest prefix the path admits; edges are counted up to it, visited or not."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "lengths": len(self.lengths),
            "longest": self.lengths[-1] if self.lengths else 0,
            "context": self.context,
            "exhaustive": self.exhaustive,
            "capped": self.capped,
            "cap": self.cap,
            "seed": self.seed,
        }

    def summary(self) -> str:
        """e.g. `block 24/511, window 1/1 boundaries`."""
        parts = [f"{kind} {c['visited']}/{c['edges']}" for kind, c in self.coverage.items()]
        text = (", ".join(parts) + " boundaries") if parts else "no layout boundaries reported"
        reached = self.lengths[-1] if self.lengths else 0
        return text + (f" (swept up to {reached} of {self.context})" if reached < self.context else "")


def plan_sweep(
    longest: int,
    *,
    edges: Mapping[str, Iterable[int]] | None = None,
    seed_lengths: Iterable[int] = SEED_LENGTHS,
    log_count: int = 64,
    first_edges: int = 8,
    sampled_edges: int = 24,
    cap: int | None = 256,
    seed: int = 0,
    exhaustive: bool = False,
    every_up_to: int | None = None,
    reach: int | None = None,
) -> SweepPlan:
    """Bounded, seeded sweep lengths in 0..longest.

    Always: the standard lengths (clipped), the first `first_edges` edges ±1 of every kind (short-prefix
    bugs live there) and the last edge ±1 of every kind, and every length up to `every_up_to`. Then,
    within `cap` lengths in all: up to `log_count` log-spaced lengths (thinned evenly if the cap
    binds), then up to `sampled_edges` further edges ±1 drawn with `seed` from every kind's rest.
    `exhaustive` visits every edge ±1 and ignores the cap. `reach` bounds a non-exhaustive sweep's
    longest prefix, except for the lengths always visited; edges are still counted up to `longest`."""
    kinds = {k: sorted({int(b) for b in v if 0 <= int(b) <= longest}) for k, v in (edges or {}).items()}
    kinds = {k: v for k, v in kinds.items() if v}
    context = longest
    seeds = [int(x) for x in seed_lengths if x >= 0]
    if reach is not None and not exhaustive:
        firsts = [v[0] + 1 for v in kinds.values()]
        longest = min(longest, max([reach, *firsts, *seeds, every_up_to or 0]))
        reachable = {k: [b for b in v if b <= longest] for k, v in kinds.items()}
    else:
        reachable = kinds
    must = {min(x, longest) for x in seeds}
    if every_up_to:
        must.update(range(1, min(every_up_to, longest) + 1))
    logs = log_spaced(log_count, longest)
    if exhaustive:
        chosen = must | set(logs) | set(around([b for v in kinds.values() for b in v], longest))
        return SweepPlan(sorted(chosen), _coverage(kinds, chosen, longest), True, False, None, seed, context)
    for v in reachable.values():
        must.update(around([*v[:first_edges], v[-1]], longest))
    chosen = set(must)
    budget = None if cap is None else max(cap - len(chosen), 0)
    extra_logs = [x for x in logs if x not in chosen]
    capped = False
    if budget is not None and len(extra_logs) > budget:
        extra_logs, capped = (thin(extra_logs, budget) if budget >= 2 else extra_logs[:budget]), True
    chosen.update(extra_logs)
    rest = sorted({b for v in reachable.values() for b in v[first_edges:-1]})
    for b in random.Random(seed).sample(rest, min(sampled_edges, len(rest))):
        new = [x for x in around([b], longest) if x not in chosen]
        if cap is not None and len(chosen) + len(new) > cap:
            capped = True
            break
        chosen.update(new)
    return SweepPlan(sorted(chosen), _coverage(kinds, chosen, context), False, capped, cap, seed, context)


def _coverage(kinds: Mapping[str, list[int]], chosen: set[int], longest: int) -> dict[str, dict[str, int]]:
    return {
        kind: {"edges": len(v), "visited": sum(all(x in chosen for x in around([b], longest)) for b in v)}
        for kind, v in kinds.items()
    }


def sweep_lengths(
    longest: int,
    *,
    log_count: int = 64,
    boundaries: Iterable[int] = (),
    every_up_to: int | None = None,
) -> list[int]:
    """Every length of an exhaustive sweep over one kind of layout boundaries."""
    edges = {"layout": list(boundaries)}
    return plan_sweep(longest, edges=edges, log_count=log_count, exhaustive=True, every_up_to=every_up_to).lengths


def cached_sweep(
    path: DecodePath,
    tokens: torch.Tensor,
    lengths: list[int],
    progress: Callable[[str, int, int], None] | None = None,
    *,
    until: Callable[[int, torch.Tensor], bool] | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Logits of token L appended to a cache of tokens[:, :L], for each L in sorted `lengths`:
    [n, B, V] float32, plus the session's proof of exercise. `until(i, row)` is asked after each
    row; when it answers True the sweep stops there (n = i + 1)."""
    task = f"{path.name}: lengths swept"
    import torch

    rows: list[torch.Tensor] = []
    exercise: dict[str, Any] = {}

    def done_with(row: torch.Tensor) -> bool:
        rows.append(row)
        return until is not None and until(len(rows) - 1, row)

    stopped = False
    if lengths and lengths[0] == 0:
        # prefix length 0: the first token appended to an empty cache
        empty = path.new_session(tokens.shape[0])
        stopped = done_with(empty.append(tokens[:, :1])[:, -1].float().cpu())
        exercise = dict(empty.exercise())
    grow = [length for length in lengths if length > 0]
    if grow and not stopped:
        session = path.new_session(tokens.shape[0])
        session.prefill(tokens[:, : grow[0]])
        done = grow[0]
        for length in grow:
            if length > done:
                session.append(tokens[:, done:length])
            done = length + 1
            stop = done_with(session.append(tokens[:, length:done])[:, -1].float().cpu())
            if progress is not None:
                progress(task, len(rows), len(lengths))
            if stop:
                stopped = True
                break
        exercise = dict(session.exercise())
    exercise["schedule"] = "progressive: prefill the first length, then chunk + single-token append per length"
    exercise["sweep_lengths"] = len(rows)
    if stopped and len(rows) < len(lengths):
        exercise["stopped_at_first_failure"] = lengths[len(rows) - 1]
    return torch.stack(rows), exercise
