"""Whether a verified run may be deployed: its waivers re-judged from the ledger under the verifier's
trust policy (a run applied those its own policy allowed, a pull request's if it edited trust.yaml).
A waiver counts when signed, allowed, not revoked, scoped to the exact manifest, granted before the
run and active on its day, with enough distinct signers for a deny check; one that does not count
leaves the run authentic but not deployable (exit 7 unless `--any-verdict`)."""

from __future__ import annotations

from datetime import date, datetime

from gate.core.result import CheckResult
from gate.trust.ledger import Ledger
from gate.trust.ledger_store import LedgerError
from gate.trust.policy import Trust
from gate.trust.run_check import RunCheck
from gate.trust.verify_run import read_results, waived_checks
from gate.trust.waivers import RecordedWaiver, verified_waivers


def judge_waivers(out: RunCheck, ledger: Ledger, trust: Trust, run_time: str | None) -> None:
    if not out.waived or out.statement is None:
        out.waivers_count = True if not out.waived else out.waivers_count
        return
    try:
        judged = verified_waivers(ledger, trust)
    except LedgerError as err:
        out.add(False, f"waivers: {err}")
        out.waivers_count = False
        return
    results = read_results(out.directory)
    if results is None:  # it named waived checks, so it was read: only a file changed since fails here
        out.add(False, "waivers: results.json is no longer readable")
        out.waivers_count = False
        return
    name = str(results.manifest.get("name"))
    sha = results.manifest_digest.sha256
    when = run_time or results.finished_at
    try:
        day = datetime.fromisoformat(when).date()
    except ValueError:
        out.add(False, f"waivers: the run's time {when!r} is not a time")
        out.waivers_count = False
        return
    counted = True
    for check in waived_checks(results):
        mine = [
            w
            for w in judged
            if w.grant.check == check.check and w.grant.manifest_name == name and w.grant.manifest_sha256 == sha
        ]
        ok, why = _covers(mine, check, trust, day, when)
        out.add(True if ok else None, f"waiver of {check.check}: {why}")
        counted = counted and ok
    out.waivers_count = counted


def _covers(waivers: list[RecordedWaiver], check: CheckResult, trust: Trust, on: date, when: str) -> tuple[bool, str]:
    good = [w for w in waivers if w.granted_at <= when and w.problem is None and w.active_on(on)]
    need = trust.policy.required_waiver_approvals if check.severity == "deny" else 1
    signers = sorted({w.signer for w in good})
    if len(signers) >= need:
        ids = ", ".join(f"#{w.id}" for w in good)
        return True, f"counts under the verifier's trust policy (ledger {ids}, signed by {', '.join(signers)})"
    recorded = check.waiver.ledger_id if check.waiver is not None else None
    named = [w for w in waivers if w.id == recorded]
    if named and named[0].problem is not None:
        why = f"ledger #{named[0].id} is not trusted under the verifier's trust policy: {named[0].problem}"
    elif named and not named[0].active_on(on):
        why = f"ledger #{named[0].id} expired on {named[0].grant.expires.isoformat()}"
    elif good:
        why = f"a deny check needs {need} distinct signers, {len(signers)} signed ({', '.join(signers)})"
    elif not waivers:
        why = "no waiver for this check of this exact manifest is in the ledger"
    else:
        why = "; ".join(f"ledger #{w.id}: {w.problem or 'granted after the run or expired'}" for w in waivers)
    return False, f"does NOT count: {why}"
