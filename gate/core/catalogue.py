"""The check catalogue (`checks/*.yaml`): what each check proves and what it is blind to.

Cards are data, read without importing any check module, so `gate checks` and `gate plan` stay
instant; a test keeps the cards and the registered built-in checks in step.
"""

from __future__ import annotations

from functools import cache

from pydantic import Field

from gate._util.resources import data_dir
from gate._util.yamlio import parse_model, read_yaml
from gate.core.manifest import Record


class CheckCard(Record):
    """One check's card."""

    name: str
    """Registered check name."""
    implementation: str
    """The code behind it, as its entry point names it (`module:function`)."""
    step: int = Field(ge=1, le=8)
    """Release-gate step (background: the release gate) the check serves."""
    proves: str
    """What a pass shows."""
    blind_to: str
    """What a pass does not show: the honest limit of the evidence."""
    catches: list[str] = Field(default_factory=list)
    """Bug classes the check is built to detect."""
    needs: list[str] = Field(default_factory=list)
    """Path capabilities (gate/protocols/ protocols) the check uses."""
    without: str = ""
    """What stands in, and what the check's result is, on a path that lacks what `needs` names
    (empty: the check is unproven there as its policy rule says)."""


@cache
def cards() -> dict[str, CheckCard]:
    """Every card under checks/, by check name."""
    found: list[CheckCard] = [
        parse_model(read_yaml(p), CheckCard) for p in sorted(data_dir("check-cards").glob("*.yaml"))
    ]
    return {card.name: card for card in found}
