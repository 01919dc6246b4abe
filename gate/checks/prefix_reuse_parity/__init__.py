"""prefix-reuse-parity: requests that reuse cached prefixes give what a full recompute gives.

On a fresh worker each base sequence S (`base_blocks` full blocks plus one token) is served, then
prefixes of S of many lengths, S itself, S cut at a block boundary (a full-prompt hit), S changed
mid-way (the equal tail must not be reused) and S's later blocks moved to offset 0. A run that
reused nothing fails. Budget contract (`PrefixBudget`): a store whose budget holds `budget_blocks`
blocks serves twice as many; after every request its bytes held stay within the budget it declares,
it shows evictions and its latest prompt still hits. Without a byte budget that part is `unproven`;
whatever its API, a store that declares a budget (`cache_state`) must hold no more after every request.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gate.checks._shape import lazy_body
from gate.checks.prefix_reuse_parity.evidence import PrefixReuseEvidence
from gate.core.check import Params, PrefixLengths
from gate.protocols import Capability


class PrefixReuseParityParams(Params):
    """Workload of the parity check."""

    compare: Literal["logits", "greedy"] = "logits"
    """logits: every row within tolerance with the same argmax. greedy: the same argmax on every
    row (greedy continuations token for token); |Δlogit| over tolerance is only reported."""
    sequences: int = Field(default=2, ge=1, le=16)
    """Base sequences, each with its own family of requests."""
    base_blocks: int = Field(default=4, ge=2, le=64)
    """Full blocks in each base sequence (its length is base_blocks * block_size + 1)."""
    lengths: PrefixLengths | None = None
    """Shared-prefix lengths; default 0, 1 and every block boundary ±1 up to the base length."""
    suffix_len: int = Field(default=3, ge=1)
    """Fresh tokens after the shared prefix."""
    new_tokens: int | None = Field(default=None, ge=1)
    """Greedy continuation per request; default 4, or the longest of a greedy-tokens claim."""
    byte_budget: int | None = Field(default=None, ge=1)
    """Run on a worker with this cache budget (exercises eviction); default: the candidate's."""
    budget_blocks: int = Field(default=3, ge=1, le=64)
    """Budget contract (stores with a byte budget): a store whose budget holds this many blocks
    serves twice as many distinct blocks; it must stay within the budget by evicting."""
    atol: float | None = Field(default=None, ge=0)
    """Absolute logit tolerance; default: the claim's, else the dtype default."""
    rtol: float | None = Field(default=None, ge=0)
    """Relative logit tolerance; default: the claim's, else the dtype default."""


CARD, PARAMS, EVIDENCE = "prefix-reuse-parity", PrefixReuseParityParams, PrefixReuseEvidence
NEEDS = frozenset({Capability.PREFIX_SERVING})
__getattr__ = lazy_body(__name__)


__all__ = ["CARD", "EVIDENCE", "NEEDS", "PARAMS", "PrefixReuseParityParams"]
