"""The "What next" box: the exact commands a reader runs after a verdict that is not a plain pass.

A failing, erroring or unproven check that ran: reproduce it (`gate run … --check NAME`, with the
checks in its `covered_by`), then a wider sweep up to where prefix-sweep's failure starts; awaiting
approval: `gate approve`, first; a waived check: reproduce it before the waiver expires; a signed
dossier that is not a plain pass: `gate verify` it. Each step carries the exit code it ends with,
derived from this dossier's own results (tests/report/test_next_steps_run.py runs them all), and
names the manifest, output directory (`DIR` when unknown), ledger and trust policy the run used.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from gate.core.result import GateResult, Status
from gate.errors import EXIT_CHECK_ERROR, EXIT_GATE_FAILED, EXIT_NOT_DEPLOYABLE, EXIT_PARTIAL, EXIT_PASS, EXIT_UNPROVEN
from gate.report.fmt import as_float
from gate.report.model import CheckSection, NextStep
from gate.report.words import VERDICTS

SWEEP_CHECK = "prefix-sweep"
FAILING = ("fail", "error", "unproven")
"""Statuses whose check gets a "reproduce it alone" command."""
WIDE_LOG_SPACED = 512
APPROVE_REASON = "why this envelope is acceptable"


@dataclass(frozen=True)
class CommandContext:
    """What a run used that the commands it prints must name as well."""

    ledger: str | None = None
    """The ledger the run recorded into (as given, or the default it found); None: none."""
    trust: str | None = None
    """The trust policy the run judged waivers under; None: none found."""

    def options(self) -> list[str]:
        """`--ledger L --trust T`, each when known."""
        words = []
        if self.ledger:
            words += ["--ledger", self.ledger]
        if self.trust:
            words += ["--trust", self.trust]
        return words


def _quoted(words: Sequence[str]) -> str:
    return " ".join(shlex.quote(w) for w in words)


def _run(manifest: str, out: str, checks: Sequence[str], *params: str, options: Sequence[str] = ()) -> str:
    flags = [w for check in checks for w in ("--check", check)] + [w for p in params for w in ("--param", p)]
    return _quoted(["gate", "run", manifest, "--out", out, *flags, *options])


def with_stand_ins(result: GateResult, check: str) -> list[str]:
    """`check` and the planned checks in its `covered_by`, in plan order: without them a run of it stays
    unproven."""
    covered = next((set(c.covered_by) for c in result.checks if c.check == check), set())
    return [c.check for c in result.checks if c.check == check or c.check in covered]


def _label(verdict: str) -> str:
    return VERDICTS[verdict][0]


def expected_run(result: GateResult, only: Sequence[str]) -> tuple[int, str]:
    """Exit code and verdict label of `gate run MANIFEST --check A ...` from this dossier's results:
    the named checks as recorded, every other one not run, in gate.engine.verdict.decide's order."""
    chosen = [c for c in result.checks if c.check in only]
    if len(chosen) == len(result.checks):
        return result.exit_code, _label(result.verdict.value)
    errors = [c for c in chosen if c.status == Status.error]
    if errors:
        code = errors[0].metrics.get("exit_code")
        return code if isinstance(code, int) else EXIT_CHECK_ERROR, _label("error")
    if any(c.status == Status.failed and c.severity == "deny" for c in chosen):
        return EXIT_GATE_FAILED, _label("fail")
    if any(c.status == Status.unproven and c.unproven == "deny" for c in chosen):
        return EXIT_UNPROVEN, _label("unproven")
    return EXIT_PARTIAL, _label("partial")


def expected_verify(result: GateResult, ledger: bool, trust: bool) -> tuple[int, str]:
    """Exit code of `gate verify` on this signed dossier once the steps before it ran: 0 for a
    deployable verdict (waivers and approvals judged under the run's trust policy), else 7."""
    verdict = result.verdict.value
    if verdict == "pass" or (verdict == "pass-with-waivers" and ledger):
        return EXIT_PASS, "deployable"
    if verdict == "awaiting-approval" and trust:
        return EXIT_PASS, "deployable once approved"
    return EXIT_NOT_DEPLOYABLE, "NOT DEPLOYABLE"


def _step(title: str, command: str, note: str, expected: tuple[int, str]) -> NextStep:
    return NextStep(title=title, command=command, note=note, expect_exit=expected[0], expect=expected[1])


def _first_length(section: CheckSection) -> int | None:
    if section.sweep is not None and section.sweep.first_failure is not None:
        return int(section.sweep.first_failure)
    if section.detected_at:
        value = as_float(section.detected_at.split()[-1])
        return int(value) if value is not None else None
    return None


def next_steps(
    result: GateResult,
    sections: Sequence[CheckSection],
    out_dir: str | None,
    commands: CommandContext | None = None,
    *,
    signed: bool = True,
) -> list[NextStep]:
    """What to do next, most useful first; empty for a plain pass. `signed`: whether the dossier is
    signed (an unsigned one gets no `gate verify` step: it could only fail)."""
    manifest = result.manifest_digest.path or "MANIFEST"
    out = out_dir or "DIR"
    context = commands or CommandContext(trust=result.trust_policy.path if result.trust_policy else None)
    verdict = result.verdict.value
    steps: list[NextStep] = []
    ran = {c.check for c in result.checks if c.exercise or c.status.value != "unproven"}
    # an unproven check that exercised nothing could not run on this path: alone, it cannot either
    failing = [s for s in sections if s.status in FAILING and s.check in ran and s.severity == "deny"]
    failing += [s for s in sections if s.status in FAILING and s.check in ran and s.severity != "deny"]
    planned = {s.check for s in sections}
    for s in failing:
        checks = with_stand_ins(result, s.check)
        others = [c for c in checks if c != s.check]
        steps.append(
            _step(
                f"Reproduce {s.check} alone" if not others else f"Reproduce {s.check} with {', '.join(others)}",
                _run(manifest, f"{out}-{s.check}", checks) + " -v",
                "runs only this check of the plan (the result says the rest were not run; never a PASS)"
                if not others
                else f"runs only these checks of the plan: {', '.join(others)} stand in for {s.check} at model "
                "level, so it is judged as here (the result says the rest were not run; never a PASS)",
                expected_run(result, checks),
            )
        )
    sweep = next((s for s in failing if s.check == SWEEP_CHECK), None)
    length = _first_length(sweep) if sweep is not None else None
    if sweep is not None and length is not None and SWEEP_CHECK in planned:
        # up to prefix-sweep's own first failing length: the dense sweep runs that length again, so
        # it ends as the dossier's prefix-sweep did
        steps.append(
            _step(
                f"Find where it starts: every prefix length up to {length}",
                _run(
                    manifest,
                    f"{out}-wide",
                    [SWEEP_CHECK],
                    f"{SWEEP_CHECK}.every_length_up_to={max(length, 1)}",
                    f"{SWEEP_CHECK}.log_spaced={WIDE_LOG_SPACED}",
                ),
                f"{SWEEP_CHECK} first failed at {sweep.detected_at or length}; a dense sweep below it finds the "
                "first failing length, and the log-spaced lengths reach the longest prefix",
                expected_run(result, [SWEEP_CHECK]),
            )
        )
    if verdict == "awaiting-approval":  # the decision asked of this reader comes first
        steps.insert(
            0,
            _step(
                "Approve it, if the envelope above is acceptable",
                _quoted(["gate", "approve", out, "--key", "YOUR.key", "--reason", APPROVE_REASON, *context.options()]),
                "needs an approver in the trust policy for this intervention (docs/audit.md); review the "
                "slices and download the flipped samples first",
                (EXIT_PASS, "approval recorded"),
            ),
        )
    for s in sections:
        if s.waiver is not None:
            steps.append(
                _step(
                    f"Fix {s.check} before its waiver "
                    + ("expired" if s.waiver.expired else f"expires on {s.waiver.expires}"),
                    _run(manifest, f"{out}-{s.check}", [s.check], options=context.options()),
                    f"waived by {s.waiver.approver}: {s.waiver.reason}",
                    expected_run(result, [s.check]),
                )
            )
    if steps and verdict != "pass" and signed:
        local_ledger = context.ledger if context.ledger and "://" not in context.ledger else None
        steps.append(
            _step(
                "Verify this dossier offline",
                _quoted(
                    ["gate", "verify", out, *(["--trust", context.trust] if context.trust else ["--run-key", "CI.pub"])]
                    + (["--ledger", local_ledger] if local_ledger else [])
                ),
                "checks the signature, the digests and the verdict by role"
                + ("" if context.trust else " (CI.pub: the run signer's public key)")
                + (", and the ledger's revocations" if local_ledger else "")
                + ("; run it after the approval above" if verdict == "awaiting-approval" and context.trust else "")
                + " (docs/audit.md)",
                expected_verify(result, local_ledger is not None, context.trust is not None),
            )
        )
    return steps
