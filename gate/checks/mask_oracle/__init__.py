"""`mask-oracle`: the mask-oracle fixture (background), run through the candidate's cache, mask and attention.

One head, zero scores: each query returns the mean of the values it may see, derived independently
(exact rationals), not from a model. The grouped-query case's expected values come from a float64
softmax written here; every case runs again with the unused cache tail poisoned by NaN, and batch
row 1 carries a second request with other values, so a handle that reads another row's cache shows.
The body (with `oracle_cases`, `visible_means`, `ORACLE_RTOL`, `oracle_rtol`, `probe_order`) loads on
first use (gate.checks._shape).
"""

from __future__ import annotations

from pydantic import Field

from gate.checks._shape import lazy_body
from gate.core.check import Params
from gate.protocols import Capability


class MaskOracleParams(Params):
    rtol: float | None = Field(default=None, gt=0)
    """Relative tolerance on the oracle's outputs (they are exact rationals, so only the probe's own
    rounding moves them). None: by the dtype the probe computes in (gate.checks.mask_oracle.ORACLE_RTOL:
    1e-5 in float32, a few units in the last place in bfloat16 and float16)."""
    heads: int = Field(default=4, ge=1)
    """Query heads of the nonzero-score variant."""
    kv_heads: int = Field(default=2, ge=1)
    """KV heads of the nonzero-score variant (grouped-query attention when fewer than heads)."""
    head_dim: int = Field(default=8, ge=1)
    """Head dimension of the nonzero-score variant."""
    poison_tail: bool = True
    """Repeat every case with NaN written into the allocated-but-unused cache slots."""


CARD, PARAMS, EVIDENCE = "mask-oracle", MaskOracleParams, None
NEEDS = frozenset({Capability.ATTENTION_PROBE})
COVERED_BY = {
    "prefix-sweep": "the whole model's cached logits against a full pass at every swept prefix length: a mask "
    "from the chunk origin, a window where full attention is declared and a read into the unused tail "
    "(non-finite or shifted logits) change them",
    "schedule-fuzz": "random schedules of prefills and appends of random sizes, resets and forks, every step "
    "against a full pass: a multi-token chunk over a cache (the mask origin of chunked prefill), a reset "
    "that keeps state and reads past the valid length change them",
}
"""What observes mask-oracle's rule when the candidate offers no AttentionProbe (the check's card
says so): model-level, through projections and positions, so weaker than the oracle's exact
answers. The runner finds the check not applicable before it starts and keeps it
unproven-not-applicable (a warning) while both pass with power (gate.checks._needs)."""
__getattr__ = lazy_body(__name__)


__all__ = ["CARD", "COVERED_BY", "EVIDENCE", "NEEDS", "PARAMS", "MaskOracleParams"]
