"""Name the likely bug class of a failed parity check (background: reading a divergence): one module
per instrument (the length profile, the layer trace, model-level experiments), read into one class
by `diagnose` (a failed sweep over prefix lengths) or `diagnose_reproducer` (schedule-fuzz's failing
schedule). No module here imports torch at import time.
"""

from __future__ import annotations

from gate.checks._diagnosis.classes import BUG_CLASSES, DIAGNOSIS_TABLE, diagnosis_table, explanation
from gate.checks._diagnosis.classifier import classify
from gate.checks._diagnosis.layers import traced_divergence, traced_reference
from gate.checks._diagnosis.reproducer import diagnose_reproducer
from gate.checks._diagnosis.sweep import diagnose

__all__ = [
    "BUG_CLASSES",
    "DIAGNOSIS_TABLE",
    "classify",
    "diagnose",
    "diagnose_reproducer",
    "diagnosis_table",
    "explanation",
    "traced_divergence",
    "traced_reference",
]
