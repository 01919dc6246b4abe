"""tenant-isolation: tenants (or cache salts) never share entries, and same-tenant reuse happens.

Per prompt: tenant A twice (the repeat must hit), tenant B the same prompt (must reuse nothing) and
again (must hit), an unsalted and a salted request, and a third tenant sharing only a prefix; every
cross-tenant request must match its uncached computation. A second round runs under a weak hash
(`weak_hash_bits`, stores with `PrefixHashing`, else `unproven`); leaks there alone are a design
hazard (gate.core.hazards).
"""

from __future__ import annotations

from pydantic import Field

from gate.checks._shape import lazy_body
from gate.checks.tenant_isolation.evidence import TenantIsolationEvidence
from gate.core.check import Params
from gate.protocols import Capability


class TenantIsolationParams(Params):
    """Prompts and tenants probed."""

    prompts: int = Field(default=2, ge=1, le=16)
    """Distinct prompts, each served to every tenant."""
    prompt_blocks: int = Field(default=3, ge=1, le=64)
    """Full blocks per prompt (its length is prompt_blocks * block_size + 1)."""
    weak_hash_bits: int = Field(default=2, ge=1, le=16)
    """Bits of the hash of a second round (stores with a pluggable hash): other tenants' blocks then
    share buckets, and a store that compares tokens but not the tenant on a hash hit leaks."""
    weak_hash_prompts: int = Field(default=6, ge=1, le=64)
    """Distinct prompts of the weak-hash round."""


CARD, PARAMS, EVIDENCE = "tenant-isolation", TenantIsolationParams, TenantIsolationEvidence
NEEDS = frozenset({Capability.PREFIX_SERVING})
__getattr__ = lazy_body(__name__)


__all__ = ["CARD", "EVIDENCE", "NEEDS", "PARAMS", "TenantIsolationParams"]
