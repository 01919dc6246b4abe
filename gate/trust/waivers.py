"""Waivers: a recorded, expiring exception for one failed check of one manifest.

Scope. A waiver names one check and one manifest by its `name` AND the sha256 of the manifest file.
Editing the manifest (its claim, tolerances, paths, anything) voids every waiver granted for it: a
waiver was granted on the evidence of one exact manifest and does not carry over to another. The
commit is not part of the scope: a waiver granted for a manifest applies to every run of that exact
file until it expires (that is what a temporary exception is).

Expiry. `expires` is a date (YYYY-MM-DD, UTC) and the last day the waiver applies: on the next
day it is ignored, and the run reports the expiry on the check (`waiver.expired = True`) and in
its message.

Effect at run time (`apply_waivers`, called by the runner before the verdict):
- a FAILED check with an active waiver becomes `waived`, the waiver recorded on its CheckResult;
- an `error` is never waived: it stays an error, and its message says a waiver exists but does not
  cover errors (an error means the check could not judge, so there is nothing to waive);
- pass, warn and skip results are left alone.

Waivers live in the ledger (entries of kind "waiver"), so granting one is itself audited; the
ledger entry number is the waiver's id. With no ledger, no waiver applies.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from pydantic import Field

from gate._util.clock import today_utc
from gate.core.manifest import Record
from gate.core.result import CheckResult, Status, Waiver
from gate.errors import InputError
from gate.trust.ledger import Entry, Ledger, LedgerError
from gate.trust.ledger_verify import verify_chain
from gate.trust.signing import load_private_key, sha256_file, sign_statement, verify_statement

WAIVER_KIND = "waiver"


class WaiverGrant(Record):
    """The body of a waiver entry in the ledger (besides `kind` and `time`, set by the ledger)."""

    check: str
    """The one check it waives."""
    manifest_name: str
    """`name` of the manifest it is scoped to."""
    manifest_sha256: str
    """sha256 of the manifest file it is scoped to: any edit voids the waiver."""
    manifest_path: str = ""
    """Where the manifest was when the waiver was granted (information only)."""
    reason: str = Field(min_length=1)
    """Why the failure is accepted for now."""
    approver: str = Field(min_length=1)
    """Who granted it."""
    expires: date
    """Last day (UTC) on which it applies."""
    signature: dict[str, str] | None = None
    """Optional approver signature (keyid, public_key, sig) over the grant without this field."""


@dataclass(frozen=True)
class RecordedWaiver:
    """A waiver grant and the ledger entry that holds it."""

    id: int
    granted_at: str
    grant: WaiverGrant

    def active_on(self, day: date) -> bool:
        return day <= self.grant.expires

    def as_result_waiver(self, expired: bool) -> Waiver:
        g = self.grant
        return Waiver(
            check=g.check,
            reason=g.reason,
            approver=g.approver,
            expires=g.expires.isoformat(),
            ledger_id=self.id,
            expired=expired,
        )


WAIVER_SIGNATURE_DOMAIN = "gate-waiver/v1"


def _signed_part(grant: WaiverGrant) -> dict[str, Any]:
    return grant.model_dump(mode="json", exclude={"signature"})


def waiver_signer(key_path: Path) -> Callable[[WaiverGrant], dict[str, str]]:
    """Sign a grant with the approver's key (from `gate keygen`): `gate waive --key KEY`."""
    key = load_private_key(key_path)
    return lambda grant: sign_statement(key, WAIVER_SIGNATURE_DOMAIN, _signed_part(grant))


def check_waiver_signature(grant: WaiverGrant, trusted_keyids: list[str] | None = None) -> str | None:
    """None when the grant is unsigned or its signature verifies; else what is wrong."""
    if grant.signature is None:
        return None
    return verify_statement(grant.signature, WAIVER_SIGNATURE_DOMAIN, _signed_part(grant), trusted_keyids)


def parse_expiry(text: str, *, today: date | None = None) -> date:
    """A YYYY-MM-DD expiry that is today or later."""
    try:
        day = date.fromisoformat(text)
    except ValueError:
        raise InputError("--expires", f"{text!r} is not a date (YYYY-MM-DD)") from None
    if day < (today or today_utc()):
        raise InputError("--expires", f"{text} is in the past: a waiver must expire today or later")
    return day


def planned_checks(manifest_path: Path, policy_dirs: list[Path]) -> tuple[str, list[str]]:
    """The manifest's name and the checks its plan requires (no torch)."""
    from gate.core.load import load_manifest
    from gate.core.plan import build_plan
    from gate.core.policy import load_policies

    loaded = load_manifest(manifest_path)
    plan = build_plan(loaded.manifest, loaded.doc, load_policies(policy_dirs))
    return loaded.manifest.name, [p.check for p in plan.checks]


def grant_waiver(
    ledger: Ledger,
    manifest_path: Path,
    check: str,
    *,
    reason: str,
    approver: str,
    expires: date,
    policy_dirs: list[Path] | None = None,
    signer: Callable[[WaiverGrant], dict[str, str]] | None = None,
) -> RecordedWaiver:
    """Record a waiver for CHECK of the manifest at `manifest_path`; the check must be in its plan.

    `signer`: optional, from `waiver_signer(KEY)`: the approver signs the grant.
    """
    name, checks = planned_checks(manifest_path, policy_dirs or [])
    if check not in checks:
        raise InputError(
            str(manifest_path),
            f"check {check!r} is not in this manifest's plan (planned: {', '.join(checks)})",
            field="CHECK",
        )
    grant = WaiverGrant(
        check=check,
        manifest_name=name,
        manifest_sha256=sha256_file(manifest_path),
        manifest_path=str(manifest_path),
        reason=reason,
        approver=approver,
        expires=expires,
    )
    if signer is not None:
        grant = grant.model_copy(update={"signature": signer(grant)})
    entry, _checkpoint = ledger.append(WAIVER_KIND, grant.model_dump(mode="json", exclude_none=True))
    return RecordedWaiver(entry.seq, entry.time, grant)


def recorded_waivers(ledger: Ledger) -> list[RecordedWaiver]:
    """Every waiver in the ledger, oldest first."""
    return [_from_entry(e) for e in ledger.entries(WAIVER_KIND)]


def verified_waivers(ledger: Ledger) -> list[RecordedWaiver]:
    """The ledger's waivers, after its chain and checkpoints verify; a ledger that does not verify
    applies no waiver: the run stops with the first bad entry (see `gate audit verify`)."""
    report = verify_chain(ledger, every_checkpoint=False)
    bad = report.first_bad()
    if bad is not None:
        raise LedgerError(
            f"{ledger.path}: the ledger does not verify, so no waiver can be trusted: "
            f"{bad.message} (run `gate audit verify`)"
        )
    return recorded_waivers(ledger)


def _from_entry(entry: Entry) -> RecordedWaiver:
    body = {k: v for k, v in entry.body.items() if k not in ("kind", "time")}
    return RecordedWaiver(entry.seq, entry.time, WaiverGrant.model_validate(body))


def _note(result: CheckResult, text: str) -> str:
    return f"{result.message} [{text}]" if result.message else text


def waive_one(
    result: CheckResult, waivers: list[RecordedWaiver], other_digest: list[RecordedWaiver], today: date
) -> CheckResult:
    """Apply the waivers that name this check (already scoped to the manifest) to one result."""
    active = [w for w in waivers if w.active_on(today)]
    expired = [w for w in waivers if not w.active_on(today)]
    if result.status == Status.error:
        if active:
            w = active[-1]
            return result.model_copy(
                update={"message": _note(result, f"waiver #{w.id} not applied: a waiver never covers an error")}
            )
        return result
    if result.status != Status.failed:
        return result
    if active:
        w = active[-1]
        text = (
            f"waived by {w.grant.approver} until {w.grant.expires.isoformat()} (ledger #{w.id}): "
            f"{w.grant.reason}; the check failed: {result.message}"
        )
        return result.model_copy(
            update={"status": Status.waived, "message": text, "waiver": w.as_result_waiver(expired=False)}
        )
    if expired:
        w = expired[-1]
        return result.model_copy(
            update={
                "message": _note(result, f"waiver #{w.id} expired on {w.grant.expires.isoformat()}; not applied"),
                "waiver": w.as_result_waiver(expired=True),
            }
        )
    if other_digest:
        w = other_digest[-1]
        return result.model_copy(
            update={
                "message": _note(
                    result,
                    f"waiver #{w.id} was granted for another version of this manifest "
                    f"(sha256 {w.grant.manifest_sha256[:12]}); not applied",
                )
            }
        )
    return result


def ledger_waivers(ledger: Path | Ledger | None) -> list[RecordedWaiver]:
    """Every waiver in the ledger, after verifying its chain (raises on a broken ledger).

    The runner calls this before any check runs, so a broken ledger stops a run at once."""
    if ledger is None:
        return []
    if isinstance(ledger, Path):
        if not ledger.is_file():
            return []
        with Ledger.open(ledger, writable=False, create=False) as opened:
            return verified_waivers(opened)
    return verified_waivers(ledger)


def apply_waivers(
    manifest: Any,
    checks: list[CheckResult],
    ledger: Path | Ledger | list[RecordedWaiver] | None,
    *,
    today: date | None = None,
) -> list[CheckResult]:
    """The check results with the ledger's waivers for `manifest` applied (see the module docstring).

    `manifest`: a gate.core.load.LoadedManifest (its `manifest.name` and file `sha256` set the scope).
    `ledger`: a ledger (path or open), or the waivers already read from one by `ledger_waivers`.
    """
    found = ledger if isinstance(ledger, list) else ledger_waivers(ledger)
    if not found:
        return checks
    name, digest = manifest.manifest.name, manifest.sha256
    day = today or today_utc()
    out = []
    for result in checks:
        mine = [w for w in found if w.grant.check == result.check and w.grant.manifest_name == name]
        scoped = [w for w in mine if w.grant.manifest_sha256 == digest]
        other = [w for w in mine if w.grant.manifest_sha256 != digest]
        out.append(waive_one(result, scoped, other, day))
    return out
