"""Known bugs of the subject, declared in the manifest as expected failures (`known_bugs`).

Planned (no torch), a declaration `applies`, is `not-affected` (the installed version is outside
`affects`) or `expired` (ignored, with a warning). After the run an applying one is `expected` (its
check failed with the declared class: status `warn`, the verdict not coloured) or `not-showing` (a
note). Only a `fail` is relaxed: an error, an unproven check or a failure of another class stays.
"""

from __future__ import annotations

from datetime import date

from packaging.requirements import Requirement

from gate._util.versions import installed_version
from gate.core.manifest import KnownBug
from gate.core.result import CheckResult, KnownBugDisposition, KnownBugRecord, Status


def plan_known_bugs(bugs: list[KnownBug], today: date) -> list[KnownBugRecord]:
    """Each declaration's planned disposition on this installation, on `today` (UTC)."""
    out = []
    for bug in bugs:
        requirement = Requirement(bug.affects)
        name, specifier = requirement.name, requirement.specifier
        installed = installed_version(name)
        if bug.expires < today:
            state: KnownBugDisposition = "expired"
            note = f"known bug {bug.id} expired on {bug.expires.isoformat()}: ignored, a failure of {bug.check} counts"
        elif installed is None or not specifier.contains(installed, prereleases=True):
            state = "not-affected"
            here = f"{name} {installed}" if installed else f"{name} is not installed"
            note = f"known bug {bug.id} does not apply: {here}, outside {bug.affects}"
        else:
            state = "applies"
            note = (
                f"known bug {bug.id} applies to {name} {installed} ({bug.affects}): "
                f"{bug.check} may fail with class {bug.bug_class}"
            )
        out.append(KnownBugRecord(**bug.model_dump(mode="json"), installed=installed, disposition=state, note=note))
    return out


def apply_known_bugs(
    checks: list[CheckResult], planned: list[KnownBugRecord]
) -> tuple[list[CheckResult], list[KnownBugRecord]]:
    """Settle the applying declarations against the run's checks: a failure of the declared check
    with the declared class reads as the known bug, expected (status warn); a declaration that did
    not show is a note. Returns the checks and every declaration's final record."""
    applying = [k for k in planned if k.disposition == "applies"]
    settled = [k for k in planned if k.disposition != "applies"]
    out = []
    for check in checks:
        bug_class = (check.diagnosis or {}).get("bug_class")
        match = next((k for k in applying if k.check == check.check and k.bug_class == bug_class), None)
        if check.status != Status.failed or match is None:
            out.append(check)
            continue
        words = f"known bug, expected ({match.link}): {match.id}, class {match.bug_class}, on {match.installed}"
        out.append(
            check.model_copy(
                update={"status": Status.warn, "message": f"{words}; {check.message}", "known_bug": match.id}
            )
        )
    shown = {c.known_bug for c in out if c.known_bug}
    by_check = {c.check: c for c in out}
    for k in applying:
        if k.id in shown:
            note = f"known bug, expected ({k.link}): {k.check} failed with class {k.bug_class} as {k.id} declares"
            settled.append(k.model_copy(update={"disposition": "expected", "note": note}))
            continue
        ran = by_check.get(k.check)
        if ran is None or ran.status == Status.skip:
            settled.append(k.model_copy(update={"disposition": "not-run", "note": f"{k.note}; it did not run here"}))
            continue
        got = (ran.diagnosis or {}).get("bug_class")
        seen = f"is {ran.status.value}" + (f" (class {got})" if got else "")
        note = (
            f"known bug {k.id} not showing: {k.check} {seen}, not a failure of class {k.bug_class}: "
            "fixed upstream? remove the declaration"
        )
        settled.append(k.model_copy(update={"disposition": "not-showing", "note": note}))
    order = {k.id: i for i, k in enumerate(planned)}
    return out, sorted(settled, key=lambda k: order[k.id])
