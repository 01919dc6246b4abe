"""The lengths an engine check plans, torch-free: a check package's face reads them."""

from __future__ import annotations

NEW_TOKENS = 8
"""Tokens an engine check asks for after each prompt."""

PREFIX_BLOCKS = 4
"""Shared system prefixes on an engine that reuses whole blocks are at least this many blocks long."""


def clip_lengths(lengths: list[int], limit: int) -> list[int]:
    """Lengths clipped to `limit`, in order, without repeats."""
    return list(dict.fromkeys(max(1, min(length, limit)) for length in lengths))


def geometry_lengths(block: int | None, limit: int, lengths: list[int]) -> list[int]:
    """Prefix lengths planned on an engine's reuse block (none or 1: the given lengths): the edges of the
    first two blocks ±1, its doublings, then the given lengths beyond the second block, clipped."""
    if block is None or block <= 1:
        return sorted(clip_lengths(lengths, limit))
    planned = [block - 1, block, block + 1, 2 * block - 1, 2 * block, 2 * block + 1]
    multiple = 4 * block
    while multiple <= limit:
        planned.append(multiple)
        multiple *= 2
    planned += [x for x in lengths if x > 2 * block + 1]
    return sorted(clip_lengths(planned, limit))
