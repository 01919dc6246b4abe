"""The faces of the built-in checks, for the layers above them: each check's evidence record as its
torch-free face states it (gate.checks._shape), without importing a body, a private helper or torch.
The schemas, the report, the verdict and approvals take the records from here, so adding a check
touches only its package and its entry point.
"""

from __future__ import annotations

from types import ModuleType

from gate.checks._params import PACKAGES
from gate.checks.quality_slices.evidence import SlicesEvidence
from gate.core.evidence import EvidenceRecord

FACES: tuple[ModuleType, ...] = PACKAGES

EVIDENCE: dict[str, type[EvidenceRecord]] = {face.CARD: face.EVIDENCE for face in FACES if face.EVIDENCE is not None}
"""Check name -> the record its evidence validates into; a check without one is shown generically."""

ENVELOPE_CHECKS = frozenset(name for name, record in EVIDENCE.items() if record is SlicesEvidence)
"""The checks that judge a bounded-degradation claim's envelopes (its slices and bounds): only when
one of them held may a verdict say that every envelope held."""

__all__ = ["ENVELOPE_CHECKS", "EVIDENCE", "FACES"]
