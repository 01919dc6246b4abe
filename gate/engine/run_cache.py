"""A memo the runner scopes to one run, shared by every check and every negative control in it:
what does not depend on the candidate (reference rows, seeded inputs) is computed once.

    rows = ctx.cache.get(("full-rows", ctx.reference, tokens, lengths), lambda: compute(...))

Key parts may be paths (matched by identity, held for the run), tensors (by dtype, shape and content
digest), lists, tuples and plain values. Entries beyond `max_bytes` of tensor storage are evicted
least recently used.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class RunCache:
    """Run-scoped memo: `get(key, compute)` computes once per key."""

    def __init__(self, max_bytes: int = 1 << 30) -> None:
        self.max_bytes = max_bytes
        self._objects: list[Any] = []
        self._entries: OrderedDict[tuple[Any, ...], tuple[Any, int]] = OrderedDict()
        self._bytes = self.hits = self.misses = 0

    def get(self, key: tuple[Any, ...], compute: Callable[[], T]) -> T:
        """The value stored under `key`, computing and storing it on the first request."""
        normal = tuple(self._part(p) for p in key)
        if normal in self._entries:
            self.hits += 1
            self._entries.move_to_end(normal)
            value: T = self._entries[normal][0]
            return value
        self.misses += 1
        value = compute()
        size = _nbytes(value)
        self._entries[normal] = (value, size)
        self._bytes += size
        while self._bytes > self.max_bytes and len(self._entries) > 1:
            _, (_, dropped) = self._entries.popitem(last=False)
            self._bytes -= dropped
        return value

    def stats(self) -> dict[str, int]:
        """Hits, misses, entries and bytes held (for --profile)."""
        return {"hits": self.hits, "misses": self.misses, "entries": len(self._entries), "bytes": self._bytes}

    def _part(self, part: Any) -> Any:
        if part is None or isinstance(part, (str, int, float, bool)):
            return part
        if isinstance(part, (list, tuple)):
            if all(type(p) is int for p in part):  # token ids: the common key, kept as they are
                return tuple(part)
            return tuple(self._part(p) for p in part)
        if isinstance(part, dict):
            return tuple(sorted((str(k), self._part(v)) for k, v in part.items()))
        import torch

        if isinstance(part, torch.Tensor):
            data = part.detach().cpu().contiguous()
            digest = hashlib.sha256(data.view(-1).view(torch.uint8).numpy().tobytes()).hexdigest()
            return ("tensor", str(data.dtype), tuple(data.shape), digest)
        if not any(held is part for held in self._objects):
            self._objects.append(part)
        return ("object", next(index for index, held in enumerate(self._objects) if held is part))


def _nbytes(value: Any) -> int:
    """Tensor storage held by a value (tensors, and tuples, lists or dicts of them)."""
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    nbytes = getattr(value, "nbytes", None)
    return int(nbytes) if isinstance(nbytes, int) else 0
