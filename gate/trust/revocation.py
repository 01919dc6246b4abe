"""Revocation: a signed ledger entry that withdraws trust from a key (from a time on) or a waiver
(`gate revoke`). It counts only when signed (domain "gate-revocation/v1") by a key the trust policy
lets revoke; then the key's signatures made at or after `from` are invalid, and the waiver does not
apply.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gate._util.clock import now_utc
from gate._util.text import require_single_lines
from gate.errors import InputError
from gate.trust.keys import keyid, sign_statement, verify_statement
from gate.trust.ledger import Entry, Ledger
from gate.trust.policy import Trust

REVOCATION_KIND = "revocation"
REVOCATION_DOMAIN = "gate-revocation/v1"


def _signed_part(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in ("kind", "time", "signature")}


def parse_time(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text if "T" in text else f"{text}T00:00:00+00:00")
    except ValueError:
        raise InputError("--from", f"{text!r} is not an ISO-8601 time or date") from None
    if value.tzinfo is None:
        raise InputError("--from", f"{text!r} has no time zone (write +00:00 for UTC)")
    return value


def revocation_body(
    *, keyid: str | None, waiver: int | None, start: str | None, reason: str, by: str, trust: Trust
) -> dict[str, Any]:
    if (keyid is None) == (waiver is None):
        raise InputError("gate revoke", "revoke exactly one thing: --key-id or --waiver")
    if not reason.strip():
        raise InputError("--reason", "a revocation needs a reason")
    require_single_lines(("--reason", reason), ("--by", by))
    target: dict[str, Any] = {"key": keyid, "from": (parse_time(start) if start else parse_time(now_utc())).isoformat()}
    if waiver is not None:
        target = {"waiver": waiver}
    return {"target": target, "reason": reason, "by": by, "trust_policy": trust.digest}


def append_revocation(ledger: Ledger, body: dict[str, Any], key: Any, trust: Trust) -> Entry:
    if bad := trust.revoker_problem(keyid(key.public_key()), body["by"]):
        raise InputError("--key", bad)
    signed = {**body, "signature": sign_statement(key, REVOCATION_DOMAIN, _signed_part(body))}
    return ledger.append(REVOCATION_KIND, signed)[0]


@dataclass(frozen=True)
class Revoked:
    seq: int
    start: datetime | None
    reason: str
    by: str

    def says(self) -> str:
        since = f" from {self.start.isoformat()}" if self.start else ""
        return f"revoked{since} by {self.by} (ledger #{self.seq}: {self.reason})"


@dataclass
class Revocations:
    """The trusted revocations in a ledger, and the ones that were not trusted (with why)."""

    keys: dict[str, Revoked] = field(default_factory=dict)
    waivers: dict[int, Revoked] = field(default_factory=dict)
    untrusted: dict[int, str] = field(default_factory=dict)

    def key(self, keyid: str, at: str | None) -> Revoked | None:
        """The revocation that voids a signature by `keyid` made at time `at` (None: time unknown)."""
        if (found := self.keys.get(keyid)) is None:
            return None
        if at is None or found.start is None:
            return found
        try:
            when = datetime.fromisoformat(at)
        except ValueError:
            return found
        return found if when.tzinfo is None or when >= found.start else None


def entry_problem(entry: Entry, trust: Trust | None) -> str | None:
    body = entry.body
    sig = body.get("signature")
    if not isinstance(sig, dict):
        return "the revocation is not signed"
    if bad := verify_statement(sig, REVOCATION_DOMAIN, _signed_part(body)):
        return f"revocation signature: {bad}"
    if trust is None:
        return "no trust policy or role keys to say who may revoke"
    return trust.revoker_problem(str(sig.get("keyid")), str(body.get("by")))


def read_revocations(ledger: Ledger, trust: Trust | None, upto: int | None = None) -> Revocations:
    out = Revocations()
    for entry in ledger.entries(REVOCATION_KIND):
        if upto is not None and entry.seq > upto:
            break
        if bad := entry_problem(entry, trust):
            out.untrusted[entry.seq] = bad
            continue
        body, target = entry.body, entry.body.get("target") or {}
        if "waiver" in target:
            out.waivers[int(target["waiver"])] = Revoked(entry.seq, None, str(body.get("reason")), str(body.get("by")))
        elif target.get("key"):
            start = datetime.fromisoformat(str(target["from"])) if target.get("from") else None
            out.keys[str(target["key"])] = Revoked(entry.seq, start, str(body.get("reason")), str(body.get("by")))
    return out
