"""Auditing the ledger offline: `verify_ledger` checks the hash chain and checkpoints, then judges
each entry on its own by role (an untrusted entry counts for nothing but does not stop the audit);
`trace` goes from a commit or digest to the runs, their dossiers, approvals and waivers, verified
under the verifier's trust policy, and holds the ledger to the receipts the dossier keeps.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gate._util.digest import MIN_REF as MIN_REF
from gate._util.digest import ref_matches, sha256_file
from gate._util.limited import read_regular
from gate.errors import InputError
from gate.trust.approval_predicate import APPROVAL_FILE, APPROVAL_KIND
from gate.trust.approvals import ApprovalRecord, verify_approval
from gate.trust.attest import ENVELOPE_NAME
from gate.trust.deployable import judge_waivers
from gate.trust.landing import landed_approvals, landed_runs, run_commit
from gate.trust.ledger import RECEIPT, RUN_KIND, Checkpoint, Entry, Ledger
from gate.trust.ledger_verify import ChainReport, Findings, Problem, verify_chain
from gate.trust.policy import Trust
from gate.trust.revocation import REVOCATION_KIND, Revocations, entry_problem, read_revocations
from gate.trust.run_check import ApprovalInput, Finding, RunCheck
from gate.trust.run_record import statement_digest
from gate.trust.verify_run import check_run
from gate.trust.waivers import WAIVER_KIND, WaiverGrant, check_waiver_signature, waiver_problem


@dataclass
class AuditReport(Findings):
    """The chain report, plus each entry's own trust."""

    chain: ChainReport
    problems: list[Problem] = field(default_factory=list)
    """Chain and checkpoint problems: the ledger itself cannot be trusted past them."""
    untrusted: dict[int, list[str]] = field(default_factory=dict)
    """Entries that verify in the chain but are not trusted on their own, with why."""
    kinds: dict[int, str] = field(default_factory=dict)
    history: dict[int, list[str]] = field(default_factory=dict)
    """What later trusted entries did to an entry (a waiver revoked): information, not a problem."""


HELD_BYTES = 16 * 1024 * 1024


def held_checkpoints(path: Path) -> list[Checkpoint]:
    """Checkpoints in a checkpoint file, a receipt, an approval.json, or a dossier directory of those."""
    if path.is_dir():
        return [
            cp for name in (RECEIPT, APPROVAL_FILE) if (path / name).is_file() for cp in held_checkpoints(path / name)
        ]
    try:
        data = json.loads(read_regular(path, HELD_BYTES, "checkpoint file"))
        if isinstance(data, dict) and "approvals" in data:
            return [
                Checkpoint.model_validate(r["ledger"]["checkpoint"])
                for r in data["approvals"]
                if isinstance(r, dict) and isinstance(r.get("ledger"), dict)
            ]
        if isinstance(data, dict) and "checkpoint" in data:
            return [Checkpoint.model_validate(data["checkpoint"])]
        return [Checkpoint.model_validate(data)]
    except (ValueError, KeyError, TypeError, RecursionError) as err:  # ValidationError is a ValueError
        raise InputError(str(path), f"not a checkpoint, receipt or approval.json ({err.__class__.__name__})") from None


def _revoked(revoked: Revocations, keyid: Any, at: str) -> list[str]:
    gone = revoked.key(str(keyid), at) if keyid else None
    return [f"its key was {gone.says()}"] if gone is not None else []


def entry_problems(entry: Entry, statements: dict[int, str], trust: Trust | None, revoked: Revocations) -> list[str]:
    """Why one entry is not trusted on its own (empty: trusted); without `trust`, only signatures."""
    body = entry.body
    if entry.kind == APPROVAL_KIND:
        check = verify_approval(ApprovalRecord.of_entry(body), expected_statement=str(body.get("statement_sha256")))
        problems = list(check.problems)
        run = body.get("run_entry")
        if run is not None and statements.get(int(run)) != body.get("statement_sha256"):
            problems.append(f"it names run entry #{run}, whose dossier has another digest")
        if trust is not None and check.keyid:
            bad = trust.approver_problem(check.keyid, check.approver, check.intervention, check.claim)
            problems += [bad] if bad else []
        return problems + _revoked(revoked, check.keyid, entry.time)
    if entry.kind == WAIVER_KIND:
        try:
            grant = WaiverGrant.model_validate({k: v for k, v in body.items() if k not in ("kind", "time")})
        except ValidationError as err:
            return [f"malformed waiver ({err.error_count()} errors)"]
        bad = waiver_problem(grant, entry.time, trust) if trust is not None else check_waiver_signature(grant)
        problems = [f"waiver: {bad}"] if bad else []
        # a revoked waiver is history (it applied until revoked), not an untrusted entry: see `history`
        return problems + _revoked(revoked, (grant.signature or {}).get("keyid"), entry.time)
    if entry.kind == RUN_KIND:
        missing = [k for k in ("manifest", "verdict", "dossier") if k not in body]
        if missing:
            return [f"run entry lacks {', '.join(missing)}"]
        signer = (body.get("signer") or {}).get("keyid")
        if trust is None:
            return []
        if not signer:
            return ["the run was recorded unsigned"]
        bad = trust.run_signer_problem(str(signer))
        return ([bad] if bad else []) + _revoked(revoked, signer, entry.time)
    if entry.kind == REVOCATION_KIND:
        bad = entry_problem(entry, trust)
        return [bad] if bad else []
    return []


def verify_ledger(
    ledger: Ledger,
    *,
    trusted: list[Checkpoint] | None = None,
    pinned_keyids: list[str] | None = None,
    trust: Trust | None = None,
) -> AuditReport:
    pinned = pinned_keyids or (trust.ledger_keyids() if trust is not None else None) or None
    chain = verify_chain(ledger, trusted=trusted, pinned_keyids=pinned)
    report = AuditReport(chain=chain, problems=list(chain.problems))
    revoked = read_revocations(ledger, trust, upto=chain.verified)
    statements: dict[int, str] = {}
    for entry in ledger.entries():
        if entry.seq > chain.verified:
            break
        if entry.kind == RUN_KIND:
            statements[entry.seq] = str(entry.dossier.get("statement_sha256"))
        report.kinds[entry.seq] = entry.kind
        if problems := entry_problems(entry, statements, trust, revoked):
            report.untrusted[entry.seq] = problems
        if entry.kind == WAIVER_KIND and entry.seq in revoked.waivers:
            report.history[entry.seq] = [f"it was {revoked.waivers[entry.seq].says()}: it no longer applies"]
    return report


def run_digests(body: dict[str, Any]) -> list[str]:
    dossier = body.get("dossier") or {}
    found = [
        (body.get("change") or {}).get("commit"),
        dossier.get("statement_sha256"),
        (body.get("manifest") or {}).get("sha256"),
        *(dossier.get("files") or {}).values(),
    ]
    return [str(d).lower() for d in found if d]


def find_runs(ledger: Ledger, ref: str) -> list[Entry]:
    """Run entries whose commit or any recorded digest starts with `ref` (at least MIN_REF characters)."""
    return [e for e in ledger.entries(RUN_KIND) if any(ref_matches(d, ref) for d in run_digests(e.body))]


def approvals_for(ledger: Ledger, statement_sha256: str, evidence_sha256: str | None = None) -> list[Entry]:
    return [
        e
        for e in ledger.entries(APPROVAL_KIND)
        if e.body.get("statement_sha256") == statement_sha256
        or (evidence_sha256 and e.body.get("evidence_sha256") == evidence_sha256)
    ]


def waivers_for(ledger: Ledger, run: Entry) -> list[Entry]:
    manifest = run.body.get("manifest") or {}
    applied = set(run.body.get("waivers") or [])
    return [
        e
        for e in ledger.entries(WAIVER_KIND)
        if e.seq in applied
        or (
            e.body.get("manifest_name") == manifest.get("name")
            and e.body.get("manifest_sha256") == manifest.get("sha256")
        )
    ]


PREVIOUS_SUFFIX = ".previous"
"""Where a re-run into the same --out keeps the run before it (gate.engine.outputs)."""


def _holds(directory: Path, run: Entry) -> bool:
    recorded = run.dossier.get("statement_sha256")
    return bool(recorded) and statement_digest(directory / ENVELOPE_NAME) == recorded


def _superseded_by(ledger: Ledger, run: Entry, directory: Path) -> int | None:
    if _holds(directory, run):
        return None
    where = run.dossier.get("dir")
    later = [e.seq for e in ledger.entries(RUN_KIND) if e.seq > run.seq and e.dossier.get("dir") == where]
    return later[-1] if later else None


@dataclass
class RunTrace:
    run: Entry
    dossier: Path
    findings: list[Finding] = field(default_factory=list)
    """What the ledger says about the dossier (file digests, commit); the dossier's own in `check`."""
    check: RunCheck | None = None
    approvals: list[Entry] = field(default_factory=list)
    waivers: list[Entry] = field(default_factory=list)
    superseded_by: int | None = None
    """A later run whose dossier replaced this one's in the same directory: this run is then listed,
    not judged."""

    @property
    def related(self) -> set[int]:
        return {self.run.seq, *(a.seq for a in self.approvals)}

    @property
    def status(self) -> str:
        if self.superseded_by is not None:
            return (
                f"SUPERSEDED by run #{self.superseded_by} in the same directory (the ledger records "
                f"{self.run.body.get('verdict')!s}; its dossier was replaced by the re-run's)"
            )
        if self.check is None:
            return f"NOT VERIFIED (the ledger records {self.run.body.get('verdict')!s})"
        return self.check.standing if self.ok else f"NOT VERIFIED (the dossier claims {self.check.verdict})"

    @property
    def ok(self) -> bool:
        if self.superseded_by is not None:
            return True
        return self.check is not None and self.check.ok and all(f.ok is not False for f in self.findings)

    @property
    def deployable(self) -> bool:
        return self.ok and self.check is not None and self.check.deployable


def standing_runs(traces: list[RunTrace]) -> list[RunTrace]:
    """The runs a deploy decision rests on: the latest run recorded into each dossier directory."""
    latest: dict[str, RunTrace] = {}
    for item in traces:
        where = str(item.run.dossier.get("dir", item.dossier))
        if where not in latest or item.run.seq > latest[where].run.seq:
            latest[where] = item
    return list(latest.values())


def _check_recorded_files(trace: RunTrace) -> bool:
    out, dossier = trace.dossier, trace.run.dossier
    add = trace.findings.append
    if not out.is_dir():
        add(Finding(False, f"dossier {out} not found (copy it here or pass --dossier DIR)"))
        return False
    for name, digest in sorted((dossier.get("files") or {}).items()):
        if name == ENVELOPE_NAME:
            continue  # approvals add signatures to it; its signed statement is checked below
        path = out / name
        if not path.is_file():
            add(Finding(False, f"{name}: missing from the dossier"))
        elif sha256_file(path) != digest:
            add(Finding(False, f"{name}: differs from the sha256 the ledger recorded"))
        else:
            add(Finding(True, f"{name}: sha256 matches the ledger"))
    if not dossier.get("statement_sha256"):
        add(Finding(False, "the run was recorded UNSIGNED: nothing binds its dossier"))
        return False
    if statement_digest(out / ENVELOPE_NAME) != dossier["statement_sha256"]:
        add(Finding(False, f"{ENVELOPE_NAME}: its statement is not the one the ledger recorded"))
    return True


def trace(
    ledger: Ledger, ref: str, *, trust: Trust, dossier: Path | None = None, policy_dirs: list[Path] | None = None
) -> tuple[AuditReport, list[RunTrace]]:
    """From a commit or digest (or a commit that lands a run's: gate.trust.landing) to each matching run's
    dossier, approvals and waivers, verified by role (`policy_dirs`: main's site policies)."""
    report = verify_ledger(ledger, trust=trust)
    revoked = read_revocations(ledger, trust, upto=report.chain.verified)
    traces = []
    held: list[Checkpoint] = []
    runs = find_runs(ledger, ref)
    landed = {} if runs else landed_runs(ledger.entries(RUN_KIND), ref)  # a merge/squash/rebase of them
    runs = runs or [e for e in ledger.entries(RUN_KIND) if e.seq in landed]
    for run in runs:
        out = dossier or Path(str(run.dossier.get("dir", "")))
        item = RunTrace(run=run, dossier=out)
        if (later := _superseded_by(ledger, run, out)) is not None:
            previous = Path(f"{out}{PREVIOUS_SUFFIX}")
            if _holds(previous, run):  # the re-run kept it aside: judge it there
                item.dossier = out = previous
            else:
                item.superseded_by = later
                traces.append(item)
                continue
        item.approvals = approvals_for(
            ledger, str(run.dossier.get("statement_sha256")), run.dossier.get("evidence_sha256")
        )
        item.approvals += landed_approvals(ledger.entries(APPROVAL_KIND), item.approvals, out, run_commit(run))
        item.waivers = waivers_for(ledger, run)
        recorded_commit = (run.body.get("change") or {}).get("commit")
        if run.seq in landed:
            item.findings.append(Finding(True, landed[run.seq].text))
        if _check_recorded_files(item):
            item.check = check_run(
                out,
                trust,
                commit=ref if ref_matches(recorded_commit, ref) else None,
                revocations=revoked,
                run_time=run.time,
                approvals=[ApprovalInput.of_entry(a) for a in item.approvals],
                policy_dirs=policy_dirs,
            )
            judge_waivers(item.check, ledger, trust, run.time)
            if recorded_commit and item.check.commit != recorded_commit:
                says = f"the ledger entry says commit {recorded_commit}, the signed commit {item.check.commit} differs"
                item.findings.append(Finding(False, says))
            try:
                held += held_checkpoints(out)
            except (ValueError, KeyError, TypeError, ValidationError, InputError):
                item.findings.append(Finding(False, f"{out}: its ledger receipts are unreadable"))
        traces.append(item)
    if held:
        full = verify_ledger(ledger, trusted=held, trust=trust)
        report.problems, report.chain, report.untrusted = full.problems, full.chain, full.untrusted
        report.history = full.history
    return report, traces
