"""The evidence record of schedule-fuzz (its face's EVIDENCE; body.py writes it, view.py reads it)."""

from __future__ import annotations

from typing import Any

from gate.core.evidence import EvidenceRecord, ToleranceRecord, _Record


class ScheduleReproducer(_Record):
    """The minimal failing schedule a search shrank to."""

    schedule: list[str]
    """Its steps in order ("prefill 15", "append 2", "reset", "fork", "switch")."""
    steps: int
    """How many."""
    failure: str
    """What the last step did ("argmax differs at step 4 (row 0, position 16: ...)")."""
    text: str
    """The steps and the failure on one line."""
    snippet: str
    """Python that rebuilds both paths through the adapter registry and replays the schedule."""
    found_after_schedules: int | None
    """Schedules drawn until the first failing one."""
    reproduces_on_replay: bool
    """Whether the schedule failed again when run alone (false: state outlived the sessions)."""


class ScheduleFuzzEvidence(EvidenceRecord):
    """schedule-fuzz: random cache schedules against full passes, a failure shrunk to a reproducer."""

    coverage: dict[str, Any]
    """Schedules, operations by kind, the longest request, layout edges touched per kind."""
    tolerance: ToleranceRecord
    """The tolerance steps were judged with."""
    seed: int
    """The search's seed."""
    reproducer: ScheduleReproducer | None = None
    """The minimal failing schedule, when the search found one."""


__all__ = ["ScheduleFuzzEvidence", "ScheduleReproducer"]
