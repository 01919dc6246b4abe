"""The trust policy as code (trust.yaml, every key shown in docs/audit.md): who may sign runs, approve,
waive and revoke, and with which keys.

A key belongs to one person and counts only for the roles that person holds. The policy's sha256
(`Trust.digest`) goes into every result and ledger entry, so an audit can say which policy a record
was written under. `Trust.from_keys` builds the same from keys given by role on the command line.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import Field, field_validator, model_validator

from gate._util.yamlio import parse_model, read_yaml
from gate.core.manifest import Record
from gate.errors import InputError
from gate.trust.keys import keyid, load_public_key, public_key_from_b64

TRUST_API = "gate/trust/v1"
DEFAULT_TRUST = Path("trust.yaml")
ENV_TRUST = "GATE_TRUST"
ANY = "*"


class Person(Record):
    """One person (or CI system) and the public keys that speak for them."""

    keys: list[str] = Field(min_length=1)
    """PEM public key files (relative to the trust policy) or "ed25519:BASE64" raw keys."""


class ApproverRule(Record):
    """Who may approve changes of which interventions and claims."""

    people: list[str] = Field(min_length=1)
    interventions: list[str] = Field(default_factory=lambda: [ANY])
    claims: list[str] = Field(default_factory=lambda: [ANY])


class WaiverRule(Record):
    """Who may waive which checks, and for how long at most."""

    people: list[str] = Field(min_length=1)
    checks: list[str] = Field(default_factory=lambda: [ANY])
    max_days: int = Field(alias="max-days", gt=0, le=366)
    """Longest waiver they may grant, in days from the day it is granted."""


class TrustPolicy(Record):
    """trust.yaml: identities, roles and thresholds (see the module docstring)."""

    api_version: Literal["gate/trust/v1"] = Field(alias="apiVersion")
    people: dict[str, Person] = Field(min_length=1)
    run_signers: list[str] = Field(alias="run-signers", min_length=1)
    ledger_signers: list[str] = Field(default_factory=list, alias="ledger-signers")
    """Empty: the ledger key is not pinned."""
    approvers: list[ApproverRule] = Field(default_factory=list)
    waivers: list[WaiverRule] = Field(default_factory=list)
    revokers: list[str] | None = None
    """None: every person."""
    required_approvals: int = Field(default=1, alias="required-approvals", ge=1, le=20)
    required_waiver_approvals: int = Field(default=1, alias="required-waiver-approvals", ge=1, le=20)
    site_policies: list[str] = Field(default_factory=list, alias="site-policies")
    """Without --policy-dir, a run's plan must have been built from the built-in policies and exactly these."""
    known_bugs: list[str] = Field(default_factory=list, alias="known-bugs")
    """A run whose failure a known-bug declaration relaxed is deployable only when its id is listed here
    (the declaration is the change's own word)."""

    @field_validator("site_policies")
    @classmethod
    def _digests(cls, value: list[str]) -> list[str]:
        out = [v.lower().removeprefix("sha256:") for v in value]
        bad = [v for v in out if len(v) != 64 or any(c not in "0123456789abcdef" for c in v)]
        if bad:
            raise ValueError(f"{bad[0]!r} is not a sha256 (64 hex characters)")
        return out

    @model_validator(mode="after")
    def _names_exist(self) -> TrustPolicy:
        named = [
            *self.run_signers,
            *self.ledger_signers,
            *(p for r in self.approvers for p in r.people),
            *(p for r in self.waivers for p in r.people),
            *(self.revokers or []),
        ]
        unknown = sorted({n for n in named if n not in self.people})
        if unknown:
            raise ValueError(f"names {', '.join(unknown)} are not under `people`")
        return self


@dataclass(frozen=True)
class Identity:
    """A public key and its person (None: a key given by role on the command line)."""

    keyid: str
    public_key: Ed25519PublicKey
    name: str | None


def allows(allowed: Sequence[str], value: Any) -> bool:
    return ANY in allowed or (value is not None and str(value) in allowed)


@dataclass
class Trust:
    """A loaded trust policy: key ids bound to people, and each role's people."""

    policy: TrustPolicy
    path: str
    sha256: str
    identities: dict[str, Identity] = field(default_factory=dict)
    members: dict[str, set[str]] = field(default_factory=dict)
    """Each name (person, or a role's command-line key) and its key ids."""

    @property
    def digest(self) -> dict[str, str]:
        return {"path": self.path, "sha256": self.sha256, "api": TRUST_API}

    @property
    def names_bound(self) -> bool:
        return bool(self.sha256)

    @classmethod
    def from_keys(
        cls,
        *,
        run: Iterable[Path] = (),
        approvers: Iterable[Path] = (),
        waivers: Iterable[Path] = (),
        ledger: Iterable[Path] = (),
    ) -> Trust:
        """Roles from keys given on the command line: each key holds only the role it was given for."""
        roles: dict[str, list[str]] = {"run": [], "approve": [], "waive": [], "ledger": []}
        identities: dict[str, Identity] = {}
        members: dict[str, set[str]] = {}
        for role, paths in (("run", run), ("approve", approvers), ("waive", waivers), ("ledger", ledger)):
            for path in paths:
                pub = load_public_key(path)
                kid = keyid(pub)
                label = f"{role}-key {path}"
                identities.setdefault(kid, Identity(kid, pub, None))
                members.setdefault(label, set()).add(kid)
                roles[role].append(label)
        policy = TrustPolicy.model_construct(
            api_version="gate/trust/v1",
            people={},
            run_signers=roles["run"],
            ledger_signers=roles["ledger"],
            approvers=[ApproverRule(people=roles["approve"])] if roles["approve"] else [],
            waivers=[WaiverRule(people=roles["waive"], max_days=366)] if roles["waive"] else [],
        )
        return cls(policy, "(keys given by role)", "", identities, members)

    def _people_of(self, keyid: str) -> set[str]:
        return {name for name, kids in self.members.items() if keyid in kids}

    def name_of(self, keyid: str) -> str | None:
        ident = self.identities.get(keyid)
        return ident.name if ident is not None else None

    def keys_for(self, names: Iterable[str]) -> dict[str, Identity]:
        wanted = set(names)
        return {k: i for k, i in self.identities.items() if self._people_of(k) & wanted}

    def run_signer_keys(self) -> dict[str, Identity]:
        return self.keys_for(self.policy.run_signers)

    def ledger_keyids(self) -> list[str]:
        return list(self.keys_for(self.policy.ledger_signers))

    def _who(self, keyid: str) -> str:
        name = self.name_of(keyid)
        return f"key {keyid[:16]}" + (f" ({name})" if name else "")

    def _identity_problem(self, keyid: str, claimed: str | None) -> str | None:
        if keyid not in self.identities:
            return f"key {keyid[:16]} is not in the trust policy"
        owner = self.name_of(keyid)
        if claimed is not None and owner is not None and claimed != owner:
            return f"the name {claimed!r} does not match key {keyid[:16]}, which belongs to {owner!r}"
        return None

    def run_signer_problem(self, keyid: str) -> str | None:
        if keyid not in self.run_signer_keys():
            return f"{self._who(keyid)} is not a run signer"
        return None

    def approver_problem(self, keyid: str, name: str | None, intervention: str | None, claim: str | None) -> str | None:
        if bad := self._identity_problem(keyid, name):
            return bad
        mine = self._people_of(keyid)
        for rule in self.policy.approvers:
            if mine & set(rule.people) and allows(rule.interventions, intervention) and allows(rule.claims, claim):
                return None
        return f"{self._who(keyid)} may not approve {intervention}/{claim} changes"

    def waiver_days(self, keyid: str, name: str | None, check: str) -> tuple[int | None, str | None]:
        if bad := self._identity_problem(keyid, name):
            return None, bad
        mine = self._people_of(keyid)
        days = [r.max_days for r in self.policy.waivers if mine & set(r.people) and allows(r.checks, check)]
        if not days:
            return None, f"{self._who(keyid)} may not waive {check}"
        return max(days), None

    def revoker_problem(self, keyid: str, name: str | None) -> str | None:
        if bad := self._identity_problem(keyid, name):
            return bad
        revokers = self.policy.revokers
        if revokers is not None and not self._people_of(keyid) & set(revokers):
            return f"{self._who(keyid)} may not revoke"
        return None


def _key_from_ref(ref: str, base: Path) -> tuple[str, Ed25519PublicKey]:
    if ref.startswith("ed25519:"):
        try:
            pub = public_key_from_b64(ref.split(":", 1)[1])
        except ValueError as err:
            raise ValueError(f"{ref[:24]}…: not a base64 raw Ed25519 key ({err})") from None
    else:
        pub = load_public_key(base / ref)
    return keyid(pub), pub


def load_trust(path: Path) -> Trust:
    doc = read_yaml(path)
    policy: TrustPolicy = parse_model(doc, TrustPolicy)
    trust = Trust(policy=policy, path=str(path), sha256=hashlib.sha256(doc.text.encode()).hexdigest())
    for name, person in policy.people.items():
        for i, ref in enumerate(person.keys):
            where = f"people.{name}.keys[{i}]"
            try:
                kid, pub = _key_from_ref(ref, path.parent)
            except ValueError as err:
                raise InputError(str(path), str(err), field=where) from None
            except InputError as err:
                raise InputError(str(path), err.message, field=where) from None
            if (other := trust.identities.get(kid)) is not None and other.name != name:
                raise InputError(str(path), f"key {kid[:16]} is already bound to {other.name!r}", field=where)
            trust.identities[kid] = Identity(kid, pub, name)
            trust.members.setdefault(name, set()).add(kid)
    return trust


def find_trust(explicit: Path | None) -> Trust | None:
    """--trust FILE, else $GATE_TRUST, else ./trust.yaml where it exists; None: none."""
    if explicit is None and os.environ.get(ENV_TRUST):
        explicit = Path(os.environ[ENV_TRUST])
    if explicit is None and DEFAULT_TRUST.is_file():
        explicit = DEFAULT_TRUST
    return load_trust(explicit) if explicit is not None else None


def require_trust(explicit: Path | None, what: str) -> Trust:
    if (trust := find_trust(explicit)) is None:
        raise InputError(
            "--trust",
            f"{what} needs a trust policy naming who may do it: give --trust FILE, set {ENV_TRUST}, "
            "or add ./trust.yaml (see docs/audit.md)",
        )
    return trust
