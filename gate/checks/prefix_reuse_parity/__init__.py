"""prefix-reuse-parity: requests that reuse cached prefixes give what a full recompute gives.

On a fresh worker, each base sequence S (`base_blocks` full blocks plus one token) is served once;
then requests that share prefixes of S of many lengths (0, 1, every block boundary ±1), S itself
and S cut at a block boundary (a full-prompt hit: every block hits, the last token is computed),
S with one token changed mid-way (the equal tail must not be reused), and S's later blocks moved
to offset 0 (the same ids at other positions must not be reused). Every computed prompt row and
every greedy continuation row is compared with one full pass of the reference path.

Proof of reuse: per request, hit blocks and reused tokens against the tokens a correct cache was
entitled to reuse. A run in which nothing was reused fails: parity would prove nothing.

Budget contract (`PrefixBudget`): a store whose declared budget holds `budget_blocks` blocks serves
twice as many distinct blocks; after every request the bytes it holds must be within the budget it
declares, it must show evictions, its latest prompt must still hit, and every output stays exact. A
store without a byte budget leaves this `unproven`, named (a store of the single protocol of earlier
releases offers one only where its `fresh(byte_budget=)` declares the budget asked). Whatever its
API, a store that declares a budget (`cache_state`: `byte_budget`) must hold no more after every
request of the workload.
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
