"""batch-invariance's settings: one request's rows computed alone, in an equal-length batch, padded on
either side and joining a running batch; the requests and settings a candidate gets (`prepare`)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from gate.checks._compare import random_tokens
from gate.checks._probe import probe_order as shared_probe_order
from gate.checks.batch_invariance import BatchInvarianceParams
from gate.checks.greedy_parity.body import greedy
from gate.core.check import CheckContext
from gate.protocols import BatchedSession, BatchedSessions, ContinuousBatching, DecodePath, Session, offered


@dataclass(frozen=True)
class Request:
    """One request: its prompt, the reference's greedy continuation and its rows alone."""

    prompt: torch.Tensor
    """[L] int64."""
    continuation: torch.Tensor
    """[S] the reference's greedy tokens."""
    rows: torch.Tensor
    """[L + S - 1, V] the reference's logits over prompt + continuation[:-1] (row j predicts token j + 1)."""


def reference_request(reference: DecodePath, prompt: torch.Tensor, steps: int) -> Request:
    """The reference's greedy continuation of `prompt` and its rows, from one full pass."""
    tokens, _, _ = greedy(reference, prompt[None], steps)
    full = torch.cat([prompt, tokens[0, :-1].to(prompt.device)])
    rows = reference.full_logits(full[None])[0].float().cpu()
    return Request(prompt, tokens[0].cpu(), rows)


Stop = Callable[[dict[int, torch.Tensor]], bool]
"""Told the rows each request of a setting got from one forward ({request's slot: new rows}); True
stops the setting there (a control's early stop, `_Watch`)."""


def alone(
    candidate: DecodePath, request: Request, stop: Stop | None = None, rows_wanted: int | None = None
) -> tuple[torch.Tensor, dict[str, Any]]:
    """The candidate's rows for one request in a session of its own ([L + S - 1, V]), and its exercise."""
    session = candidate.new_session(1)
    rows = [session.prefill(request.prompt[None])[0].float().cpu()]
    done = stop is not None and stop({0: rows[0]})
    for token in request.continuation[:-1]:
        if done or (rows_wanted is not None and sum(r.shape[0] for r in rows) >= rows_wanted):
            break
        rows.append(session.append(token.view(1, 1))[0].float().cpu())
        done = stop is not None and stop({0: rows[-1]})
    return torch.cat(rows), dict(session.exercise())


def _lockstep(
    session: Session | BatchedSession,
    requests: list[Request],
    first: list[torch.Tensor],
    stop: Stop | None,
    decode: bool,
) -> list[torch.Tensor]:
    """Each request's rows: its prefill rows `first`, then (with `decode`) the continuations fed in lockstep."""
    rows = [[r] for r in first]
    done = stop is not None and stop(dict(enumerate(first)))
    for step in range(requests[0].continuation.shape[0] - 1 if decode else 0):
        if done:
            break
        tokens = torch.stack([r.continuation[step] for r in requests])[:, None]
        out = session.append(tokens).float().cpu()
        for i, row in enumerate(rows):
            row.append(out[i])
        done = stop is not None and stop(dict(enumerate(out)))
    return [torch.cat(r) for r in rows]


def equal_batch(
    candidate: DecodePath, requests: list[Request], stop: Stop | None = None
) -> tuple[list[torch.Tensor], dict[str, Any]]:
    """Requests of one length in one session: each one's rows, and the session's exercise."""
    session = candidate.new_session(len(requests))
    first = list(session.prefill(torch.stack([r.prompt for r in requests])).float().cpu())
    rows = _lockstep(session, requests, first, stop, decode=True)
    return rows, {**session.exercise(), "rows": len(requests)}


def padded_batch(
    candidate: BatchedSessions, requests: list[Request], side: str, stop: Stop | None = None
) -> tuple[list[torch.Tensor], dict[str, Any]]:
    """Requests of different lengths padded on `side` into one batch (only a left-padded one decodes)."""
    session = candidate.new_batched_session(len(requests), side)
    first = [r.float().cpu() for r in session.prefill([r.prompt for r in requests])]
    return _lockstep(session, requests, first, stop, decode=side == "left"), dict(session.exercise())


def _pieces(request: Request, early: bool, steps: int) -> list[torch.Tensor]:
    """What a request feeds a running batch, forward by forward: its prompt (in two chunks past 8
    tokens), then its continuation token by token (`early`: only half of it)."""
    prompt, length = request.prompt, int(request.prompt.shape[0])
    cut = (length + 1) // 2 if length > 8 else length
    pieces = [prompt[:cut], prompt[cut:]] if cut < length else [prompt]
    decode = (steps - 1) // 2 if early else steps - 1
    return pieces + [request.continuation[i : i + 1] for i in range(decode)]


def continuous_batch(
    candidate: ContinuousBatching, requests: list[Request], stop: Stop | None = None
) -> tuple[list[torch.Tensor], dict[str, Any]]:
    """Requests join one running batch one per forward (each prefill beside the others' decode steps)
    and leave when fed, the first early; with one slot fewer than requests, the last reuses a slot."""
    steps = int(requests[0].continuation.shape[0])
    slots = max(1, len(requests) - 1)
    session = candidate.new_continuous_session(slots)
    waiting = list(range(len(requests)))
    pending = {i: _pieces(r, i == 0, steps) for i, r in enumerate(requests)}
    rows: dict[int, list[torch.Tensor]] = {i: [] for i in range(len(requests))}
    live: dict[int, int] = {}  # handle -> request index
    while waiting or live:
        if waiting and len(live) < slots:
            live[session.join()] = waiting.pop(0)
        out = session.step({h: pending[i].pop(0) for h, i in live.items()})
        fed = {live[h]: logits.float().cpu() for h, logits in out.items()}
        for i, logits in fed.items():
            rows[i].append(logits)
        if stop is not None and stop(fed):
            break
        for h in [h for h, i in live.items() if not pending[i]]:
            session.leave(h)
            del live[h]
    empty = requests[0].rows[:0]
    return [torch.cat(rows[i]) if rows[i] else empty for i in range(len(requests))], dict(session.exercise())


SETTING_WORDS: dict[str, tuple[str, ...]] = {
    "none": ("equal", "length", "crosstalk"),
    "left": ("left", "padded", "padding"),
    "right": ("right", "padded", "padding"),
    "continuous": ("continuous", "join", "leave", "slot"),
}
"""What each kind of setting is called, for `probe_order` (none: the equal-length batch)."""


def probe_order(sides: list[str], control: str | None) -> list[int]:
    """Indices into `sides` in the order a run walks them (gate.checks._probe): a control walks first
    the settings its fault's name points at (pad-attended: the padded batches)."""
    return shared_probe_order(sides, control, _names_setting)


def _names_setting(fault: str, side: str) -> bool:
    words = [w for w in fault.split("-") if len(w) >= 3]
    return any(v.startswith(w) or w.startswith(v) for w in words for v in SETTING_WORDS.get(side, ()))


Setting = tuple[str, str, list[int]]
"""A batched setting: its name, its kind (none: equal-length, left, right, continuous) and the
order its requests take their rows (or join) in."""


@dataclass(frozen=True)
class Plan:
    """What the run sends: the requests (`mixed` lengths and the `same` one), the batched settings, and
    what the candidate offers."""

    lengths: list[int]
    equal: int
    sides: tuple[str, ...]
    batched: BatchedSessions | None
    continuous: ContinuousBatching | None
    mixed: list[Request]
    same: list[Request]
    settings: list[Setting]

    @property
    def everyone(self) -> list[Request]:
        """Every request, by its index: the mixed lengths first, then the equal-length ones."""
        return self.mixed + self.same

    def group(self, k: int) -> tuple[list[Request], int]:
        """Setting k's requests in its row order, and the index of its first request in `everyone`."""
        _, side, rows_order = self.settings[k]
        if side == "none":
            return [self.same[i] for i in rows_order], len(self.mixed)
        return [self.mixed[i] for i in rows_order], 0


def _settings(sides: tuple[str, ...], continuous: bool, mixed: int, same: int, seed: int) -> list[Setting]:
    """The batched settings: equal-length, then each padding side the path offers (left twice, the
    second in a shuffled row order), then the continuous batch joined in the shuffled order."""
    order = list(range(mixed))
    shuffled = order[1:] + order[:1]
    random.Random(seed).shuffle(shuffled)
    settings: list[Setting] = [("equal-length", "none", list(range(same)))]
    for side in ("left", "right"):
        if side in sides:
            settings.append((f"{side}-padded", side, order))
            if side == "left" and len(order) > 1:
                settings.append(("left-padded, rows reordered", side, shuffled))
    if continuous:
        settings.append(("continuous", "continuous", shuffled))
    return settings


def prepare(ctx: CheckContext, params: BatchInvarianceParams) -> Plan:
    """The requests (the reference's answers cached per prompt) and the settings this candidate offers."""
    reference, candidate = ctx.reference, ctx.candidate
    vocab = min(reference.vocab_size, candidate.vocab_size)
    limit = min(reference.max_len, candidate.max_len) - params.steps
    lengths = sorted({max(1, min(n, limit)) for n in params.lengths})
    batched, continuous = offered(candidate, BatchedSessions), offered(candidate, ContinuousBatching)
    sides = tuple(batched.padding_sides) if batched is not None else ()
    equal = max(1, min(params.equal_length, limit))

    def request(length: int, index: int) -> Request:
        prompt = random_tokens(vocab, 1, length, ctx.seed * 7919 + 31 * index + length)[0]
        return ctx.cache.get(
            ("batch-invariance", reference, prompt, params.steps),
            partial(reference_request, reference, prompt, params.steps),
        )

    mixed = [request(n, i) for i, n in enumerate(lengths)] if sides or continuous is not None else []
    same = [request(equal, 100 + i) for i in range(max(len(lengths), 2))]
    settings = _settings(sides, continuous is not None, len(mixed), len(same), ctx.seed)
    return Plan(lengths, equal, sides, batched, continuous, mixed, same, settings)
