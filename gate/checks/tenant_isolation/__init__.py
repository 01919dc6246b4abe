"""tenant-isolation: tenants (or cache salts) never share entries, and same-tenant reuse happens.

Computational sameness does not grant permission to share state (background: isolation). On the
store, for each prompt: tenant A serves it twice (the second must hit: same-tenant reuse is the
control that makes the rest meaningful; a cache that is off would pass "no reuse" otherwise), then
tenant B serves the identical prompt (must reuse nothing) and repeats it (must hit its own entry),
then an unsalted request and a salted one, and a third tenant shares only a prefix. Every
cross-tenant request must also match its own uncached computation.

A second round runs under a weak hash (`weak_hash_bits`) where the store's hash can be replaced
(`PrefixHashing`): the tenants' blocks then share buckets, so a store that relies on the hash to keep
tenants apart (comparing tokens on a hit, not the tenant) leaks. Without a pluggable hash that round
is `unproven`, named. Leaks under the weak hash alone, the store's own hash clean, are a design hazard
and named so (gate.core.hazards): `weak-hash-across-tenants`, or `weak-hash-across-contexts` where
blocks of other tokens were served too, with the configuration that avoids it.
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
