"""The bookkeeping every continuously batched session shares (gate.protocols.ContinuousSession):
request handles, free slots, what each live request has been fed, and the counts its exercise
reports. The forward itself, and where K/V live, belong to each adapter. Imports no torch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class SlotTable:
    """Handles and slots of one running batch. A join takes the lowest free slot, so a slot a
    request left is reused before a fresh one; `plan` checks one forward's feeds and counts it."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError("a running batch needs at least one slot")
        self.slots = slots
        self.free = list(range(slots))
        self.slot_of: dict[int, int] = {}
        self.seen: dict[int, int] = {}
        """Tokens each live request has been fed."""
        self.used: set[int] = set()
        self.handles = 0
        self.counts: dict[str, int] = dict.fromkeys(
            ("forwards", "mixed_forwards", "joins", "leaves", "slots_reused", "max_rows", "cached_steps"), 0
        )
        self.counts.update(tokens_processed=0, pad_tokens=0)

    def join(self) -> tuple[int, int]:
        """A new request: its handle and the slot it takes. ValueError when every slot is taken."""
        if not self.free:
            raise ValueError(f"every one of the session's {self.slots} slots is taken")
        slot = min(self.free)
        self.free.remove(slot)
        self.counts["slots_reused"] += slot in self.used
        self.used.add(slot)
        handle, self.handles = self.handles, self.handles + 1
        self.slot_of[handle], self.seen[handle] = slot, 0
        self.counts["joins"] += 1
        return handle, slot

    def leave(self, handle: int) -> int:
        """The request ends: the slot it frees."""
        if handle not in self.slot_of:
            raise ValueError(f"request {handle} is not in the running batch")
        slot = self.slot_of.pop(handle)
        del self.seen[handle]
        self.free.append(slot)
        self.counts["leaves"] += 1
        return slot

    def plan(self, feeds: Mapping[int, int]) -> list[int]:
        """One forward feeding `feeds` (handle -> tokens): the slots in the feeds' order, after
        checking them; counts the forward (a decode step is one token of a request already fed)."""
        if not feeds:
            raise ValueError("a step feeds at least one request")
        unknown = [h for h in feeds if h not in self.slot_of]
        if unknown:
            raise ValueError(f"requests {unknown} are not in the running batch")
        if min(feeds.values()) < 1:
            raise ValueError("every fed request brings at least one token")
        decode = [self.seen[h] > 0 and n == 1 for h, n in feeds.items()]
        width = max(feeds.values())
        self.counts["forwards"] += 1
        self.counts["mixed_forwards"] += any(decode) and not all(decode)
        self.counts["max_rows"] = max(self.counts["max_rows"], len(feeds))
        self.counts["cached_steps"] += any(self.seen[h] > 0 for h in feeds)
        self.counts["tokens_processed"] += sum(feeds.values())
        self.counts["pad_tokens"] += sum(width - n for n in feeds.values())
        for h, n in feeds.items():
            self.seen[h] += n
        return [self.slot_of[h] for h in feeds]

    def exercise(self) -> dict[str, Any]:
        return {**self.counts, "slots": self.slots, "live_requests": len(self.slot_of)}
