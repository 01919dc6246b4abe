"""The evidence record of invalidation (its face's EVIDENCE; body.py writes it, view.py reads it)."""

from __future__ import annotations

from pydantic import Field

from gate.core.evidence import StoreEvidence, _Record


class UpdateProbe(_Record):
    """A weight (or adapter) update between two pairs of requests for one prompt."""

    computation_changed_by: float
    """Largest |Δlogit| the update made to the prompt's uncached computation (0: it tests nothing)."""
    hit_before: int
    """Tokens the repeated request before the update reused (0: the miss after it proves nothing)."""
    reused_after: int
    """Tokens the first request after the update reused (must be 0: entries of the old weights)."""
    hit_after: int
    """Tokens the repeat after the update reused (the new entries)."""


class RestoredStore(_Record):
    """A store restarted from the saved cache file."""

    admitted: int
    """Blocks its restore admitted."""
    dropped: dict[str, int]
    """Reason -> blocks its restore refused."""
    consumed: int | None = None
    """Tokens of restored entries it served (on another checkpoint this must be 0)."""
    reused_tokens: int | None = None
    """Tokens of restored entries it reused (on the same checkpoint: proof that restore works)."""


class RestartProbe(_Record):
    """A saved cache restored by a store restarted on another checkpoint, then on the same one."""

    blocks_saved: int
    other_checkpoint: RestoredStore
    same_checkpoint: RestoredStore


class InvalidationEvidence(StoreEvidence):
    """invalidation: no stale entry served after a weight or adapter update or a restart."""

    updates: dict[str, UpdateProbe] = Field(default_factory=dict)
    """`model` / `adapter` -> the update and the requests around it."""
    restart: RestartProbe | None = None
    """The restart, when the store offers snapshots."""


__all__ = ["InvalidationEvidence", "RestartProbe", "RestoredStore", "UpdateProbe"]
