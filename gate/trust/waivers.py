"""Waivers: a recorded, expiring exception for one failed check of one manifest (docs/audit.md).

Scope: one check and one manifest by its `name` AND the sha256 of its file (the commit is not part
of it); `expires` (YYYY-MM-DD, UTC) is the last day it applies. Only a FAILED check is waived, never
an `error` (the check could not judge). A waiver is a ledger entry (kind "waiver", its number the
waiver's id) and applies only when the trust policy allows its signer; no ledger or no trust policy:
no waiver applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from gate._util.clock import today_utc
from gate._util.digest import sha256_file
from gate._util.text import require_single_lines
from gate.core.manifest import Record
from gate.core.result import CheckResult, Status, Waiver
from gate.errors import InputError
from gate.trust.keys import keyid, load_private_key, sign_statement, verify_statement
from gate.trust.ledger import Entry, Ledger, LedgerError
from gate.trust.ledger_verify import verify_chain
from gate.trust.policy import Trust, find_trust
from gate.trust.revocation import read_revocations

WAIVER_KIND = "waiver"


class WaiverGrant(Record):
    """The body of a waiver entry in the ledger (besides `kind` and `time`, set by the ledger)."""

    check: str
    manifest_name: str
    manifest_sha256: str
    manifest_path: str = ""
    """Where the manifest was when the waiver was granted (information only)."""
    reason: str = Field(min_length=1)
    approver: str = Field(min_length=1)
    expires: date
    """Last day (UTC) on which it applies."""
    signature: dict[str, str] | None = None
    """The approver's signature (keyid, public_key, sig) over the grant without this field; a grant
    without one is never applied."""
    trust_policy: dict[str, str] | None = None

    @field_validator("reason", "approver")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value


@dataclass(frozen=True)
class RecordedWaiver:
    """A waiver grant and the ledger entry that holds it."""

    id: int
    granted_at: str
    grant: WaiverGrant
    problem: str | None = None
    """Why it is not trusted (unsigned, wrong key, revoked, …); None: it may apply."""
    signer: str = ""
    required: int = 1
    """The trust policy's required-waiver-approvals."""

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


def check_waiver_signature(grant: WaiverGrant, trusted_keyids: list[str] | None = None) -> str | None:
    if grant.signature is None:
        return "it is not signed"
    return verify_statement(grant.signature, WAIVER_SIGNATURE_DOMAIN, _signed_part(grant), trusted_keyids)


def waiver_problem(grant: WaiverGrant, granted_at: str, trust: Trust | None) -> str | None:
    """None when the trust policy lets this signed grant apply; else why not."""
    if bad := check_waiver_signature(grant):
        return bad
    if trust is None:
        return "no trust policy says who may waive"
    assert grant.signature is not None
    days, bad = trust.waiver_days(grant.signature["keyid"], grant.approver, grant.check)
    if bad:
        return bad
    assert days is not None
    try:
        granted = datetime.fromisoformat(granted_at).date()
    except ValueError:
        return f"its grant time {granted_at!r} is not a time"
    if grant.expires > granted + timedelta(days=days):
        return f"it expires {grant.expires.isoformat()}, beyond the policy's {days} days from {granted.isoformat()}"
    return None


def parse_expiry(text: str, *, today: date | None = None, max_days: int | None = None) -> date:
    try:
        day = date.fromisoformat(text)
    except ValueError:
        raise InputError("--expires", f"{text!r} is not a date (YYYY-MM-DD)") from None
    start = today or today_utc()
    if day < start:
        raise InputError("--expires", f"{text} is in the past: a waiver must expire today or later")
    if max_days is not None and day > start + timedelta(days=max_days):
        raise InputError("--expires", f"{text} is too far: the trust policy allows at most {max_days} days")
    return day


def planned_checks(manifest_path: Path, policy_dirs: list[Path]) -> tuple[str, list[str]]:
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
    approver: str | None,
    expires: str | date,
    key_path: Path,
    trust: Trust,
    policy_dirs: list[Path] | None = None,
) -> RecordedWaiver:
    """Record a signed waiver for CHECK of the manifest, which must plan it; refused (InputError,
    nothing written) when the trust policy does not allow it or the ledger does not verify."""
    key = load_private_key(key_path)
    mine = keyid(key.public_key())
    name = approver if approver is not None else trust.name_of(mine)
    if name is None or not name.strip():
        raise InputError("--approver", "a waiver needs the approver's name (non-blank)")
    if not reason.strip():
        raise InputError("--reason", "a waiver needs a reason (non-blank)")
    require_single_lines(("--reason", reason), ("--approver", name))
    days, bad = trust.waiver_days(mine, name, check)
    if bad:
        raise InputError("--key", f"{bad} (trust policy {trust.path})")
    day = expires if isinstance(expires, date) else parse_expiry(expires, max_days=days)
    if days is not None and day > today_utc() + timedelta(days=days):
        raise InputError("--expires", f"{day} is too far: the trust policy allows at most {days} days")
    manifest_name, checks = planned_checks(manifest_path, policy_dirs or [])
    if check not in checks:
        raise InputError(
            str(manifest_path),
            f"check {check!r} is not in this manifest's plan (planned: {', '.join(checks)})",
            field="CHECK",
        )
    require_verified(ledger, "no waiver can be granted on it")
    grant = WaiverGrant(
        check=check,
        manifest_name=manifest_name,
        manifest_sha256=sha256_file(manifest_path),
        manifest_path=str(manifest_path),
        reason=reason,
        approver=name,
        expires=day,
        trust_policy=trust.digest,
    )
    grant = grant.model_copy(update={"signature": sign_statement(key, WAIVER_SIGNATURE_DOMAIN, _signed_part(grant))})
    entry, _checkpoint = ledger.append(WAIVER_KIND, grant.model_dump(mode="json", exclude_none=True))
    return RecordedWaiver(entry.seq, entry.time, grant, signer=name)


def require_verified(ledger: Ledger, consequence: str) -> None:
    if (bad := verify_chain(ledger, every_checkpoint=False).first_bad()) is not None:
        raise LedgerError(
            f"{ledger.path}: the ledger does not verify, so {consequence}: {bad.message} (run `gate audit verify`)"
        )


def recorded_waivers(ledger: Ledger) -> list[RecordedWaiver]:
    return [_from_entry(e) for e in ledger.entries(WAIVER_KIND)]


def verified_waivers(ledger: Ledger, trust: Trust | None = None) -> list[RecordedWaiver]:
    """The ledger's waivers, each judged against the trust policy and the revocations; a ledger
    that does not verify applies none: LedgerError with the first bad entry."""
    require_verified(ledger, "no waiver can be trusted")
    revoked = read_revocations(ledger, trust)
    out = []
    for waiver in recorded_waivers(ledger):
        problem = waiver_problem(waiver.grant, waiver.granted_at, trust)
        sig = waiver.grant.signature or {}
        key_revoked = revoked.key(str(sig.get("keyid")), waiver.granted_at) if sig else None
        if problem is None and key_revoked is not None:
            problem = f"its key was {key_revoked.says()}"
        if problem is None and waiver.id in revoked.waivers:
            problem = f"it was {revoked.waivers[waiver.id].says()}"
        signer = (trust.name_of(str(sig.get("keyid"))) if trust else None) or str(sig.get("keyid", ""))[:16]
        required = trust.policy.required_waiver_approvals if trust is not None else 1
        out.append(RecordedWaiver(waiver.id, waiver.granted_at, waiver.grant, problem, signer, required))
    return out


def _from_entry(entry: Entry) -> RecordedWaiver:
    body = {k: v for k, v in entry.body.items() if k not in ("kind", "time")}
    try:
        return RecordedWaiver(entry.seq, entry.time, WaiverGrant.model_validate(body))
    except ValueError as err:
        shown: dict[str, Any] = {
            k: str(body.get(k)) for k in ("check", "manifest_name", "manifest_sha256", "reason", "approver")
        }
        grant = WaiverGrant.model_construct(**shown, expires=date.min, signature=None)
        return RecordedWaiver(entry.seq, entry.time, grant, problem=f"malformed ({str(err).splitlines()[0]})")


def _noted(result: CheckResult, text: str, **update: Any) -> CheckResult:
    message = f"{result.message} [{text}]" if result.message else text
    return result.model_copy(update={"message": message, **update})


def waive_one(
    result: CheckResult,
    waivers: list[RecordedWaiver],
    other_digest: list[RecordedWaiver],
    today: date,
    required: int = 1,
) -> CheckResult:
    """Apply the trusted waivers of this check (scoped to the manifest) to one result; a deny check
    needs `required` distinct signers."""
    trusted = [w for w in waivers if w.problem is None]
    untrusted = [w for w in waivers if w.problem is not None]
    active = [w for w in trusted if w.active_on(today)]
    expired = [w for w in trusted if not w.active_on(today)]
    if result.status == Status.error:
        if active:
            return _noted(result, f"waiver #{active[-1].id} not applied: a waiver never covers an error")
        return result
    if result.status != Status.failed:
        return result
    signers = sorted({w.signer for w in active})
    need = required if result.severity == "deny" else 1
    if active and len(signers) >= need:
        w = active[-1]
        by = w.grant.approver if len(signers) == 1 else ", ".join(signers)
        text = (
            f"waived by {by} until {w.grant.expires.isoformat()} (ledger #{w.id}): "
            f"{w.grant.reason}; the check failed: {result.message}"
        )
        return result.model_copy(
            update={"status": Status.waived, "message": text, "waiver": w.as_result_waiver(expired=False)}
        )
    if active:
        return _noted(
            result,
            f"waiver #{active[-1].id} not applied: a deny check needs {need} distinct signers, "
            f"{len(signers)} signed ({', '.join(signers)})",
        )
    if expired:
        w = expired[-1]
        return _noted(
            result,
            f"waiver #{w.id} expired on {w.grant.expires.isoformat()}; not applied",
            waiver=w.as_result_waiver(expired=True),
        )
    if untrusted:
        return _noted(result, f"waiver #{untrusted[-1].id} not applied: {untrusted[-1].problem}")
    if other_digest:
        w = other_digest[-1]
        return _noted(
            result,
            f"waiver #{w.id} was granted for another version of this manifest "
            f"(sha256 {w.grant.manifest_sha256[:12]}); not applied",
        )
    return result


def ledger_waivers(ledger: Path | Ledger | None, trust: Trust | Path | None = None) -> list[RecordedWaiver]:
    """`verified_waivers` of a ledger path or open ledger (`trust`: a policy, its path, or None to find
    one); the runner calls it before any check runs, so a broken ledger stops a run at once."""
    if ledger is None:
        return []
    policy = trust if isinstance(trust, Trust) else find_trust(trust)
    if isinstance(ledger, Path):
        if not ledger.is_file():
            return []
        with Ledger.open(ledger, writable=False, create=False) as opened:
            return verified_waivers(opened, policy)
    return verified_waivers(ledger, policy)


def apply_waivers(
    manifest: Any,
    checks: list[CheckResult],
    ledger: Path | Ledger | list[RecordedWaiver] | None,
    *,
    today: date | None = None,
    trust: Trust | Path | None = None,
) -> list[CheckResult]:
    """The check results with the ledger's trusted waivers for `manifest` (a LoadedManifest) applied."""
    found = ledger if isinstance(ledger, list) else ledger_waivers(ledger, trust)
    if not found:
        return checks
    required = max(w.required for w in found)
    name, digest = manifest.manifest.name, manifest.sha256
    day = today or today_utc()
    out = []
    for result in checks:
        mine = [w for w in found if w.grant.check == result.check and w.grant.manifest_name == name]
        scoped = [w for w in mine if w.grant.manifest_sha256 == digest]
        other = [w for w in mine if w.grant.manifest_sha256 != digest]
        out.append(waive_one(result, scoped, other, day, required))
    return out
