"""`mask-oracle`: the mask-oracle fixture (background), run through the candidate's cache, mask and attention.

One head, scalar values [2, 4, 8, 16, 32] at positions 0..4, zero scores: each query returns the
mean of the values it may see. With three positions cached, the chunk of queries at absolute
positions 3 and 4 must return 7.5 and 12.4; a mask restarted at the chunk's origin returns 2 and 3.
The answers are derived independently (exact rationals), not from a model.

The matrix (background: mask oracle, "Do this before moving on"): empty cache, one-token cache, multistep append,
reset between two independent requests; then nonzero scores over several KV heads (expected values
from a float64 softmax written here), and each case again with the unused cache tail poisoned by NaN,
which a correct read never touches. Batch row 1 carries a second request with other values, so a
handle that reads another row's cache is visible too.

Torch-free (gate.checks._shape): the body is `gate.checks.mask_oracle.body`, loaded on first use;
the fixture's helpers (`oracle_cases`, `visible_means`, `ORACLE_RTOL`, `oracle_rtol`, `probe_order`)
resolve through it.
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
__getattr__ = lazy_body(__name__)


__all__ = ["CARD", "EVIDENCE", "NEEDS", "PARAMS", "MaskOracleParams"]
