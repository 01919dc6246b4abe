"""The evicting cache's planted faults, by name (torch-free: the reference adapter's options validate them)."""

from __future__ import annotations

EVICT_FAULTS: dict[str, str] = {
    "evict-drop-sink": "the first attention sink is scored lowest instead of protected: position 0 is evicted",
    "evict-window-off-by-one": "the recent window protects window - 1 tokens: its oldest token is evicted",
    "evict-rank-sign": "the press ranks by its score with the sign flipped: the lowest-ranked tokens are kept",
    "evict-budget-off-by-one": "every layer and KV head keeps one token more than its budget",
    "evict-positions-renumbered": "after an eviction the kept tokens' positions are renumbered 0..K-1",
}
"""Planted bugs of the evicting cache's choice of what to keep (the `evicting` path's own faults;
each breaks exactly one invariant gate.checks.evict_invariants judges)."""
