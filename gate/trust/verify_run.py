"""Verifying one dossier by roles: who signed the run, which commit and manifest, who approved.

`check_run` is what `gate verify DIR` and each run of `gate audit trace` report. Keys count only
for the role the trust policy (or the command line) gives them: the run must carry a signature by a
run signer (an approver's or a stranger's key does not make a run), an approval counts only when
its key belongs to an approver of that intervention and claim under the name it gives, and neither
counts once revoked (an approval that does not count is reported and ignored: anyone who can write
the ledger could add one, and must not be able to block an audit with it). The signed statement's
commit and manifest digest are checked against what the caller asks for. An approximate change
never stands as PASS: its verdict is awaiting-approval
until `required-approvals` distinct approvers signed, then APPROVED. The approved dossier files
and approval.json must match the approved-dossier statement (approval.dsse.json) signed by a
counted approver.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from gate.trust.approvals import ApprovalCheck, check_approved_files, load_approvals, verify_approval
from gate.trust.attest import Statement, verify_envelope
from gate.trust.policy import Trust
from gate.trust.revocation import Revocations

MIN_REF = 7
"""Shortest commit or digest prefix accepted (git's short hash)."""
AWAITING = "awaiting-approval"


@dataclass
class Finding:
    """One line of a report: `ok` true (verified), false (failed) or None (information)."""

    ok: bool | None
    text: str


@dataclass
class ApprovalInput:
    """An approval record to judge, where it came from, and when it was signed (None: unknown)."""

    record: dict[str, Any]
    label: str
    at: str | None = None


@dataclass
class RunCheck:
    """What `check_run` found about one dossier."""

    directory: Path
    findings: list[Finding] = field(default_factory=list)
    statement: Statement | None = None
    statement_sha256: str = ""
    approved_by: list[str] = field(default_factory=list)
    """Distinct approvers whose approval counted."""
    required: int = 1

    @property
    def ok(self) -> bool:
        return self.statement is not None and all(f.ok is not False for f in self.findings)

    @property
    def verdict(self) -> str:
        return str(self.statement.predicate.get("verdict")) if self.statement else "?"

    @property
    def commit(self) -> str | None:
        return self.statement.commit if self.statement else None

    @property
    def manifest(self) -> dict[str, Any]:
        value = self.statement.predicate.get("manifest") if self.statement else None
        return value if isinstance(value, dict) else {}

    @property
    def site_policy(self) -> list[str]:
        """How a site policy (--policy-dir) changed the rule the run was planned by (signed)."""
        value = self.statement.predicate.get("sitePolicy") if self.statement else None
        return [str(line) for line in value] if isinstance(value, list) else []

    @property
    def approved(self) -> bool:
        return self.verdict == AWAITING and len(self.approved_by) >= self.required

    @property
    def standing(self) -> str:
        """The verdict, or APPROVED / AWAITING APPROVAL for an approximate change; never a verdict
        that did not verify."""
        if not self.ok:
            return f"NOT VERIFIED (the dossier claims {self.verdict})"
        if self.verdict != AWAITING:
            return self.verdict.upper()
        if self.approved:
            return f"APPROVED by {', '.join(self.approved_by)}"
        return f"AWAITING APPROVAL ({len(self.approved_by)} of {self.required} required approvals)"

    def summary(self) -> str:
        """The line both commands end with: commit, manifest and verdict, as verified."""
        m = self.manifest
        return (
            f"commit {self.commit or '(none signed)'}, manifest {m.get('name')} (sha256 {str(m.get('sha256'))[:16]}), "
            f"verdict {self.standing}"
        )


def ref_matches(value: str | None, asked: str) -> bool:
    """A commit or digest `asked` (7+ characters, any case, optional sha256: prefix) names `value`."""
    ref = asked.strip().lower().removeprefix("sha256:")
    return value is not None and len(ref) >= MIN_REF and value.lower().startswith(ref)


def check_run(
    directory: Path,
    trust: Trust,
    *,
    commit: str | None = None,
    manifest_sha256: str | None = None,
    revocations: Revocations | None = None,
    run_time: str | None = None,
    approvals: list[ApprovalInput] | None = None,
) -> RunCheck:
    """Verify DIR's attestation, commit, manifest and approvals by role (see the module docstring).

    `run_time`: when the run was signed (its ledger entry's time), for revocations; None: unknown,
    so a signature by a revoked key never counts. `approvals`: the records to judge (the ledger's,
    in a trace); None reads DIR/approval.json.
    """
    from gate.trust.run_record import statement_digest

    revoked = revocations or Revocations()
    out = RunCheck(directory=directory, required=trust.policy.required_approvals)
    add = out.findings.append
    signers = trust.run_signer_keys()
    keys: dict[str, Path | Ed25519PublicKey] = {_label(trust, k): i.public_key for k, i in signers.items()}
    report = verify_envelope(directory, keys, require_all=False)
    out.statement = report.statement
    out.statement_sha256 = statement_digest(report.envelope) or ""
    for failure in report.failures:
        add(Finding(False, f"attestation: {failure}"))
    counted = []
    for signer in report.signed_by:
        gone = revoked.key(signer.keyid, run_time)
        if gone is not None:
            add(Finding(False, f"run signature by {signer.label}: the key was {gone.says()}"))
        else:
            counted.append(signer)
            add(Finding(True, f"run signed by {signer.label}, a run signer"))
    if not counted and report.statement is not None:
        others = ", ".join(_label(trust, k) for k in report.other_signatures) or "none"
        add(Finding(False, f"the run is not signed by a run signer (signatures by: {others})"))
    for name in report.matched:
        add(Finding(True, f"{name}: sha256 matches the signed statement"))
    if report.statement is None:
        return out
    for line in out.site_policy or ["site policy: none (the built-in policy rules, unchanged)"]:
        add(Finding(None, f"the run's plan was changed by a {line}" if out.site_policy else line))
    _check_binding(out, commit, manifest_sha256)
    run_signers = {s.keyid: signers[s.keyid].public_key for s in counted if s.keyid in signers}
    _check_approvals(out, trust, revoked, approvals, [s.keyid for s in report.signed_by], run_signers)
    return out


def _label(trust: Trust, keyid: str) -> str:
    name = trust.name_of(keyid)
    return f"{name} (key {keyid[:16]})" if name else f"key {keyid[:16]}"


def _check_binding(out: RunCheck, commit: str | None, manifest_sha256: str | None) -> None:
    add = out.findings.append
    if commit is not None:
        if out.commit is None:
            add(Finding(False, f"the signed statement names no commit; {commit} was asked for"))
        elif not ref_matches(out.commit, commit):
            add(Finding(False, f"the signed statement is for commit {out.commit}, not {commit}"))
        else:
            add(Finding(True, f"commit {out.commit}: the one asked for"))
    if manifest_sha256 is not None:
        signed = str(out.manifest.get("sha256"))
        if signed != manifest_sha256:
            add(Finding(False, f"the signed manifest has sha256 {signed}, not {manifest_sha256}"))
        else:
            add(Finding(True, f"manifest {out.manifest.get('name')}: sha256 {signed} as asked"))


def approval_problems(
    check: ApprovalCheck, trust: Trust, revoked: Revocations, at: str | None, run_keyids: list[str]
) -> list[str]:
    """Why a verified approval does not count under the trust policy (empty: it counts): its own
    problems, a key that may not approve this change under that name, the run's own key, a revoked key."""
    problems = list(check.problems)
    if check.keyid:
        bad = trust.approver_problem(check.keyid, check.approver, check.intervention, check.claim)
        if bad:
            problems.append(bad)
        if check.keyid in run_keyids:
            problems.append("approved by the key that signed the run (an approval needs a second key)")
        gone = revoked.key(check.keyid, at)
        if gone is not None:
            problems.append(f"the key was {gone.says()}")
    return problems


def _check_approvals(
    out: RunCheck,
    trust: Trust,
    revoked: Revocations,
    approvals: list[ApprovalInput] | None,
    run_keyids: list[str],
    run_signers: dict[str, Ed25519PublicKey],
) -> None:
    add = out.findings.append
    evidence = str(out.statement.predicate.get("evidenceSha256") or "") if out.statement else ""
    if approvals is None:
        approvals = [
            ApprovalInput(r, f"approval.json[{i}]") for i, r in enumerate(_records(out, out.directory), start=1)
        ]
    counted: dict[str, Ed25519PublicKey] = {}
    for item in approvals:
        check = verify_approval(
            item.record,
            expected_statement=out.statement_sha256,
            expected_evidence=evidence or None,
            directory=out.directory,
        )
        problems = approval_problems(check, trust, revoked, item.at, run_keyids)
        who = f"{item.label}: approval by {check.approver or '?'} (key {check.keyid[:16]}, {check.approved_at})"
        if problems:
            add(Finding(None, f"{who} does not count (untrusted, ignored): {'; '.join(problems)}"))
            continue
        name = trust.name_of(check.keyid) or f"{check.approver} (name not bound: key {check.keyid[:16]})"
        if name not in out.approved_by:
            out.approved_by.append(name)
        identity = trust.identities.get(check.keyid)
        if identity is not None:
            counted[check.keyid] = identity.public_key
        carried = (
            f" (it approved run statement {check.statement_sha256[:16]}; this run has the same evidence "
            f"sha256:{evidence[:16]}, so it carries over)"
            if check.carried
            else ""
        )
        add(Finding(True, f"{who} counts{carried}"))
    # approval.dsse.json: signed by an approver who counted, or (approvals carried over from an
    # identical run, written by `gate run`) by the run signer who signed this run
    matched, problems = check_approved_files(out.directory, out.statement_sha256, {**counted, **run_signers})
    for name in matched:
        add(Finding(True, f"{name}: sha256 matches the signed approved-dossier statement"))
    for problem in problems:
        add(Finding(False, problem))


def _records(out: RunCheck, directory: Path) -> list[dict[str, Any]]:
    from gate.trust.approvals import ApprovalRefused

    try:
        return load_approvals(directory)
    except ApprovalRefused as err:
        out.findings.append(Finding(False, str(err)))
        return []


__all__ = ["ApprovalInput", "Finding", "RunCheck", "approval_problems", "check_run", "ref_matches"]
