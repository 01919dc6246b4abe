"""quality-slices: judge a bounded-degradation claim slice by slice (release-gate step 7).

Each envelope's slice (evals/<slice>.yaml) is built from the run's seed, sized by the declared
effect and power (gate.quality.stats), scored against the exact reference path
(gate.quality.scoring) and judged on the one-sided bound, never the point estimate.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gate.checks._shape import lazy_body
from gate.checks.quality_slices.evidence import SlicesEvidence
from gate.core.check import Params
from gate.protocols import Capability
from gate.quality.stats import MIN_SAMPLES


class QualitySlicesParams(Params):
    """Parameters of the quality-slices check."""

    samples: int | None = Field(default=None, ge=1)
    """Evaluate exactly this many samples per slice (no power sizing, no top-up). Fewer than a
    slice needs for its declared effect makes its envelopes fail as underpowered."""
    max_samples: int | None = Field(default=None, ge=1)
    """Cap on samples per slice (default: the slice's own max_samples)."""
    batch_size: int = Field(default=8, ge=1)
    """Samples of equal prompt length scored together."""
    worst: int = Field(default=3, ge=0, le=20)
    """Worst samples kept per envelope."""
    log_samples: int = Field(default=500, ge=0, le=20000)
    """Samples per slice kept in the evidence (flipped first) for the dossier's JSONL download."""
    dataset_seed: int | None = None
    """Seed the slices are built from (default: the manifest's subject seed)."""
    space: Literal["auto", "tokens", "text"] = "auto"
    """Token space (ids), text space (the model's tokenizer), or auto: text when the reference
    path exposes a `tokenizer`, tokens otherwise."""
    extra_slices: list[str] = Field(default_factory=list)
    """Slices scored and reported without an envelope (context for the dossier)."""
    min_samples: int = Field(default=MIN_SAMPLES, ge=2)
    """No envelope is judged on fewer samples than this."""
    curtail: bool = True
    """Stop scoring a slice once every envelope on it is a rate that fails however its remaining
    samples turn out (Wilson's bound is monotone in the successes). The verdict is the one the
    whole slice would give; a slice that holds, or has a mean envelope, is always scored whole.
    False: a broken slice is scored whole too, for its complete breakdowns (by distance, by kind)."""
    bootstrap_resamples: int = Field(default=2000, ge=200)
    """Resamples of the paired bootstrap."""
    evals_dir: str | None = None
    """Directory of slice definitions (default: the shipped evals/)."""


CARD, PARAMS, EVIDENCE = "quality-slices", QualitySlicesParams, SlicesEvidence
NEEDS = frozenset({Capability.DECODE_PATH})
__getattr__ = lazy_body(__name__)


__all__ = ["CARD", "EVIDENCE", "NEEDS", "PARAMS", "QualitySlicesParams"]
