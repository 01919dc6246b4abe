"""What each built-in check needs of the candidate, as its package declares it (torch-free).

Every check package states `NEEDS` (the gate.protocols.Capability the candidate must offer for the
check to run at all) and may state `NEEDS_INSTEAD` (other sets that let it run just as well) and
`OPTIONAL` (capability -> what offering it adds). `gate plan`
reads them against what the candidate's adapter states it offers (`PathCapabilities.offers`), and
`gate checks --capabilities` prints the table docs/plugins.md carries (a test keeps them equal).
"""

from __future__ import annotations

from typing import NamedTuple

from gate.checks._params import PACKAGES
from gate.protocols import Capability


class Declared(NamedTuple):
    """One check's declaration."""

    needs: frozenset[Capability]
    """What the candidate must offer for the check to run."""
    optional: dict[Capability, str]
    """What the check uses when offered -> what it adds."""
    instead: tuple[frozenset[Capability], ...] = ()
    """Other sets of capabilities that let it run just as well (an engine's API instead of sessions)."""

    def missing(self, offers: frozenset[Capability]) -> frozenset[Capability]:
        """What the candidate lacks to run the check: nothing when `needs` or one set `instead` is offered."""
        for needs in (self.needs, *self.instead):
            if needs <= offers:
                return frozenset()
        return self.needs - offers


DECLARED: dict[str, Declared] = {
    package.CARD: Declared(
        frozenset(package.NEEDS), dict(vars(package).get("OPTIONAL", {})), tuple(vars(package).get("NEEDS_INSTEAD", ()))
    )
    for package in PACKAGES
}
"""Check name -> its declared needs, for every built-in check (read from the package's own names:
`getattr` would reach for its body, which imports torch)."""

OFFER_NAMES: dict[str, Capability] = {"sessions": Capability.DECODE_PATH, "PrefixCaching": Capability.PREFIX_SERVING}
"""The words adapters' `PathCapabilities.offers` use for a capability other than its protocol's name."""


def offered_capabilities(offers: list[str]) -> frozenset[Capability]:
    """The capabilities a list of `PathCapabilities.offers` names (unknown words are left out)."""
    found = set()
    for word in offers:
        if word in OFFER_NAMES:
            found.add(OFFER_NAMES[word])
        elif word in Capability.__members__.values():
            found.add(Capability(word))
    return frozenset(found)


def capability_table() -> str:
    """docs/plugins.md's table: each capability a built-in check declares -> the checks it lets run,
    and what it adds to the checks that use it when offered."""
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


__all__ = ["DECLARED", "OFFER_NAMES", "Declared", "capability_table", "offered_capabilities"]
