"""Verifying one dossier by roles (`check_run`: `gate verify DIR`, each run of `gate audit trace`).

Keys count only for the role the trust policy (or the command line) gives them, never once revoked;
only the envelope's first signature is the run's. An approval that does not count is reported and
ignored (anyone who can write the ledger could add one). Whether a change is approximate is decided
here from the signed intervention and claim and the built-in policies, never from the run's results:
an approximate change never stands as PASS, only awaiting-approval until `required-approvals`
distinct approvers signed, then APPROVED; the approved dossier files must match approval.dsse.json,
signed by a counted approver. `RunCheck.deployable` says whether a deploy may ship the verdict
(gate.trust.deployable re-judges the waivers).
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TypeVar

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from gate._util.digest import ref_matches
from gate.core.manifest import ClaimLevel, Intervention
from gate.core.policy import load_policies
from gate.core.result import CheckResult, GateResult, Status
from gate.trust.approval_predicate import ApprovalRefused
from gate.trust.approvals import ApprovalCheck, ApprovalRecord, check_approved_files, load_approvals, verify_approval
from gate.trust.attest import verify_envelope
from gate.trust.landing import LandedApproval, approval_landing
from gate.trust.policy import Trust
from gate.trust.revocation import Revocations
from gate.trust.run_check import PASS, PASS_WITH_WAIVERS, ApprovalInput, RunCheck
from gate.trust.run_check import Finding as Finding
from gate.trust.run_record import statement_digest
from gate.trust.statement import RunPredicate, replayed_baseline

_E = TypeVar("_E", bound=Enum)


def check_run(
    directory: Path,
    trust: Trust,
    *,
    commit: str | None = None,
    manifest_sha256: str | None = None,
    revocations: Revocations | None = None,
    run_time: str | None = None,
    approvals: list[ApprovalInput] | None = None,
    policy_dirs: list[Path] | None = None,
) -> RunCheck:
    """Verify DIR's attestation, commit, manifest and approvals by role. `policy_dirs`: main's site
    policies; `run_time`: when the run was signed (None: a revoked key never counts); `approvals`: None
    reads DIR/approval.json."""
    revoked = revocations or Revocations()
    out = RunCheck(directory=directory, required=trust.policy.required_approvals)
    signers = trust.run_signer_keys()
    keys: dict[str, Path | Ed25519PublicKey] = {_label(trust, k): i.public_key for k, i in signers.items()}
    report = verify_envelope(directory, keys, require_all=False)
    out.statement, out.predicate = report.statement, report.predicate
    out.statement_sha256 = statement_digest(report.envelope) or ""
    for failure in report.failures:
        out.add(False, f"attestation: {failure}")
    counted = []
    for signer in report.signed_by:
        if signer.index != 0:
            out.add(
                None,
                f"signature #{signer.index + 1} by {signer.label} was added to the run's (an approval's), "
                "so it is no run signature",
            )
            continue
        if (gone := revoked.key(signer.keyid, run_time)) is not None:
            out.add(False, f"run signature by {signer.label}: the key was {gone.says()}")
        else:
            counted.append(signer)
            out.add(True, f"run signed by {signer.label}, a run signer")
    if not counted and report.statement is not None:
        others = ", ".join(_label(trust, k) for k in report.other_signatures) or "none"
        out.add(False, f"the run is not signed by a run signer (signatures by: {others})")
    for name in report.matched:
        out.add(True, f"{name}: sha256 matches the signed statement")
    if report.statement is None:
        return out
    _check_results(out, trust)
    for line in out.site_policy or ["site policy: none (the built-in policy rules, unchanged)"]:
        out.add(None, f"the run's plan was changed by a {line}" if out.site_policy else line)
    _check_mains(out, trust, revoked, run_time, policy_dirs or [])
    _check_known_bugs(out, trust)
    _check_binding(out, commit, manifest_sha256)
    run_signers = {s.keyid: signers[s.keyid].public_key for s in counted if s.keyid in signers}
    _check_approvals(out, trust, revoked, approvals, [s.keyid for s in report.signed_by], run_signers)
    return out


def is_approximate(intervention: Intervention | None, claim: ClaimLevel | None) -> bool:
    """A bounded-degradation claim, or an intervention the built-in policies call approximate (a
    run's own --policy-dir cannot say otherwise)."""
    if claim is ClaimLevel.bounded_degradation:
        return True
    rule = load_policies([]).interventions.get(intervention) if intervention is not None else None
    return bool(rule.approximate) if rule is not None else False


def _known(kind: type[_E], value: str | None) -> _E | None:
    """`value` as gate's type (None: absent, or unknown to gate, so no built-in policy calls it approximate)."""
    try:
        return kind(value) if value is not None else None
    except ValueError:
        return None


def _check_results(out: RunCheck, trust: Trust) -> None:
    assert out.statement is not None
    pred = out.predicate or RunPredicate()
    out.approximate = is_approximate(_known(Intervention, pred.intervention), _known(ClaimLevel, pred.claim_level))
    if out.approximate and out.verdict in (PASS, PASS_WITH_WAIVERS):
        out.add(
            False,
            f"an approximate change cannot PASS: its signed verdict is {out.verdict!r}, but "
            f"{pred.intervention}/{pred.claim_level} needs approvals",
        )
    if (results := read_results(out.directory)) is None:
        out.add(False, "results.json: not readable as gate's result record, so its waivers cannot be judged")
    out.waived = [c.check for c in waived_checks(results)]
    used = results.trust_policy if results is not None else None
    if trust.names_bound and used is not None and used.sha256 and used.sha256 != trust.sha256:
        out.other_policy = f"{used.path} (sha256 {used.sha256[:16]})"
        out.add(
            None,
            f"the run judged its waivers under trust policy {out.other_policy}, not the verifier's "
            f"{trust.path} (sha256 {trust.sha256[:16]}): every signature here is judged under the verifier's",
        )


def _check_known_bugs(out: RunCheck, trust: Trust) -> None:
    """A failure the manifest's own known-bug declaration relaxed is the change's word: deployable
    only when the verifier's trust policy names that declaration's id (`known-bugs`)."""
    results = read_results(out.directory)
    accepted = set(trust.policy.known_bugs)
    for bug in results.known_bugs if results is not None else []:
        if bug.disposition != "expected":
            continue
        held = f"known bug {bug.id} declared by the manifest held {bug.check} (class {bug.bug_class}, {bug.affects})"
        if bug.id in accepted:  # main's trust policy names it: the relaxation is main's, not only the change's
            out.add(True, f"{held}: accepted by {trust.path} (known-bugs)")
        else:  # the change relaxed its own failure: the PR job may show it, the deploy never ships it
            out.not_mains.append(f"{held}: a relaxation the change wrote itself, not among {trust.path}'s known-bugs")


def _check_mains(
    out: RunCheck, trust: Trust, revoked: Revocations, run_time: str | None, policy_dirs: list[Path]
) -> None:
    """Every file that shaped the verdict must be main's: the plan's policy files (by sha256, none
    missing, none added) and a replayed baseline's signer; each that is not goes to `out.not_mains`."""
    pred = out.predicate or RunPredicate()
    refuse = out.not_mains.append
    mains = {d.sha256: d.path for d in load_policies(policy_dirs).digests()}
    named = "the built-in policies" + "".join(f" + {d}" for d in policy_dirs)
    listed = trust.policy.site_policies if not policy_dirs else []
    if listed:
        mains.update({digest: f"(site-policies of {trust.path})" for digest in listed})
        named += f" + the site-policies of {trust.path}"
    signed = {str(p.get("sha256")): str(p.get("path")) for p in pred.policies}
    for digest, path in signed.items():
        if digest not in mains:
            refuse(
                f"policy {path} (sha256 {digest}): the run's plan was built from it, "
                f"not one of main's policy files ({named})"
            )
    for digest, path in mains.items():
        if digest not in signed:
            refuse(f"policy {path} (sha256 {digest}): main's policy file took no part in the run's plan")
    if not out.not_mains:
        out.add(True, f"the plan was built from main's policy files ({named}), by sha256")
    results = read_results(out.directory)
    stored = (results.baseline or {}) if results is not None else {}
    if stored.get("kind") == "reference cache" and stored.get("answers_read"):
        out.add(
            None,
            f"the reference read {stored.get('answers_read')} answers from reference cache {stored.get('path')}, "
            "which no run signer signed (only a recorded baseline's signer is judged here)",
        )
    baseline = pred.baseline
    if baseline is None:
        baseline = replayed_baseline(results.subjects) if results is not None else None
    if baseline is not None:
        _check_baseline(out, trust, revoked, run_time, baseline)


def _check_baseline(
    out: RunCheck, trust: Trust, revoked: Revocations, run_time: str | None, baseline: dict[str, object]
) -> None:
    where = f"baseline {baseline.get('path')}/baseline.json (sha256 {baseline.get('sha256')})"
    signer = str(baseline.get("signed_by") or "")
    gone = revoked.key(signer, run_time) if signer else None
    if not signer:
        problem = "it names no signer"
    elif trust.run_signer_problem(signer) is not None:
        problem = f"signed by {_label(trust, signer)}, not a run signer of {trust.path}"
    elif gone is not None:
        problem = f"signed by {_label(trust, signer)}, whose key was {gone.says()}"
    elif baseline.get("signed_for_manifest") != out.manifest.name:
        problem = f"signed for manifest {baseline.get('signed_for_manifest')!r}, not {out.manifest.name!r}"
    else:
        out.add(
            True,
            f"{where}: signed by {_label(trust, signer)}, a run signer, for commit {baseline.get('signed_for_commit')}",
        )
        return
    out.not_mains.append(f"{where}: {problem}")


def read_results(directory: Path) -> GateResult | None:
    """DIR/results.json (None: unreadable, or not a result record)."""
    try:
        return GateResult.model_validate_json((directory / "results.json").read_bytes())
    except (OSError, ValueError, RecursionError):  # ValidationError is a ValueError
        return None


def waived_checks(results: GateResult | None) -> list[CheckResult]:
    return [c for c in results.checks if c.status is Status.waived] if results is not None else []


def _label(trust: Trust, keyid: str) -> str:
    name = trust.name_of(keyid)
    return f"{name} (key {keyid[:16]})" if name else f"key {keyid[:16]}"


def _check_binding(out: RunCheck, commit: str | None, manifest_sha256: str | None) -> None:
    if commit is not None:
        if out.commit is None:
            out.add(False, f"the signed statement names no commit; {commit} was asked for")
        elif not ref_matches(out.commit, commit):
            out.add(False, f"the signed statement is for commit {out.commit}, not {commit}")
        else:
            out.add(True, f"commit {out.commit}: the one asked for")
    if manifest_sha256 is not None:
        signed = str(out.manifest.sha256)
        if signed != manifest_sha256:
            out.add(False, f"the signed manifest has sha256 {signed}, not {manifest_sha256}")
        else:
            out.add(True, f"manifest {out.manifest.name}: sha256 {signed} as asked")


def approval_problems(
    check: ApprovalCheck, trust: Trust, revoked: Revocations, at: str | None, run_keyids: list[str]
) -> list[str]:
    """Why a verified approval does not count under the trust policy (empty: it counts)."""
    problems = list(check.problems)
    if check.keyid:
        if bad := trust.approver_problem(check.keyid, check.approver, check.intervention, check.claim):
            problems.append(bad)
        if check.keyid in run_keyids:
            problems.append("approved by the key that signed the run (an approval needs a second key)")
        if (gone := revoked.key(check.keyid, at)) is not None:
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
    evidence = (out.predicate.evidence_sha256 or "") if out.predicate is not None else ""
    if approvals is None:
        approvals = [
            ApprovalInput(r, f"approval.json[{i}]") for i, r in enumerate(_records(out, out.directory), start=1)
        ]
    counted: dict[str, Ed25519PublicKey] = {}
    for item in approvals:
        landed = _landed(item.record, out)  # an approval of the commit this run's commit lands
        check = verify_approval(
            item.record,
            expected_statement=out.statement_sha256,
            expected_evidence=(landed.evidence if landed else evidence) or None,
            directory=out.directory,
        )
        label = landed.says(item.label) if landed else item.label
        who = f"{label}: approval by {check.approver or '?'} (key {check.keyid[:16]}, {check.approved_at})"
        if problems := approval_problems(check, trust, revoked, item.at, run_keyids):
            out.add(None, f"{who} does not count (untrusted, ignored): {'; '.join(problems)}")
            continue
        name = trust.name_of(check.keyid) or f"{check.approver} (name not bound: key {check.keyid[:16]})"
        if name not in out.approved_by:
            out.approved_by.append(name)
        if (identity := trust.identities.get(check.keyid)) is not None:
            counted[check.keyid] = identity.public_key
        carried = (
            f" (it approved run statement {check.statement_sha256[:16]}; this run has the same evidence "
            f"sha256:{check.evidence_sha256[:16]}{', its commit put back' if landed else ''}, so it carries over)"
            if check.carried
            else ""
        )
        out.add(True, f"{who} counts{carried}")
    # approval.dsse.json: signed by an approver who counted, or (approvals carried over from an
    # identical run, written by `gate run`) by the run signer who signed this run
    matched, problems = check_approved_files(out.directory, out.statement_sha256, {**counted, **run_signers})
    for name in matched:
        out.add(True, f"{name}: sha256 matches the signed approved-dossier statement")
    for problem in problems:
        out.add(False, problem)


def _landed(record: ApprovalRecord | None, out: RunCheck) -> LandedApproval | None:
    evidence = out.predicate.evidence_sha256 if out.predicate is not None else None
    if record is None or record.evidence_sha256 in (None, evidence):
        return None
    return approval_landing(record, out.directory, out.commit)


def _records(out: RunCheck, directory: Path) -> list[ApprovalRecord]:
    try:
        return load_approvals(directory)
    except ApprovalRefused as err:
        out.add(False, str(err))
        return []
