"""The faces of the built-in checks, for the layers above them: what each check's evidence is and
where it is read, without importing a body, a private helper or torch.

Every built-in check is a package (gate.checks._shape) whose torch-free face states its evidence
record (`EVIDENCE`, defined beside it, or None: shown generically); the package's `view` module reads
that record into the dossier (gate.report.evidence.readers finds it from these faces). The schemas,
the report, the verdict and approvals take the records from here, so adding a check touches only its
package and its entry point.
"""

from __future__ import annotations

from types import ModuleType

from gate.checks._params import PACKAGES
from gate.checks.quality_slices.evidence import SlicesEvidence
from gate.core.evidence import EvidenceRecord

FACES: tuple[ModuleType, ...] = PACKAGES
"""Every built-in check's face (its package, never its body), found by listing gate/checks/."""

EVIDENCE: dict[str, type[EvidenceRecord]] = {face.CARD: face.EVIDENCE for face in FACES if face.EVIDENCE is not None}
"""Check name -> the record its evidence validates into, as its face states it; a check whose face
states None (and any plugin check) is shown generically."""

ENVELOPE_CHECKS = frozenset(name for name, record in EVIDENCE.items() if record is SlicesEvidence)
"""The checks that judge a bounded-degradation claim's envelopes (its slices and bounds): only when
one of them held may a verdict say that every envelope held."""

__all__ = ["ENVELOPE_CHECKS", "EVIDENCE", "FACES"]
