"""Cache schedules behind `schedule-fuzz`: run one through a path's sessions, judge every step.

A schedule is a list of operations on live sessions of one path:

    ("prefill", n)  the active session is empty: its first n tokens in one call
    ("append", n)   n more tokens against the active session's cache (n = 1: a decode step)
    ("feed", n)     prefill when the active session is empty, else append (what the search draws)
    ("reset",)      the active session forgets its request; the next tokens start a new one
    ("fork",)       a second live session prefilled with the active request's tokens so far (a
                    shared prefix), which becomes active; at most two sessions live at once
    ("switch",)     the other live session becomes active (a new, empty request when only one is
                    live: two unrelated requests interleaved)

Every request's tokens come from a seeded stream (a fork continues its parent's prefix with a
stream of its own), and every step's logits [B, n, V] are compared with one full pass of the
reference over the same tokens (tie-aware argmax; a |Δ| beyond the deny allowance under a claim
that bounds logits). Running a schedule returns the steps it resolved ("prefill 15", "append 2",
...), the first failing step, and what it covered (operation kinds, layout edges touched).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from gate.checks._compare import Tolerance, compare_rows, random_tokens
from gate.protocols import DecodePath, Session

Op = tuple[Any, ...]


@dataclass
class Live:
    """A live session, its request's token stream and how much of it the session holds."""

    session: Session
    stream: torch.Tensor
    """[B, max_tokens] the request's tokens (fed from the front)."""
    key: tuple[Any, ...]
    """Where the stream comes from (memo key for the reference's rows)."""
    length: int = 0


@dataclass
class ScheduleResult:
    """One schedule's run."""

    steps: list[Op] = field(default_factory=list)
    """The operations as resolved (feed -> prefill or append; no-ops left out)."""
    failure: dict[str, Any] | None = None
    """The first failing step (1-based `step`, `row`, `position`, tokens, |Δ|), None if all held."""
    kinds: Counter[str] = field(default_factory=Counter)
    """Operations run, by kind (prefill, decode, chunk, reset, fork, switch)."""
    edges: dict[str, set[int]] = field(default_factory=dict)
    """Per layout-edge kind, the edges a step ended at (±1) or crossed."""
    longest: int = 0
    logits: list[torch.Tensor] = field(default_factory=list)
    exercise: dict[str, Any] = field(default_factory=dict)


class ScheduleRunner:
    """Runs schedules on `candidate` against `reference` full passes; memoises the reference rows
    across schedules (the streams are seeded, so they repeat)."""

    def __init__(
        self,
        reference: DecodePath,
        candidate: DecodePath,
        *,
        vocab: int,
        batch: int,
        max_tokens: int,
        seed: int,
        tol: Tolerance,
        bounded: bool,
        edges: dict[str, tuple[int, ...]] | None = None,
    ) -> None:
        self.reference, self.candidate = reference, candidate
        self.vocab, self.batch, self.max_tokens, self.seed = vocab, batch, max_tokens, seed
        self.tol, self.bounded = tol, bounded
        self.edges = {k: tuple(e for e in v if e <= max_tokens + 1) for k, v in (edges or {}).items()}
        self._rows: dict[tuple[Any, ...], torch.Tensor] = {}

    def _stream(self, request: int) -> torch.Tensor:
        return random_tokens(self.vocab, self.batch, self.max_tokens, self.seed * 1009 + request)

    def _reference_rows(self, live: Live, end: int) -> torch.Tensor:
        key = (live.key, end)
        if key not in self._rows:
            self._rows[key] = self.reference.full_logits(live.stream[:, :end]).float().cpu()
        return self._rows[key]

    def run(self, ops: Sequence[Op], *, keep_logits: bool = False) -> ScheduleResult:
        result = ScheduleResult()
        requests = 0
        lives = [Live(self.candidate.new_session(self.batch), self._stream(0), ("r", 0))]
        active = 0
        for op in ops:
            kind = op[0]
            live = lives[active]
            if kind in ("feed", "prefill", "append"):
                n = min(int(op[1]), self.max_tokens - live.length)
                if n < 1:
                    continue
                start = live.length
                call = "prefill" if start == 0 else "append"
                tokens = live.stream[:, start : start + n]
                out = (live.session.prefill if call == "prefill" else live.session.append)(tokens).float().cpu()
                live.length += n
                result.steps.append((call, n))
                result.kinds[call if call == "prefill" else ("decode" if n == 1 else "chunk")] += 1
                self._touch(result, start, start + n)
            elif kind == "reset":
                live.session.reset()
                requests += 1
                lives[active] = Live(live.session, self._stream(requests), ("r", requests))
                result.steps.append(("reset",))
                result.kinds["reset"] += 1
                continue
            elif kind == "fork":
                requests += 1
                prefix = live.stream[:, : live.length]
                fresh = self._stream(requests)[:, : self.max_tokens - live.length]
                child = Live(
                    self.candidate.new_session(self.batch),
                    torch.cat([prefix, fresh], dim=1),
                    (live.key, live.length, requests),
                )
                lives = [lives[active], child]
                active = 1
                result.steps.append(("fork",))
                result.kinds["fork"] += 1
                if live.length == 0:
                    continue
                live, start, n = child, 0, prefix.shape[1]
                out = child.session.prefill(prefix).float().cpu()
                child.length = n
            elif kind == "switch":
                if len(lives) < 2:
                    requests += 1
                    lives.append(Live(self.candidate.new_session(self.batch), self._stream(requests), ("r", requests)))
                active = 1 - active
                result.steps.append(("switch",))
                result.kinds["switch"] += 1
                continue
            else:
                raise ValueError(f"unknown schedule operation {op!r}")
            result.longest = max(result.longest, live.length)
            if keep_logits:
                result.logits.append(out.flatten())
            ref = self._reference_rows(live, start + n)[:, start : start + n]
            failure = self._judge(ref, out, start)
            if failure is not None:
                result.failure = {"step": len(result.steps), **failure}
                break
        result.exercise = {**lives[active].session.exercise(), "live_sessions": len(lives)}
        return result

    def _judge(self, ref: torch.Tensor, out: torch.Tensor, start: int) -> dict[str, Any] | None:
        cmp = compare_rows(ref, out, self.tol)  # [B, n]
        bad = cmp.failed | (cmp.beyond_allowance if self.bounded else torch.zeros_like(cmp.failed))
        if not bool(bad.any()):
            return None
        row, col = (int(x) for x in bad.nonzero()[0])
        return {
            "row": row,
            "position": start + col,
            "argmax_flip": not bool(cmp.agree[row, col]),
            "reference_token": int(cmp.ref_top[row, col]),
            "candidate_token": int(cmp.cand_top[row, col]),
            "max_abs_delta": float(cmp.max_abs_delta[row, col]),
            "tolerance": float(cmp.tolerance[row, col]),
        }

    def _touch(self, result: ScheduleResult, start: int, end: int) -> None:
        for kind, edges in self.edges.items():
            hit = {e for e in edges if abs(end - e) <= 1 or start < e < end}
            if hit:
                result.edges.setdefault(kind, set()).update(hit)


def describe(steps: Sequence[Op]) -> str:
    """e.g. `prefill 15, append 2, reset, prefill 1`."""
    return ", ".join(" ".join(str(x) for x in step) for step in steps)


def failure_words(failure: dict[str, Any]) -> str:
    """e.g. `argmax differs at step 4 (row 0, position 15: reference 12, candidate 40)`."""
    what = "argmax differs" if failure["argmax_flip"] else f"|Δlogit| {failure['max_abs_delta']:.3g} beyond tolerance"
    return (
        f"{what} at step {failure['step']} (row {failure['row']}, position {failure['position']}: "
        f"reference {failure['reference_token']}, candidate {failure['candidate_token']})"
    )


def tighten(ops: list[Op], fails: Callable[[list[Op]], bool], budget: int = 64) -> list[Op]:
    """Shorter failing schedules that hypothesis' shrinker does not try: two adjacent feeds as one
    (`prefill 1, append 16` -> `prefill 17`), or one operation left out; greedy, at most `budget`
    runs. `fails(ops)` runs a schedule and says whether it still fails."""
    changed = True
    while changed and budget > 0:
        changed = False
        merged = [
            [*ops[:i], ("feed", int(ops[i][1]) + int(ops[i + 1][1])), *ops[i + 2 :]]
            for i in range(len(ops) - 1)
            if ops[i][0] == ops[i + 1][0] == "feed"
        ]
        dropped = [[*ops[:i], *ops[i + 1 :]] for i in range(len(ops)) if len(ops) > 1]
        for candidate in [*merged, *dropped]:
            budget -= 1
            if fails(candidate):
                ops, changed = candidate, True
                break
            if budget <= 0:
                break
    return ops
