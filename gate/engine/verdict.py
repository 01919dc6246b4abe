"""Sealing a run: the verdict, exit code and summary from the check results (`decide`, `tally`), and
the `GateResult`, with the environment it ran in (`describe`), written atomically as `results.json`.
"""

from __future__ import annotations

import platform
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gate
from gate._util.atomic import write_bytes_atomic
from gate._util.clock import now_utc
from gate._util.versions import installed_versions
from gate.core.load import LoadedManifest
from gate.core.manifest import ClaimLevel
from gate.core.plan import Plan
from gate.core.result import CheckResult, Digest, GateResult, KnownBugRecord, Status, Verdict
from gate.engine.checking import settle_covered
from gate.errors import (
    EXIT_AWAITING_APPROVAL,
    EXIT_CHECK_ERROR,
    EXIT_GATE_FAILED,
    EXIT_PARTIAL,
    EXIT_PASS,
    EXIT_UNPROVEN,
)

if TYPE_CHECKING:
    from gate.trust.policy import Trust
    from gate.trust.waivers import RecordedWaiver


def decide(
    checks: list[CheckResult],
    claim: ClaimLevel,
    not_run: list[str] | None = None,
    known_bugs: list[KnownBugRecord] | None = None,
) -> tuple[Verdict, int, str]:
    """Verdict, exit code and summary from the check results. `not_run`: planned checks a partial
    run (`gate run --check`) left out; `known_bugs`: the manifest's declarations as settled."""
    errors = [c.check for c in checks if c.status == Status.error]
    denied = [c.check for c in checks if c.status == Status.failed and c.severity == "deny"]
    partial = f" (partial run: {len(not_run)} planned checks not run)" if not_run else ""
    if errors:
        codes = [c.metrics.get("exit_code") for c in checks if c.status == Status.error]
        code = codes[0] if isinstance(codes[0], int) else EXIT_CHECK_ERROR
        return Verdict.error, code, f"error in {', '.join(errors)}" + partial
    if denied:
        return Verdict.failed, EXIT_GATE_FAILED, f"failed: {', '.join(denied)}" + partial
    unproven = [c for c in checks if c.status == Status.unproven and c.unproven == "deny"]
    if unproven:
        from gate.engine.controls import none_could_show

        powerless = {c.check for c in unproven if none_could_show(c.controls)}
        no_controls = [c.check for c in unproven if c.check in powerless]
        other = [c.check for c in unproven if c.check not in powerless]
        why = []
        if no_controls:
            why.append(
                f"{', '.join(no_controls)} passed, but none of their negative controls could run (or show "
                "anything) on this candidate, so the gate never showed these checks can fail"
            )
        if other:
            why.append(f"{', '.join(other)} could not cover what the policy requires (see each check)")
        return Verdict.unproven, EXIT_UNPROVEN, "unproven: " + "; ".join(why) + partial
    if not_run:
        alone = [c.check for c in checks if c.check not in not_run]
        return (
            Verdict.partial,
            EXIT_PARTIAL,
            f"partial run: {', '.join(alone)} {'was' if len(alone) == 1 else 'were'} run alone and did not fail; "
            f"{len(not_run)} other planned checks were not run ({', '.join(not_run)}), so this is no verdict "
            "on the manifest",
        )
    waived, skipped, warned, not_here = (
        [c.check for c in checks if c.status == status]
        for status in (Status.waived, Status.skip, Status.unproven, Status.not_applicable)
    )
    listed = ((waived, "waived"), (skipped, "skipped"), (not_here, "not applicable"))
    note = "".join(f" ({len(names)} {words}: {', '.join(names)})" for names, words in listed if names)
    counted, lead = tally(checks), ""
    if any(_is_warning(c) for c in checks):  # the tally names what the counts above would
        lead, note = f"{counted}; ", ""
    by_policy = [c.check for c in checks if c.status == Status.unproven and not c.covered_by]
    not_applicable = [c.check for c in checks if c.status == Status.unproven and c.covered_by]
    note += f"; unproven (a warning by policy, not a pass): {', '.join(by_policy)}" if by_policy else ""
    note += f"; unproven-not-applicable (a warning, not a pass): {', '.join(not_applicable)}" if not_applicable else ""
    note += "".join(f"; {b.note}" for b in known_bugs or [] if b.disposition in ("expected", "not-showing", "expired"))
    if claim == ClaimLevel.bounded_degradation:
        from gate.checks.faces import ENVELOPE_CHECKS

        if not any(c.check in ENVELOPE_CHECKS and c.status != Status.skip for c in checks):
            held = "no check judged the claim's envelopes (the plan runs none), and every check that ran held"
        else:
            held = "every deny check held" if waived else "every envelope held"
        return (
            Verdict.awaiting_approval,
            EXIT_AWAITING_APPROVAL,
            f"{lead}{held}; an approximate change waits for a signed approval" + note,
        )
    if waived:
        ran = len(checks) - len(skipped) - len(waived) - len(not_here)
        held = f"{ran} checks passed, {len(waived)} failed and waived"
        return Verdict.passed_with_waivers, EXIT_PASS, lead + held + note
    ran = len(checks) - len(skipped) - len(not_here)
    which = "checks that ran" if skipped else "required checks"
    if warned:
        held = f"{ran - len(warned)} of {ran} {which} passed"
    elif ran == 1:
        held = "the one check that ran passed" if skipped else "the one required check passed"
    else:
        held = f"all {ran} {which} passed"
    return Verdict.passed, EXIT_PASS, (counted if lead else held) + note


def reference_origin(baseline: dict[str, Any] | None) -> str | None:
    """Where the reference's answers came from when they were stored ones, in words for the verdict
    line: a replayed recording (checked to be main's commit before the run) or the reference cache."""
    if not baseline or not baseline.get("answers_read"):
        return None
    read = baseline["answers_read"]
    if baseline.get("kind") == "recorded baseline":
        commit = str(baseline.get("commit") or "")
        return f"reference: main's recording at {commit[:12] or 'an unnamed commit'}, {read} answers"
    if baseline.get("kind") == "reference cache":
        return f"reference: the reference cache, {read} answers read, {baseline.get('answers_computed', 0)} computed"
    return None


def _is_warning(check: CheckResult) -> bool:
    """A result that lets the verdict stand but is not a pass: a warn, an unproven the policy lets
    through, or a failed warn-severity check."""
    return check.status in (Status.warn, Status.unproven) or (
        check.status == Status.failed and check.severity == "warn"
    )


def _gist(check: CheckResult) -> str:
    """A warning in a few words, pytest style: the check and what it warns of (no intervals)."""
    if check.status == Status.unproven:
        return f"{check.check} unproven"
    first = check.message.split(";")[0].rsplit(": ", 1)[-1]
    kept: list[str] = []
    for part in re.sub(r"\s*\[[^\]]*\]", "", first).strip().split(", "):
        if kept and len(", ".join([*kept, part])) > 60:
            kept.append("…")
            break
        kept.append(part)
    return " ".join([check.check, ", ".join(kept)]).replace(", …", " …").strip()


def tally(checks: list[CheckResult]) -> str:
    """What the checks came to, pytest style: `7 passed, 1 warning (phase-performance throughput
    x0.61), 1 not applicable (invalidation)`."""
    warnings = [c for c in checks if _is_warning(c)]
    passed = sum(1 for c in checks if c.status == Status.passed)
    parts = [f"{passed} passed"]
    if warnings:
        noun = "warning" if len(warnings) == 1 else "warnings"
        parts.append(f"{len(warnings)} {noun} ({'; '.join(_gist(c) for c in warnings)})")
    for status, words in (
        (Status.not_applicable, "not applicable"),
        (Status.waived, "waived"),
        (Status.skip, "skipped"),
    ):
        names = [c.check for c in checks if c.status == status]
        parts += [f"{len(names)} {words} ({', '.join(names)})"] if names else []
    return ", ".join(parts)


LIBRARIES = ("torch", "transformers", "datasets", "kvpress", "hqq", "optimum-quanto", "accelerate")
"""Distributions behind a subject's path, recorded in every result (None where not installed): a
cache or press bug lives in one of these, so two runs on releases with and without it differ here."""


def describe(device: str) -> dict[str, Any]:
    """Library versions, python, platform and the device the run used."""
    env: dict[str, Any] = {
        "gate": gate.__version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        **installed_versions(LIBRARIES),
        "device": device,
    }
    if device.startswith("cuda") and "torch" in sys.modules:
        import torch

        if torch.cuda.is_available():
            env["device_name"] = torch.cuda.get_device_name(torch.device(device))
    return env


def seal(
    out_dir: Path,
    loaded: LoadedManifest,
    plan: Plan,
    checks: list[CheckResult],
    *,
    not_run: list[str],
    waivers: list[RecordedWaiver] | None,
    baseline: dict[str, Any] | None,
    subjects: dict[str, Any],
    trust: Trust | None,
    servers: dict[str, Any] | None = None,
    started_at: str,
) -> GateResult:
    """The run's record: the covered checks settled, known bugs and waivers applied, the verdict
    decided, and `results.json` written atomically into `out_dir`."""
    from gate.core.known_bugs import apply_known_bugs

    checks = settle_covered(checks)
    checks, known_bugs = apply_known_bugs(checks, plan.known_bugs)
    if waivers is not None:
        from gate.trust.waivers import apply_waivers

        checks = apply_waivers(loaded, checks, waivers)
    verdict, exit_code, summary = decide(checks, plan.claim, not_run, known_bugs)
    origin = reference_origin(baseline)
    summary += f"; {origin}" if origin else ""
    datasets = {name: str(fp) for c in checks for name, fp in (c.evidence.get("datasets") or {}).items()}
    manifest = loaded.manifest
    result = GateResult(
        gate_version=gate.__version__,
        verdict=verdict,
        exit_code=exit_code,
        summary=summary,
        manifest=manifest.model_dump(mode="json", by_alias=True),
        manifest_digest=Digest(path=str(loaded.path), sha256=loaded.sha256),
        policies=plan.policies,
        site_policy=plan.site_policy,
        baseline=baseline,
        plan=plan.model_dump(mode="json"),
        checks=checks,
        subjects=subjects,
        servers=servers,
        datasets=datasets,
        environment=describe(manifest.subject.device),
        started_at=started_at,
        finished_at=now_utc(),
        trust_policy=Digest(path=trust.path, sha256=trust.sha256) if trust is not None else None,
        known_bugs=known_bugs,
    )
    write_bytes_atomic(out_dir / "results.json", (result.model_dump_json(indent=2) + "\n").encode())
    return result
