"""Cache schedules behind `schedule-fuzz`: run one through a path's sessions, judge every step.

A schedule is a list of operations on live sessions of one path:

    ("prefill", n)  the active session is empty: its first n tokens in one call
    ("append", n)   n more tokens against the active session's cache (n = 1: a decode step)
    ("feed", n)     prefill when the active session is empty, else append (what the search draws)
    ("reset",)      the active session forgets its request; the next tokens start a new one
    ("fork",)       a second live session prefilled with the active request's tokens so far becomes active
    ("switch",)     the other live session (a new, empty request when only one is live) becomes active
    ("join", n)     a new request joins the running batch (ContinuousBatching) with its first n tokens,
                    in ONE forward with a decode token of every request already running
    ("step",)       one forward of the running batch: a decode token for every request in it
    ("leave", k)    the k-th request of the running batch (k modulo how many run) leaves, freeing its slot

Every request's tokens come from a seeded stream, and every step's logits are compared with one full
pass of the reference over the same tokens (tie-aware argmax; a |Δ| beyond the deny allowance under a
claim that bounds logits).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from gate.checks._compare import DENY_ALLOWANCE, Tolerance, compare_rows, random_tokens
from gate.core.check import Memo
from gate.protocols import ContinuousBatching, ContinuousSession, DecodePath, Session, offered, subject_call

Op = tuple[Any, ...]


@dataclass
class Live:
    """A live session, its request's token stream [B, max_tokens] (fed from the front), the stream's
    memo key for the reference's rows, and how much of it the session holds."""

    session: Session
    stream: torch.Tensor
    key: tuple[Any, ...]
    length: int = 0


@dataclass
class Joined:
    """A request of the running batch (a Live with a handle there and a stream [1, max_tokens]);
    `order`: how many requests joined before it (the reproducer's `request N`)."""

    handle: int
    stream: torch.Tensor
    key: tuple[Any, ...]
    order: int
    length: int = 0


@dataclass(frozen=True)
class Oracle:
    """The reference's rows [B, end, V] over a request's first tokens, each row's top token and
    DENY_ALLOWANCE x its tolerance [B, end]: what a step's quick judgement reads."""

    rows: torch.Tensor
    top: torch.Tensor
    limit: torch.Tensor


@dataclass
class ScheduleResult:
    steps: list[Op] = field(default_factory=list)
    """The operations as resolved (feed -> prefill or append; no-ops left out)."""
    failure: dict[str, Any] | None = None
    """The first failing step (1-based `step`, `row`, `position`, tokens, |Δ|), None if all held."""
    kinds: Counter[str] = field(default_factory=Counter)
    """Operations run, by kind (prefill, decode and chunk for feeds; `mixed forward`, `slot reuse`)."""
    edges: dict[str, set[int]] = field(default_factory=dict)
    """Per layout-edge kind, the edges a step ended at (±1) or crossed."""
    longest: int = 0
    logits: list[torch.Tensor] = field(default_factory=list)
    exercise: dict[str, Any] = field(default_factory=dict)


class ScheduleRunner:
    """Runs schedules on `candidate` against `reference` full passes, memoising the reference rows."""

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
        slots: int = 3,
        memo: Memo | None = None,
    ) -> None:
        self.reference, self.candidate = reference, candidate
        self.slots = slots
        self.continuous = offered(candidate, ContinuousBatching)  # None: joins and leaves are skipped
        self.vocab, self.batch, self.max_tokens, self.seed = vocab, batch, max_tokens, seed
        self.tol, self.bounded = tol, bounded
        self.edges = {k: tuple(e for e in v if e <= max_tokens + 1) for k, v in (edges or {}).items()}
        self._rows: dict[tuple[Any, ...], Oracle] = {}
        self._streams: dict[int, torch.Tensor] = {}
        self.memo = memo
        """The run's cache: a control's fault is in the candidate only, so every runner of the run with
        the same seed and shape computes each of the reference's rows once."""

    def _stream(self, request: int) -> torch.Tensor:
        if request not in self._streams:
            self._streams[request] = random_tokens(self.vocab, self.batch, self.max_tokens, self.seed * 1009 + request)
        return self._streams[request]

    def _reference_rows(self, live: Live | Joined, end: int) -> Oracle:
        key = (live.key, end)
        if key not in self._rows:
            tokens = live.stream[:, :end]
            if self.memo is None:
                self._rows[key] = self._oracle(tokens)
            else:  # the stream is a function of (seed, batch, max_tokens, vocab, key)
                shape = (self.seed, self.batch, self.max_tokens, self.vocab)
                self._rows[key] = self.memo.get(
                    ("schedule-fuzz reference rows", self.reference, shape, self.tol.atol, self.tol.rtol, key),
                    lambda: self._oracle(tokens),
                )
        return self._rows[key]

    def _oracle(self, tokens: torch.Tensor) -> Oracle:
        rows = self.reference.full_logits(tokens).float().cpu()
        return Oracle(rows, rows.argmax(-1), DENY_ALLOWANCE * self.tol.row(rows))

    def run(self, ops: Sequence[Op], *, keep_logits: bool = False) -> ScheduleResult:
        result = ScheduleResult()

        def did(*step: Any) -> None:
            result.steps.append(step)
            result.kinds[step[0]] += 1

        requests = 0
        lives = [Live(self.candidate.new_session(self.batch), self._stream(0), ("r", 0))]
        active = 0
        running: ContinuousSession | None = None
        joined: list[Joined] = []
        for op in ops:
            kind = op[0]
            live = lives[active]
            if kind in ("join", "step", "leave"):
                if self.continuous is None:
                    continue
                if running is None:
                    running = self.continuous.new_continuous_session(self.slots)
                if kind == "leave":
                    if not joined:
                        continue
                    running.leave(joined.pop(int(op[1]) % len(joined)).handle)
                    did("leave", int(op[1]) % (len(joined) + 1))
                    continue
                before = len(joined)
                failure = self._continuous(result, running, joined, op, requests + 1, keep_logits)
                requests += len(joined) - before  # a join that found a slot starts a request
                if failure is not None:
                    result.failure = {"step": len(result.steps), **failure}
                    break
                continue
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
                did("reset")
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
                dropped, lives = lives, [lives[active], child]
                if len(dropped) > 1:  # the other live session goes, with its cache (the subject's work)
                    with subject_call(f"{type(self.candidate).__name__} session released", sessions=1):
                        del dropped
                active = 1
                did("fork")
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
                did("switch")
                continue
            else:
                raise ValueError(f"unknown schedule operation {op!r}")
            result.longest = max(result.longest, live.length)
            if keep_logits:
                result.logits.append(out.flatten())
            failure = self._judge(self._reference_rows(live, start + n), out, start)
            if failure is not None:
                result.failure = {"step": len(result.steps), **failure}
                break
        result.exercise = {**lives[active].session.exercise(), "live_sessions": len(lives)}
        if running is not None:
            result.exercise["continuous"] = running.exercise()
            result.kinds["slot reuse"] += int(result.exercise["continuous"].get("slots_reused", 0))
        # the schedule's sessions (and the running batch) go with their caches: freeing what the
        # subject allocated in its own region (a static cache of max_len slots: about 0.4 ms a session
        # on the tiny model) is the subject's work, not gate's (so is a session a fork replaces)
        with subject_call(f"{type(self.candidate).__name__} sessions released", sessions=len(lives)):
            lives.clear()
            live = child = None  # type: ignore[assignment]
            running = None
        return result

    def _continuous(
        self,
        result: ScheduleResult,
        running: ContinuousSession,
        joined: list[Joined],
        op: Op,
        request: int,
        keep_logits: bool,
    ) -> dict[str, Any] | None:
        """One forward of the running batch (`join n` or `step`), every fed request judged; the failure, if any."""
        feeds: dict[int, tuple[Joined, int]] = {}
        if op[0] == "join":
            if len(joined) >= self.slots:
                return None
            fresh = Joined(running.join(), self._stream(request)[:1], ("j", request), order=result.kinds["join"])
            joined.append(fresh)
            feeds[fresh.handle] = (fresh, min(int(op[1]), self.max_tokens))
        for member in joined:
            if member.handle not in feeds and member.length < self.max_tokens:
                feeds[member.handle] = (member, 1)
        if not feeds:
            return None
        out = running.step({h: m.stream[0, m.length : m.length + n] for h, (m, n) in feeds.items()})
        result.steps.append(("join", feeds[joined[-1].handle][1]) if op[0] == "join" else ("step",))
        result.kinds[op[0]] += 1
        if op[0] == "join" and len(feeds) > 1:
            result.kinds["mixed forward"] += 1
        failure = None
        for h, (member, n) in feeds.items():
            start = member.length
            member.length += n
            result.longest = max(result.longest, member.length)
            self._touch(result, start, start + n)
            logits = out[h].float().cpu()[None]
            if keep_logits:
                result.logits.append(logits.flatten())
            found = self._judge(self._reference_rows(member, start + n), logits, start)
            if found is not None and failure is None:
                failure = {**found, "row": 0, "request": member.order}
        return failure

    def _judge(self, oracle: Oracle, out: torch.Tensor, start: int) -> dict[str, Any] | None:
        """The first failing row of a step `out` [B, n, V] (positions start..start+n-1), or None. The full
        comparison runs only where a row might fail: not where every row picks the reference's token and
        (under a claim that bounds logits) every |Δ| is within the deny allowance, or (without) none is NaN."""
        end = start + out.shape[1]
        ref, top = oracle.rows[:, start:end], oracle.top[:, start:end]
        agree = top == out.argmax(-1)
        if self.bounded:
            held = agree & ((ref - out).abs().amax(-1) <= oracle.limit[:, start:end])
        else:
            held = agree & ~out.isnan().any(-1)
        if bool(held.all()):
            return None
        return self._first_bad(ref, out, start)

    def _first_bad(self, ref: torch.Tensor, out: torch.Tensor, start: int) -> dict[str, Any] | None:
        """The first failing row of a step by the full comparison."""
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
    where = f"request {failure['request']}" if "request" in failure else f"row {failure['row']}"
    return (
        f"{what} at step {failure['step']} ({where}, position {failure['position']}: "
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
