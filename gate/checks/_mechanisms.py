"""The mechanisms an engine reuses cached state through, a workload aimed at each, and what reached them.

engine-concurrent-conversations plans this from the candidate's cache geometry before its seeded
rounds (the reuse of a prefix just past the sliding window restores a checkpoint that must hold the
whole window). A mechanism the geometry rules out is listed with why, never aimed at in silence. What
reached each is counted from the engine's own counters (each reply's reused prompt tokens, and the
server's log at llama.cpp -lv 4). Torch-free: `gate plan` lists the plan before a run.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from gate.core.evidence import MechanismReach
    from gate.protocols import CacheGeometry

MECHANISMS: dict[str, str] = {
    "window-edge": "shared prefixes ending at the sliding window and just past it",
    "checkpoint-interval": "shared prefixes at each context-checkpoint interval",
    "swa-cache-wrap": "prompts past the sliding-window cache's room per slot (window + micro-batch), sent together",
    "host-cache-restore": "finished conversations resumed after more others than slots: restored from the host cache",
    "edited-turn": "edited turns whose common prefix with a cached prompt ends inside it",
}

EDGE_OFFSETS = (0, 1, 2, 4)
"""Shared-prefix lengths at the window: `window + k` for each k."""
CHECKPOINT_LEAD = 4
"""llama.cpp's server checkpoints a sliding-window prompt this many tokens before the prompt's end
(its log: "created context checkpoint ... n_tokens = 88" for a 92-token prompt, b10068 to b11549)."""


@dataclass(frozen=True)
class Step:
    """One aimed request. Its prompt (`how`): fresh, `length` new tokens; share, `length` tokens of
    `source`'s last prompt; resume, the conversation's whole history; edit, its last prompt cut to
    `length` tokens; each but fresh followed by fresh tokens."""

    mechanism: str
    """A key of MECHANISMS, or `pool`: a finished conversation the aimed requests start from."""
    conversation: int
    how: Literal["fresh", "share", "resume", "edit"]
    length: int
    source: int | None = None
    words: str = ""


@dataclass
class MechanismPlan:
    """The aimed rounds (each sent at once), each mechanism's lengths, and those left out with why."""

    rounds: list[list[Step]] = field(default_factory=list)
    aimed: dict[str, list[int]] = field(default_factory=dict)
    not_aimed: dict[str, str] = field(default_factory=dict)

    def requests(self) -> int:
        return sum(len(r) for r in self.rounds)

    def words(self) -> str:
        """One line for `gate plan`: each mechanism aimed at (with its lengths) or left out (with why)."""
        parts = [
            f"edited-turn cutting {lengths[0]} tokens off cached prompts"
            if name == "edited-turn"
            else f"{name} at {', '.join(map(str, lengths))}"
            for name, lengths in self.aimed.items()
        ]
        parts += [f"{name} not reachable: {why}" for name, why in self.not_aimed.items()]
        return "; ".join(parts) if parts else "no reuse mechanism stated"


WRAP_ROUNDS = 5
"""Rounds of long prompts aimed at the sliding-window cache's room per slot (each `width` at once)."""

POOL_BASE = 1000
"""Conversation numbers of the aimed workload start here (the seeded rounds number theirs from 0)."""


def _rounds(steps: list[Step], width: int) -> list[list[Step]]:
    return [steps[i : i + width] for i in range(0, len(steps), width)]


def plan_mechanisms(geometry: CacheGeometry, room: int, width: int, turn_tokens: int) -> MechanismPlan:
    """The aimed workload: `room` tokens for a prompt, `width` requests at once, turns of `turn_tokens`."""
    out = MechanismPlan()
    off = geometry.prefix_caching is False
    if off or (geometry.sliding_window is None and geometry.host_cache_mib is None and geometry.checkpoints is None):
        why = "the candidate states none of its reuse mechanisms (gate reads llama.cpp's and the model's)"
        out.not_aimed = dict.fromkeys(MECHANISMS, "the candidate's prefix cache is off" if off else why)
        return out
    window, ubatch = geometry.sliding_window, geometry.ubatch
    half = max(1, turn_tokens // 2)
    pool_len = min((window + max(EDGE_OFFSETS) + turn_tokens) if window else 2 * turn_tokens, room - half - 1)
    pool = [POOL_BASE + i for i in range((geometry.slots or width) + 2)]
    edges = [] if window is None else [window + k for k in EDGE_OFFSETS if window + k + CHECKPOINT_LEAD <= room - half]
    # the first pooled conversations end CHECKPOINT_LEAD tokens past a window edge, so that llama.cpp's
    # checkpoint of each (CHECKPOINT_LEAD tokens before its prompt's end) sits at the edge
    lengths = [e + CHECKPOINT_LEAD for e in edges] + [pool_len] * max(0, len(pool) - len(edges))
    steps = [
        Step("pool", c, "fresh", length, words="a finished conversation for the pool")
        for c, length in zip(pool, lengths, strict=False)
    ]
    out.rounds += _rounds(steps, width)
    shares: list[Step] = []
    if window is None:
        reason = "the model states no sliding window (full attention)"
        out.not_aimed |= {"window-edge": reason, "checkpoint-interval": reason, "swa-cache-wrap": reason}
    else:
        out.aimed["window-edge"] = edges
        for i, length in enumerate(edges):
            words = f"shares {length} tokens (window + {length - window}) with a finished conversation"
            shares.append(Step("window-edge", POOL_BASE + 100 + i, "share", length, pool[i % len(pool)], words))
        spacing = geometry.checkpoint_spacing
        if not geometry.checkpoints:
            out.not_aimed["checkpoint-interval"] = "the engine keeps no context checkpoints"
        elif spacing is None:
            out.not_aimed["checkpoint-interval"] = "the engine does not state its checkpoint spacing"
        elif spacing + 1 + half > room:
            out.not_aimed["checkpoint-interval"] = (
                f"checkpoints are at least {spacing} tokens apart and the context leaves {room} for a prompt "
                "(the checkpoint at each prompt's end is restored by the window-edge and resumed requests)"
            )
        else:
            marks = [x for x in (spacing, spacing + 1, 2 * spacing, 2 * spacing + 1) if x + half <= room]
            out.aimed["checkpoint-interval"] = marks
            first = Step("pool", POOL_BASE + 200, "fresh", max(marks) + half, words="a long conversation for the pool")
            out.rounds.append([first])
            for i, length in enumerate(marks):
                words = f"shares {length} tokens (checkpoint interval {spacing}) with a long conversation"
                shares.append(
                    Step("checkpoint-interval", POOL_BASE + 201 + i, "share", length, first.conversation, words)
                )
    out.rounds += _rounds(shares, width)
    if not geometry.host_cache_mib:
        out.not_aimed["host-cache-restore"] = (
            "the host-memory prompt cache is off" if geometry.host_cache_mib == 0 else "the engine states no host cache"
        )
    else:
        out.aimed["host-cache-restore"] = sorted(set(lengths))
    resumed = [Step("host-cache-restore", c, "resume", half, words="resumed after the others") for c in pool]
    out.rounds += _rounds(resumed, width)
    edited = [Step("edited-turn", c, "edit", half, words="its last turn edited") for c in pool]
    out.aimed["edited-turn"] = [half]
    out.rounds += _rounds(edited, width)
    if window is not None:  # last: its long prompts push the pool out of a host cache bounded in tokens
        _aim_wrap(out, window, ubatch, room, width)
    return out


def _aim_wrap(out: MechanismPlan, window: int, ubatch: int | None, room: int, width: int) -> None:
    """Rounds of long prompts, each past the sliding-window cache's room per slot, `width` at once."""
    if ubatch is None:
        out.not_aimed["swa-cache-wrap"] = (
            "the engine states no micro-batch, so the sliding-window cache's room is unknown"
        )
        return
    room_per_slot = window + ubatch
    # just past a slot's room, then two and three times it: the longer, the more of the cache wraps under
    # the others (on llama.cpp b11549, 4 slots over a unified KV: 2 of 20 replies wrong at 640 tokens,
    # 5 of 20 at 1152, 8 of 20 at 1664)
    lengths = [x for x in (room_per_slot + window, 2 * room_per_slot, 3 * room_per_slot) if x <= room]
    if not lengths or width < 2:
        why = f"the context leaves {room} tokens for a prompt" if not lengths else "one request in flight at a time"
        out.not_aimed["swa-cache-wrap"] = (
            f"prompts past window + micro-batch ({window + ubatch}) need two at once; {why}"
        )
        return
    out.aimed["swa-cache-wrap"] = lengths
    steps = [
        Step(
            "swa-cache-wrap",
            POOL_BASE + 300 + i,
            "fresh",
            lengths[i % len(lengths)] + (i // len(lengths)),
            words=f"a long prompt past window + micro-batch ({window + ubatch})",
        )
        for i in range(WRAP_ROUNDS * width)
    ]
    out.rounds += _rounds(steps, width)


# -- what the engine says it did ------------------------------------------------------------------

_RESTORED = re.compile(
    r"restored context checkpoint \(pos_min = (-?\d+), pos_max = (-?\d+), n_tokens = (\d+), n_past = (\d+)"
)
_COUNTED = {
    "checkpoint_restores": re.compile(r"restored context checkpoint"),
    "host_cache_loads": re.compile(r"found better prompt"),
    "full_recomputes": re.compile(r"forcing full prompt re-processing"),
    "checkpoints_created": re.compile(r"created context checkpoint"),
}


def log_counters(log: str, window: int | None) -> dict[str, int] | None:
    """What llama.cpp's log says its cache did (None: the log states none of it, e.g. below -lv 4):
    checkpoint restores, host-cache loads, full recomputations, checkpoints created, and restores
    whose sliding-window state lacks part of the window the first recomputed token attends to
    (`pos_min` past `n_past - window + 1`)."""
    if "cached n_tokens" not in log:  # llama.cpp states each prompt's reuse only at -lv 4 (xllamacpp builds)
        return None
    counts = {name: len(pattern.findall(log)) for name, pattern in _COUNTED.items()}
    restored = _RESTORED.findall(log) if window else []
    counts["restores_short_of_window"] = sum(0 < int(lo) > int(past) - (window or 0) + 1 for lo, _, _, past in restored)
    return counts


class AimedRequest(Protocol):
    """What `reach` reads of a request sent (engine-concurrent-conversations' `_Request`)."""

    aim: str | None
    aimed_at: int | None
    round: int
    window: tuple[float, float]

    @property
    def cached(self) -> int | None: ...


def _together(requests: Sequence[AimedRequest]) -> int:
    """Rounds in which two of these requests were in flight at the same time."""
    rounds: dict[int, list[tuple[float, float]]] = {}
    for req in requests:
        rounds.setdefault(req.round, []).append(req.window)
    return sum(any(b[0] < a[1] for a, b in itertools.pairwise(sorted(w))) for w in rounds.values())


def reach(plan: MechanismPlan, sent: Sequence[AimedRequest], counters: dict[str, int] | None) -> list[MechanismReach]:
    """Per mechanism: aimed at or not (with why), and reached or not by the engine's counters."""
    from gate.core.evidence import MechanismReach

    out = []
    for name in MECHANISMS:
        mine = [r for r in sent if r.aim == name and r.aimed_at is not None]
        if name not in plan.aimed:
            why = plan.not_aimed.get(name, "not planned")
            out.append(MechanismReach(mechanism=name, aimed=False, lengths=[], requests=0, reached=False, evidence=why))
            continue
        reached, words = _reached(name, mine, [r for r in mine if r.cached is not None], counters)
        reach = MechanismReach(
            mechanism=name, aimed=True, lengths=plan.aimed[name], requests=len(mine), reached=reached, evidence=words
        )
        out.append(reach)
    return out


def _reached(
    name: str, mine: Sequence[AimedRequest], reported: Sequence[AimedRequest], counters: dict[str, int] | None
) -> tuple[bool, str]:
    if not mine:
        return False, "no request was sent (the run stopped before it)"
    if name == "swa-cache-wrap":
        together = _together(mine)
        return together > 0, f"{together} rounds of long prompts had two or more in flight together"
    if not reported:
        return False, "the candidate reports no cached-token count"
    if name == "edited-turn":
        hit = [r for r in reported if 0 < (r.cached or 0) <= (r.aimed_at or 0)]
        return bool(hit), f"{len(hit)} of {len(mine)} edited turns reused a prefix ending inside the cached prompt"
    if name == "host-cache-restore":
        hit = [r for r in reported if (r.cached or 0) > 0]
        words = f"{len(hit)} of {len(mine)} resumed conversations reused their history"
        if counters is None:
            return bool(hit), words + " (the log does not say from which tier)"
        loads = counters.get("host_cache_loads", 0)
        return bool(hit) and loads > 0, words + f"; the log states {loads} loads from the host prompt cache"
    hit = [r for r in reported if (r.cached or 0) >= (r.aimed_at or 0) - 1]
    words = f"{len(hit)} of {len(mine)} reused the shared prefix (cached tokens >= length - 1)"
    if counters is not None:
        words += f"; the log states {counters.get('checkpoint_restores', 0)} checkpoint restores"
    return bool(hit), words
