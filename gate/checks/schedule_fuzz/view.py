"""The dossier's view of schedule-fuzz's evidence: the minimal failing schedule and the Python that replays it."""

from __future__ import annotations

from gate.checks.schedule_fuzz.evidence import ScheduleFuzzEvidence
from gate.report.evidence import EvidenceViews
from gate.report.model import Reproducer


def read(evidence: ScheduleFuzzEvidence, views: EvidenceViews) -> None:
    """The minimal failing schedule: its steps, the failure and the snippet that replays it."""
    found = evidence.reproducer
    if found is None:
        return
    after = found.found_after_schedules
    note = f"found after {after} schedule(s), then shrunk" if after else None
    if not found.reproduces_on_replay:
        note = (note + "; " if note else "") + "it did not fail again when replayed alone (state outlived the sessions)"
    views.reproducer = Reproducer(found.schedule, found.failure, found.snippet, note)
    views.consumed.add("reproducer")
