"""schedule-fuzz's search: hypothesis draws schedules of operations within a time budget; `Search` runs
each, counts what it covered, keeps every failing schedule and shrinks the first."""

from __future__ import annotations

import random
import time
from collections import Counter
from functools import partial
from typing import Any

from hypothesis import HealthCheck, Phase, find, settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky, NoSuchExample

from gate.checks._schedule import Op, ScheduleResult, ScheduleRunner, tighten
from gate.checks.schedule_fuzz import ScheduleFuzzParams
from gate.core.check import CheckContext

CONTROL_FIRST_LOOK = 10
"""Schedules a control draws from each search before spending the rest of the budget on either; the
time budget never ends a control's search before these first looks are drawn, so whether a control
shows its fault there does not depend on the machine's load."""


class _BudgetSpent(BaseException):
    """The time budget is spent before any failure (hypothesis lets a BaseException through at once)."""


class _FirstFailure(BaseException):
    """A control's first failing schedule: it neither shrinks nor lets hypothesis replay the example."""

    def __init__(self, ops: list[Op]) -> None:
        self.ops = ops


KINDS = ("feed", "feed", "feed", "decode", "decode", "reset", "fork", "switch")
"""What an operation is drawn as: feeds three times and decode steps twice as often as the rest, so
requests grow long enough to cross block edges and windows between resets and forks. Shrinking
moves towards the front (a feed)."""

CONTINUOUS_KINDS = ("join", "join", "leave", "step")
"""The second search, where the path batches continuously: joins (each one forward with the running
requests' decode steps) twice as often as leaves and decode steps of the whole batch."""


def _strategy(params: ScheduleFuzzParams, kinds: tuple[str, ...]) -> Any:
    """The schedules one search draws: lists of operations, each a kind from `kinds` then its size.
    Each kind's strategy is built once, so hypothesis does not analyse a fresh one at every draw."""

    def build(kind: str) -> Any:
        if kind in ("feed", "join"):
            return st.tuples(st.just(kind), st.integers(1, params.max_chunk))
        if kind == "leave":
            return st.tuples(st.just("leave"), st.integers(0, params.slots - 1))
        return st.just(("feed", 1) if kind == "decode" else (kind,))

    ops = {kind: build(kind) for kind in dict.fromkeys(kinds)}
    return st.lists(st.sampled_from(kinds).flatmap(ops.__getitem__), min_size=1, max_size=params.max_steps)


def _budget(examples: int) -> Any:
    """A search's hypothesis settings: `examples` schedules, no example database, no deadline."""
    return settings(
        max_examples=examples,
        database=None,
        deadline=None,
        phases=[Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )


class Search:
    """The searches' state: schedules run until the first failure are drawn (the coverage), later ones shrinks."""

    def __init__(self, runner: ScheduleRunner, params: ScheduleFuzzParams, control: bool) -> None:
        self.runner, self.params, self.control = runner, params, control
        self.kinds: Counter[str] = Counter()
        self.touched: dict[str, set[int]] = {}
        self.stats: dict[str, Any] = {
            "schedules": 0,
            "operations": 0,
            "longest": 0,
            "first_failure_at": None,
            "shrinks": 0,
        }
        self.failing: dict[tuple[Op, ...], ScheduleResult] = {}
        self.started = time.perf_counter()
        self.floor = 0
        """Schedules drawn before the time budget may end the search (a control's first looks)."""

    def fails(self, ops: list[Op]) -> bool:
        """Whether schedule `ops` fails (a control's first failure, or a spent budget, ends the search)."""
        stats = self.stats
        searching = stats["first_failure_at"] is None
        over = time.perf_counter() - self.started > self.params.max_seconds
        if searching and over and stats["schedules"] >= self.floor:
            stats["out_of_time"] = True
            raise _BudgetSpent  # draw nothing more (a failure found in time still shrinks)
        result = self.runner.run(ops)
        if searching:
            stats["schedules"] += 1
            stats["operations"] += len(result.steps)
            stats["longest"] = max(stats["longest"], result.longest)
            self.kinds.update(result.kinds)
            for kind, hit in result.edges.items():
                self.touched.setdefault(kind, set()).update(hit)
            if result.failure is not None:
                stats["first_failure_at"] = stats["schedules"]
        else:
            stats["shrinks"] += 1
        if result.failure is not None:
            self.failing[tuple(ops)] = result
            if self.control:
                raise _FirstFailure(list(ops))
        return result.failure is not None

    def passes(self, searches: list[tuple[str, ...]], seed: int) -> list[tuple[tuple[str, ...], int, int]]:
        """(alphabet, schedules, seed) per pass. A control first looks briefly at each search, then runs
        each in full: a fault only the second search reaches is found without drawing all of the first."""
        examples = self.params.max_examples
        if self.control:
            self.floor = min(examples, CONTROL_FIRST_LOOK) * len(searches)
        if self.control and len(searches) > 1 and examples > CONTROL_FIRST_LOOK:
            return [(a, CONTROL_FIRST_LOOK, seed) for a in searches] + [(a, examples, seed) for a in searches]
        return [(alphabet, examples, seed) for alphabet in searches]

    def minimal(self, ctx: CheckContext, searches: list[tuple[str, ...]]) -> list[Op] | None:
        """The first failing schedule a pass finds, shrunk by hypothesis and `tighten` (a control's: as found)."""
        found: list[Op] | None = None
        p = self.params
        for alphabet, examples, seed in self.passes(searches, ctx.seed):
            # a strategy is built once per run cache for the params that shape it
            key = ("schedule-fuzz strategy", p.max_chunk, p.slots, p.max_steps, alphabet)
            strategy = ctx.cache.get(key, partial(_strategy, p, alphabet))
            try:
                found = find(strategy, self.fails, settings=_budget(examples), random=random.Random(seed))
            except NoSuchExample:
                continue
            except _BudgetSpent:
                break
            except _FirstFailure as first:
                found = first.ops
            except Flaky:
                # the path's state outlived its sessions (a cross-request store), so a schedule did not
                # fail the same way twice: keep the shortest schedule that failed, unshrunk
                shortest = sorted(self.failing.keys(), key=len)
                found = list(shortest[0]) if shortest else None
            break
        return tighten(list(found), self.fails) if found is not None and not self.control else found


def alphabets(params: ScheduleFuzzParams, continuous: bool) -> list[tuple[str, ...]]:
    """The sessions' search, then (where the path batches continuously) the running batch's."""
    searches = [KINDS if params.forks else tuple(k for k in KINDS if k not in ("fork", "switch"))]
    if continuous and params.joins:
        searches.append(CONTINUOUS_KINDS)
    return searches
