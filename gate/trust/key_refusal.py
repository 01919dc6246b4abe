"""Why a key may not sign what it is asked to sign (`gate approve --key`, `gate run --sign-key`), in
one line before anything is written: unknown to the trust policy, its owner without the role, or
revoked."""

from __future__ import annotations

from pathlib import Path

from gate._util.clock import now_utc
from gate.errors import InputError
from gate.trust.keys import keyid, load_private_key
from gate.trust.ledger import Ledger
from gate.trust.ledger_store import is_url
from gate.trust.policy import Trust, allows, find_trust
from gate.trust.revocation import Revocations, Revoked, read_revocations


def _people(trust: Trust, names: list[str] | None = None) -> str:
    """`alice (key 1a2b3c4d5e6f7a8b), bob (key ...)`: the policy's people (or `names`) and their keys."""
    wanted = sorted(trust.policy.people) if names is None else sorted(set(names))
    shown = []
    for name in wanted:
        keys = sorted(k[:16] for k in trust.members.get(name, set()))
        shown.append(f"{name} (key {', '.join(keys)})" if keys else name)
    return ", ".join(shown) or "nobody"


def unknown_key(trust: Trust, keyid: str) -> str | None:
    if keyid in trust.identities:
        return None
    return f"key {keyid[:16]} is not in the trust policy {trust.path}, which knows {_people(trust)}"


def approver_refusal(
    trust: Trust, keyid: str, name: str | None, intervention: str | None, claim: str | None
) -> str | None:
    if unknown := unknown_key(trust, keyid):
        return f"{unknown}: approve with an approver's key"
    if (bad := trust.approver_problem(keyid, name, intervention, claim)) is None:
        return None
    owner = trust.name_of(keyid)
    may = [
        p
        for r in trust.policy.approvers
        if allows(r.interventions, intervention) and allows(r.claims, claim)
        for p in r.people
    ]
    if name is not None and owner is not None and name != owner:
        return f"{bad} in the trust policy {trust.path}"
    return (
        f"key {keyid[:16]} belongs to {owner}, who may not approve {intervention}/{claim} changes under the trust "
        f"policy {trust.path}; who may: {_people(trust, may)}"
    )


def revoked_refusal(trust: Trust | None, keyid: str, gone: Revoked, revoked: Revocations) -> str:
    owner = trust.name_of(keyid) if trust is not None else None
    line = f"key {keyid[:16]}{f' ({owner})' if owner else ''} was {gone.says()}: it signs nothing after that"
    if trust is None or owner is None:
        return line
    others = sorted(k[:16] for k in trust.members.get(owner, set()) if k != keyid and k not in revoked.keys)
    instead = f"use {owner}'s key {', '.join(others)}" if others else f"{owner} has no other key in it"
    return f"{line}; the trust policy {trust.path}: {instead}"


def check_sign_key(sign_key: Path, trust_path: Path | None, ledger: Path | None) -> None:
    """`gate run --sign-key K`, before running: K must be a run signer of the trust policy in force
    (if any) and not revoked in the ledger (if any); else InputError."""
    trust = find_trust(trust_path)
    mine = keyid(load_private_key(sign_key).public_key())
    if trust is not None:
        bad = unknown_key(trust, mine)
        if bad is None and trust.run_signer_problem(mine):
            bad = (
                f"key {mine[:16]} belongs to {trust.name_of(mine)}, who is not a run signer in the trust policy "
                f"{trust.path}; run signers: {_people(trust, trust.policy.run_signers)}"
            )
        if bad:
            raise InputError("--sign-key", f"{sign_key}: {bad}")
    if ledger is None or not (is_url(ledger) or ledger.is_file()):
        return
    with Ledger.open(ledger, writable=False, create=False) as opened:
        revoked = read_revocations(opened, trust)
    if (gone := revoked.key(mine, now_utc())) is not None:
        raise InputError("--sign-key", f"{sign_key}: {revoked_refusal(trust, mine, gone, revoked)} (ledger {ledger})")
