"""What each built-in check needs of the candidate, as its package declares it (torch-free).

`gate plan` reads them against what the candidate's adapter states it offers; `gate run` against
what the built candidate offers (`path_offers`), never starting a check whose needs it lacks
(gate.engine.capabilities); `gate checks --capabilities` prints the table docs/plugins.md carries.
"""

from __future__ import annotations

from typing import NamedTuple

from gate.checks._params import PACKAGES
from gate.protocols import Capability, capabilities


class Declared(NamedTuple):
    needs: frozenset[Capability]
    """What the candidate must offer for the check to run."""
    optional: dict[Capability, str]
    """What the check uses when offered -> what it adds."""
    instead: tuple[frozenset[Capability], ...] = ()
    """Other sets of capabilities that let it run just as well (an engine's API instead of sessions)."""
    covered_by: dict[str, str] = {}  # noqa: RUF012 - read only, never mutated
    """For a candidate that lacks its needs: the checks of the same plan that observe its rule at model
    level -> what each observes (the runner then holds it unproven-not-applicable while they hold)."""

    def missing(self, offers: frozenset[Capability]) -> frozenset[Capability]:
        """What the candidate lacks to run the check: nothing when `needs` or one set `instead` is offered."""
        return frozenset() if any(n <= offers for n in (self.needs, *self.instead)) else self.needs - offers


DECLARED: dict[str, Declared] = {
    package.CARD: Declared(
        frozenset(package.NEEDS),
        dict(vars(package).get("OPTIONAL", {})),
        tuple(vars(package).get("NEEDS_INSTEAD", ())),
        dict(vars(package).get("COVERED_BY", {})),
    )
    for package in PACKAGES
}
"""Check name -> its declared needs (read from the package's own names: `getattr` would import its body)."""

OFFER_NAMES: dict[str, Capability] = {"sessions": Capability.DECODE_PATH, "PrefixCaching": Capability.PREFIX_SERVING}
"""The words adapters' `PathCapabilities.offers` use for a capability other than its protocol's name."""


def offered_capabilities(offers: list[str]) -> frozenset[Capability]:
    """The capabilities a list of `PathCapabilities.offers` names (unknown words are left out)."""
    known = [w for w in offers if w in OFFER_NAMES or w in Capability.__members__.values()]
    return frozenset(OFFER_NAMES[w] if w in OFFER_NAMES else Capability(w) for w in known)


ABSENT: dict[Capability, str] = {Capability.PREFIX_SERVING: "cross-request-cache"}
"""A missing capability as a policy rule's `not_applicable.without` names it."""


def path_offers(path: object) -> frozenset[Capability]:
    """What a built path offers the checks (`PrefixServing` too for a store of the old single protocol)."""
    from gate.checks._prefix_store import LEGACY_METHODS  # torch-free; only a run reads a built path

    offers = capabilities(path)
    if Capability.PREFIX_SERVING not in offers and all(callable(getattr(path, m, None)) for m in LEGACY_METHODS):
        offers |= {Capability.PREFIX_SERVING}
    return offers


def capability_table() -> str:
    """docs/plugins.md's table: each capability -> the checks it lets run, and what it adds to others."""
    rows = ["| capability | lets these checks run | adds, when offered |", "|---|---|---|"]
    for capability in Capability:
        enables = sorted(
            name + ("" if capability in d.needs else " (instead)")
            for name, d in DECLARED.items()
            if capability in d.needs or any(capability in needs for needs in d.instead)
        )
        adds = sorted(f"{name}: {d.optional[capability]}" for name, d in DECLARED.items() if capability in d.optional)
        if enables or adds:
            rows.append(f"| `{capability.value}` | {', '.join(enables) or '-'} | {'; '.join(adds) or '-'} |")
    return "\n".join(rows) + "\n"
