"""Design hazards of a prefix store: choices that are safe only while an assumption holds, named.

A check that breaks the assumption on purpose (a weak injected hash, a restart onto other weights under
the same label) names the hazard (`HazardFinding` in its diagnosis) with the configuration that avoids
it. The vocabulary is closed (`HAZARDS`). Torch-free: the report and the CLI read it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import ValidationError

from gate.core.manifest import Record

HazardName = Literal["weak-hash-across-tenants", "weak-hash-across-contexts", "restart-admits-same-revision"]
"""The closed vocabulary of design hazards."""


class Hazard(Record):
    """One design hazard: what the store does, the assumption it rests on, and what avoids it."""

    name: HazardName
    design: str
    """What a store with this hazard does, in words."""
    assumes: str
    """The assumption under which the design is safe (and which the check breaks on purpose)."""
    avoid: str
    """The configuration that avoids the hazard."""
    shown_by: tuple[str, ...]
    """The checks that show it."""


HAZARDS: dict[HazardName, Hazard] = {
    h.name: h
    for h in (
        Hazard(
            name="weak-hash-across-tenants",
            design="a hash hit is served after comparing the tokens (and parent) but not the stored identity: "
            "the digest alone keeps tenants, salts and adapters apart",
            assumes="two identities' blocks never share a bucket of the store's hash",
            avoid="compare the stored identity (tenant or salt, adapter, weights) on every hash hit, not only the "
            "tokens",
            shown_by=("tenant-isolation", "hash-collision"),
        ),
        Hazard(
            name="weak-hash-across-contexts",
            design="a hash hit is served without comparing the stored key material at all: the digest alone "
            "stands for the tokens, their position and the identity",
            assumes="no two blocks ever share a bucket of the store's hash",
            avoid="compare the stored key material (parent, tokens, identity) on every hash hit before serving it",
            shown_by=("hash-collision", "tenant-isolation"),
        ),
        Hazard(
            name="restart-admits-same-revision",
            design="a restart admits saved state whose revision label matches its own, without checking the "
            "weights it was computed by",
            assumes="a revision label always names the same weights (no tag is ever re-pushed)",
            avoid="admit saved entries only under a fingerprint of the weights themselves (a content hash of the "
            "checkpoint), never under the revision label alone",
            shown_by=("invalidation",),
        ),
    )
}
"""Every design hazard gate names, by name."""


class HazardFinding(Record):
    """A design hazard one check showed: the check's diagnosis carries it (`diagnosis["hazard"]`)."""

    hazard: HazardName
    check: str
    """The check that showed it."""
    shown: str
    """What this run showed, in words."""
    avoid: str
    """The configuration that avoids it (the vocabulary's, `HAZARDS[hazard].avoid`)."""

    @classmethod
    def of(cls, hazard: HazardName, check: str, shown: str) -> HazardFinding:
        return cls(hazard=hazard, check=check, shown=shown, avoid=HAZARDS[hazard].avoid)

    def lead(self) -> str:
        """The words a failing check's message starts with (the design and its assumption are in
        `HAZARDS`, which the dossier shows beside them)."""
        return f"design hazard {self.hazard} (avoid it: {self.avoid}); {self.shown}"

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def weak_hash_hazard(
    check: str, *, bits: int, served: str, other_context: str, own: str, same_context: str = ""
) -> HazardFinding:
    """The design hazard `check` showed where blocks were served wrongly under a weak `bits`-bit hash and
    never under the store's own: `weak-hash-across-contexts` where requests were also served the blocks
    of other tokens (`other_context`), else `weak-hash-across-tenants`."""
    name: HazardName = "weak-hash-across-contexts" if other_context else "weak-hash-across-tenants"
    return HazardFinding.of(name, check, f"under a {bits}-bit hash {served}{other_context or same_context}; {own}")


def read_hazard(diagnosis: Mapping[str, Any] | None) -> HazardFinding | None:
    """The hazard a check's diagnosis names (None: none, or a record that does not validate)."""
    raw = (diagnosis or {}).get("hazard")
    if not isinstance(raw, Mapping):
        return None
    try:
        return HazardFinding.model_validate(raw)
    except ValidationError:
        return None


def hazard_summary(checks: Iterable[Any]) -> str:
    """What the verdict line adds for the hazards the failed checks (CheckResults) showed, each with
    the checks that showed it in plan order ("" when none)."""
    shown: dict[HazardName, list[str]] = {}
    for check in checks:
        finding = read_hazard(check.diagnosis) if check.status.value == "fail" else None
        if finding is not None:
            shown.setdefault(finding.hazard, []).append(check.check)
    return "".join(
        f"; design hazard {name} (shown by {', '.join(by)}): avoid it: {HAZARDS[name].avoid}"
        for name, by in shown.items()
    )
