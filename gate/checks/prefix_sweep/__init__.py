"""`prefix-sweep`: cached-versus-full logits for the appended token over many prefix lengths.

Reference logits for every length come from ONE full pass over the longest sequence (row L is the
answer for prefix L), computed once per run (ctx.cache) and shared with every control; the
candidate grows one session (gate.checks._sweep). `SEED_LENGTHS` live here so that planning the
lengths (gate.checks._sweep.plan_sweep) needs no torch.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gate.checks._shape import lazy_body
from gate.checks.prefix_sweep.evidence import SweepEvidence
from gate.core.check import Params, PrefixLengths
from gate.protocols import Capability

SEED_LENGTHS = (0, 1, 2, 16, 64, 200, 2000, 8000)
"""the standard prefix lengths (background: parity); gate.checks._sweep plans from them."""


class PrefixSweepParams(Params):
    """Parameters of the prefix-sweep check."""

    lengths: PrefixLengths = Field(default_factory=lambda: list(SEED_LENGTHS))
    """Prefix lengths always visited (background: parity), clipped to the longest prefix."""
    log_spaced: int = Field(default=64, ge=0, le=4096)
    """How many log-spaced lengths from 1 to the longest prefix to add."""
    boundaries: bool = True
    """Visit the layout boundaries ±1 the candidate reports (block, chunk, window, page edges)."""
    first_edges: int = Field(default=8, ge=0)
    """Edges of each kind always visited ±1, from the shortest (short-prefix bugs live there);
    the last edge of each kind within reach is always visited too."""
    sampled_edges: int = Field(default=24, ge=0)
    """Further edges ±1 drawn (seeded by the run's seed) from every kind's remaining edges."""
    max_lengths: int | None = Field(default=256, ge=1)
    """Most lengths in all; the standard lengths and the first and last edges are kept beyond it.
    None: no cap."""
    exhaustive: bool = False
    """Every boundary ±1 of every kind up to `longest`, no cap, no reach (nightly jobs)."""
    reach: int | None = Field(default=8191, ge=1)
    """Longest prefix a bounded sweep visits (each length costs a causal pass up to it); the
    standard lengths and the first edge of every kind are visited even beyond it, and the coverage
    counts the edges left out. None: up to `longest`."""
    every_length_up_to: int | None = Field(default=None, ge=1)
    """Also visit every length 1..N (dense sweep)."""
    longest: int | None = Field(default=None, ge=1)
    """Longest prefix; default: the smaller model's max_len - 1. Setting it scopes the claim: the
    standard lengths beyond it are not wanted (the result records the scope)."""
    batch: int = Field(default=2, ge=1, le=64)
    """Independent random sequences, run as one batch."""
    compare: Literal["full", "cached"] = "full"
    """full: against one full pass (argmax + tolerance). cached: also bit-identical to the
    reference path running the same cached schedule (the only honest `exact`)."""
    atol: float | None = Field(default=None, ge=0)
    """Absolute logit tolerance (default: the claim's, else dtype-aware)."""
    rtol: float | None = Field(default=None, ge=0)
    """Relative logit tolerance (default: the claim's, else dtype-aware)."""
    evidence_rows: int = Field(default=96, ge=8, le=1024)
    """Most per-length rows kept in the evidence (failures first, then evenly spaced)."""


CARD, PARAMS, EVIDENCE = "prefix-sweep", PrefixSweepParams, SweepEvidence
NEEDS = frozenset({Capability.DECODE_PATH})
OPTIONAL = {
    Capability.LAYOUT_BOUNDARIES: "the sweep visits the layout's block edges ±1",
    Capability.LAYER_TRACING: "a failure is named at the layer and read where it starts (the diagnosis)",
}
__getattr__ = lazy_body(__name__)


__all__ = ["CARD", "EVIDENCE", "NEEDS", "OPTIONAL", "PARAMS", "SEED_LENGTHS", "PrefixSweepParams"]
