"""cache-identity's events: what a run observed, event by event, and what each shows wrong (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gate.checks._prefix_support import WHY, Served, describe_excess
from gate.prefix.cache import IDENTITY_ATTRS, CacheIdentity


@dataclass(frozen=True)
class Repeated:
    """P served again under the base identity: it must hit, or no miss proves anything."""

    served: Served


@dataclass(frozen=True)
class OwnPass:
    """The candidate's uncached pass over P against the reference path (checked once)."""

    differs: bool


@dataclass(frozen=True)
class FieldProbe:
    """P (or P changed in `name`: token-ids, positions) served differing from the base in field `name` alone."""

    name: str
    first: Served
    row: dict[str, Any]
    repeat: Served | None = None
    """A variant's repeat (every field but token-ids and positions): it must hit."""
    options: dict[str, Any] = field(default_factory=dict)
    identities: tuple[CacheIdentity, CacheIdentity] | None = None
    """(base, variant) identity the stores report, where both report one (PrefixIdentityReport)."""


Event = Repeated | OwnPass | FieldProbe


def _short(identity: CacheIdentity) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in identity.as_dict().items() if v is not None)


def _report_contract(probe: FieldProbe) -> str | None:
    """The reported identity against the keying observed when the field was perturbed, or None."""
    if probe.identities is None or probe.repeat is None:
        return None
    base_id, other_id = probe.identities
    changed = sorted(k for k, v in other_id.as_dict().items() if getattr(base_id, k) != v)
    attr = IDENTITY_ATTRS.get(probe.name)
    kept_apart = probe.first.reused == 0 and probe.repeat.reused > 0
    if changed and changed != [attr]:
        return (
            f"{probe.name}: the store reports {changed} changed for a request that differs only in {probe.name} "
            f"(its report must name exactly {attr})"
        )
    if not changed and kept_apart:
        return (
            f"{probe.name}: the store reports the same identity for both requests ({_short(base_id)}) but keys "
            "them apart: its identity report does not say what it keys on"
        )
    return None


def _variant_problems(probe: FieldProbe) -> list[str]:
    """A variant that reused the base's entries, missed when repeated, or reports an identity unlike its keying."""
    name, first, repeat = probe.name, probe.first, probe.repeat
    assert repeat is not None
    problems = []
    if first.reused:
        values = ", ".join(f"{k}={v!r}" for k, v in probe.options.items())
        if probe.identities is not None:
            base_id, other_id = probe.identities
            values = ", ".join(
                f"{k}={v!r} vs {getattr(base_id, k)!r}"
                for k, v in other_id.as_dict().items()
                if getattr(base_id, k) != v
            )
        problems.append(
            f"{name}: a request that differs only in {name} ({values}) reused "
            f"{first.reused} tokens {first.reply.stats.reused_spans} cached under the other value; "
            f"the cache key must include {name} ({WHY.get(name, '')})"
        )
    elif repeat.reused == 0 and repeat.entitled:
        problems.append(f"{name}: the variant request did not hit when repeated, so its miss proves nothing")
    if mismatch := _report_contract(probe):
        problems.append(mismatch)
    return problems


def event_problems(event: Event, bs: int) -> list[str]:
    """What one observed event shows wrong (pure)."""
    if isinstance(event, Repeated):
        if event.served.reused:
            return []
        return [
            f"an identical request reused 0 of {event.served.entitled} reusable tokens: the cache is off "
            "or its keys are unstable, so no miss below proves anything"
        ]
    if isinstance(event, OwnPass):
        differs = "the candidate's uncached pass differs from the reference path: no oracle to judge by"
        return [differs] if event.differs else []
    served = event.first
    if event.name == "token-ids":
        if served.reused != served.entitled or served.reply.stats.reused_spans not in ([(0, bs)], []):
            return [
                f"token-ids: with one token changed at position {bs + bs // 2}, {describe_excess(served)} "
                f"(exactly the first {bs} positions may be reused; {WHY['token-ids']})"
            ]
        return []
    if event.name == "positions":
        if served.excess:
            return [
                f"positions: with P's later blocks moved to offset 0, {describe_excess(served)} ({WHY['positions']})"
            ]
        return []
    return _variant_problems(event)
