"""Name the likely bug class of a failed parity check (background: reading a divergence).

One entry, one module per instrument:

* `profile`: the failure profile over prefix lengths (where the deviations sit);
* `layers`: the first diverging layer (LayerTracing), the sweep's chunks replayed one by one where
  the traced step alone shows nothing;
* `experiments`: model-level experiments with sessions alone, for a path with no layer trace and no
  probe, and `model_level`: the classes they name without tracing;
* `classifier`: the class read from a profile and a layer divergence; `classes`: the classes, their
  words and which evidence names each (DIAGNOSIS_TABLE);
* `sweep` (`diagnose`: a failed sweep over prefix lengths) and `reproducer` (`diagnose_reproducer`:
  schedule-fuzz's failing schedule), the two diagnoses the checks ask for.

No module here imports torch at import time: they import it inside the functions that compare
tensors or run an experiment.
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
