"""The mistakes gqa can plant in its own session code (the adapter's `bug` option), torch-free: the
adapter's options read them without importing the model."""

from __future__ import annotations

from typing import Literal, get_args

Bug = Literal[
    "none",
    "chunk-mask-origin",
    "kv-head-map",
    "kv-head-map-decode",
    "sliding-window",
    "reset-position",
    "read-past-end",
]

BUGS: tuple[str, ...] = get_args(Bug)
"""chunk-mask-origin: a chunk's causal mask starts at the chunk, not at the cache offset.
kv-head-map: query head h reads KV head h % n_kv (interleaved) instead of h // group at read time.
kv-head-map-decode: the same interleave, only in the one-token step over a non-empty cache (a
decode kernel of its own; prefill and the first token are right).
sliding-window: every query sees only the WINDOW keys up to its own (full attention is declared).
reset-position: reset() leaves the position counter at 1 while the slots restart at 0.
read-past-end: every read takes one slot past the valid length (the NaN tail)."""
