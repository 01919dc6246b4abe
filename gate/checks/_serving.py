"""Replaying a serving scenario through a path's sessions, on a measured clock (phase-performance);
or through an engine's streaming HTTP API on the wall clock (`replay_engine`).

The server is an iteration-level scheduler over the `Session` protocol: it admits conversations as
they arrive (at most `max_concurrent` at once; later ones queue), and each iteration runs, for every
ready request, its turn's prefill or one decode step. Each conversation keeps one session, so its K/V
stays live between turns, as a chat server's does.

Time is a virtual clock advanced by measured work (every step timed); when nothing is ready the clock
jumps to the next arrival instead of sleeping. Queueing behind other requests is therefore real, idle
gaps cost no wall time, and two paths replayed back to back see the same arrivals.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import torch

from gate.core.clocks import LiveBytes, RequestTiming, ServingTrace
from gate.core.scenario import Conversation
from gate.protocols import DecodePath, EngineCompletion, EngineServer, Session

T = TypeVar("T")

PRESSURE_KEYS = (
    "evicted_tokens",
    "evicted_blocks",
    "offloaded_blocks",
    "preemptions",
    "requests_queued",
    "recomputed_tokens",
)
"""Pressure actions a session's exercise() may report; summed over conversations."""


class Timer:
    """Times one call: perf_counter on a CPU, CUDA events (then a synchronise) on a GPU."""

    def __init__(self, device: str) -> None:
        self.cuda = str(device).startswith("cuda")
        self.clock: Literal["cuda-events", "perf_counter"] = "cuda-events" if self.cuda else "perf_counter"

    def __call__(self, fn: Callable[[], T]) -> tuple[T, float]:
        if self.cuda:
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            out = fn()
            end.record()
            end.synchronize()
            return out, float(start.elapsed_time(end)) / 1000.0
        began = time.perf_counter()
        out = fn()
        return out, time.perf_counter() - began


@dataclass
class _Live:
    conv: Conversation
    session: Session
    turn: int = 0
    arrival: float = 0.0
    prefilling: bool = True
    remaining: int = 0
    token: torch.Tensor | None = None
    timing: dict[str, Any] = field(default_factory=dict)


@torch.no_grad()
def replay(
    path: DecodePath, convs: list[Conversation], *, device: str, max_concurrent: int
) -> tuple[ServingTrace, dict[str, Any]]:
    """Serve every conversation through `path`; the trace and the last finished session's exercise."""
    timer = Timer(device)
    if cuda := timer.cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        resting = torch.cuda.memory_allocated()
    waiting = sorted(convs, key=lambda c: (c.start_s, c.index))
    live: list[_Live] = []
    done: list[RequestTiming] = []
    memory: list[LiveBytes] = []
    queued: set[int] = set()
    pressure: dict[str, int] = {}
    last_exercise: dict[str, Any] = {}
    now = waiting[0].start_s if waiting else 0.0
    start = now
    while waiting or live:
        while waiting and waiting[0].start_s <= now and len(live) < max_concurrent:
            conv = waiting.pop(0)
            live.append(_Live(conv, path.new_session(1), arrival=conv.start_s))
        queued.update(c.index for c in waiting if c.start_s <= now)
        ready = [item for item in live if item.arrival <= now]
        if not ready:
            upcoming = [item.arrival for item in live]
            if waiting and len(live) < max_concurrent:
                upcoming.append(waiting[0].start_s)
            now = max(now, min(upcoming))
            continue
        for item in ready:
            turn = item.conv.turns[item.turn]
            session = item.session
            if item.prefilling:
                ids = ([*item.conv.system, *turn.prompt]) if item.turn == 0 else turn.prompt
                if item.token is not None:  # the previous reply's last token enters the cache now
                    ids = [int(item.token.item()), *ids]
                tokens = torch.tensor([ids], dtype=torch.long, device=device)
                step = session.prefill if item.turn == 0 else session.append
                token, seconds = timer(lambda s=step, t=tokens: s(t)[:, -1].argmax(-1, keepdim=True))  # type: ignore[misc]
                item.timing = {
                    "conversation": item.conv.index,
                    "turn": item.turn,
                    "arrival_s": item.arrival - start,
                    "admitted_s": now - start,
                    "prompt_tokens": len(ids),
                    "token_s": [],
                }
                item.prefilling, item.remaining = False, turn.output_tokens
            else:
                token, seconds = timer(lambda s=session, t=item.token: s.append(t)[:, -1].argmax(-1, keepdim=True))  # type: ignore[misc]
            now += seconds
            item.token = token
            item.timing["token_s"].append(now - start)
            item.remaining -= 1
            if item.remaining == 0:
                done.append(RequestTiming(**item.timing))
                item.turn += 1
                if item.turn < len(item.conv.turns):
                    item.prefilling = True
                    item.arrival = now + item.conv.turns[item.turn].think_s
                else:
                    last_exercise = dict(session.exercise())
                    for key in PRESSURE_KEYS:
                        if isinstance(last_exercise.get(key), int):
                            pressure[key] = pressure.get(key, 0) + int(last_exercise[key])
                    live.remove(item)
        records = [item.session.exercise() for item in live]
        memory.append(
            LiveBytes(
                t_s=now - start,
                live_bytes=sum(int(r.get("cache_bytes") or 0) for r in records),
                tokens=sum(int(r.get("cache_len") or 0) for r in records),
            )
        )
    pressure["conversations_queued"] = len(queued)
    peak = None
    if cuda:
        torch.cuda.synchronize()
        peak = int(torch.cuda.max_memory_allocated() - resting)
    done.sort(key=lambda r: (r.conversation, r.turn))
    return ServingTrace(
        path=path.name,
        clock=timer.clock,
        requests=done,
        memory=memory,
        makespan_s=max(now - start, 1e-9),
        peak_device_bytes=peak,
        pressure=pressure,
    ), last_exercise


def replay_engine(
    server: EngineServer,
    convs: list[Conversation],
    *,
    name: str,
    max_concurrent: int,
    top_k: int,
    replies: list[tuple[int, int, list[int], EngineCompletion]] | None = None,
) -> tuple[ServingTrace, dict[str, Any]]:
    """Serve every conversation through an engine's streaming HTTP API, on the wall clock.

    An engine is not ours to step, so time is real: `max_concurrent` client threads take the
    conversations in arrival order (later ones queue on the client side, as behind a gateway), each
    streaming every turn with the whole history as the prompt. Each token is stamped when its event
    arrives. The engine reports no live KV bytes; the prompt tokens it served from its cache are summed
    instead. With `replies`, every turn's (conversation, turn, prompt, completion) is appended to it.
    """
    start = time.perf_counter()

    def now() -> float:
        return time.perf_counter() - start

    def serve(conv: Conversation) -> tuple[list[RequestTiming], int, bool]:
        time.sleep(max(0.0, conv.start_s - now()))
        arrival = conv.start_s
        timings: list[RequestTiming] = []
        cached = 0
        queued = now() - arrival > 0.001  # every client thread was busy when it arrived
        history: list[int] = []
        for number, turn in enumerate(conv.turns):
            if number:
                time.sleep(turn.think_s)
                arrival = now()
            prompt = [*conv.system, *turn.prompt] if number == 0 else [*history, *turn.prompt]
            sent = now()
            streamed = server.stream(prompt, turn.output_tokens, top_k)
            reused = streamed.completion.cached_tokens or 0
            cached += reused
            timings.append(
                RequestTiming(
                    conversation=conv.index,
                    turn=number,
                    arrival_s=arrival,
                    admitted_s=sent,
                    prompt_tokens=len(prompt) - reused,
                    token_s=[sent + t for t in streamed.token_s],
                )
            )
            history = [*prompt, *streamed.completion.tokens]
            if replies is not None:
                replies.append((conv.index, number, prompt, streamed.completion))
        return timings, cached, queued

    ordered = sorted(convs, key=lambda c: (c.start_s, c.index))  # the pool takes them in this order
    with ThreadPoolExecutor(max_workers=max(1, min(max_concurrent, len(convs)))) as pool:
        served = list(pool.map(serve, ordered))
    done = sorted((t for timings, _, _ in served for t in timings), key=lambda r: (r.conversation, r.turn))
    last = max((t for r in done for t in r.token_s), default=now())
    cached = sum(c for _, c, _ in served)
    pressure = {"conversations_queued": sum(1 for _, _, q in served if q)}
    trace = ServingTrace(path=name, clock="wall", requests=done, makespan_s=max(last, 1e-9), pressure=pressure)
    return trace, {"streamed_requests": len(done), "cached_prompt_tokens": cached}
