"""The "What next" box: the exact commands a reader runs after a verdict that is not a plain pass.

- a failing or erroring check (or an unproven one that ran; one that could not run here cannot
  run alone either): reproduce it alone (`gate run … --check NAME`), then a wider sweep
  that pins down where the failure starts (every prefix length up to the first failing one);
- awaiting approval: the `gate approve` command for this dossier's directory, first;
- a waived check: reproduce it before the waiver expires.

Commands name the manifest as the run recorded it, the output directory the dossier was written
to (`DIR` when unknown, e.g. a dossier re-rendered from results.json alone), and the ledger and
trust policy the run used (`CommandContext`), so that each runs as printed (only the approver's
key, `YOUR.key`, is the reader's to fill in).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from gate.core.result import GateResult
from gate.report.fmt import as_float
from gate.report.model import CheckSection, NextStep

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


def _run(manifest: str, out: str, check: str, *params: str) -> str:
    words = ["gate", "run", manifest, "--out", out, "--check", check]
    for param in params:
        words += ["--param", param]
    return _quoted(words)


def _first_length(section: CheckSection) -> int | None:
    if section.sweep is not None and section.sweep.first_failure is not None:
        return int(section.sweep.first_failure)
    if section.detected_at:
        value = as_float(section.detected_at.split()[-1])
        return int(value) if value is not None else None
    return None


def next_steps(
    result: GateResult, sections: Sequence[CheckSection], out_dir: str | None, commands: CommandContext | None = None
) -> list[NextStep]:
    """What to do next, most useful first; empty for a plain pass."""
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
        steps.append(
            NextStep(
                title=f"Reproduce {s.check} alone",
                command=_run(manifest, f"{out}-{s.check}", s.check) + " -v",
                note="runs only this check of the plan (the result says the rest were not run; never a PASS)",
            )
        )
    sweep_lengths = [(s, n) for s in failing if (n := _first_length(s)) is not None]
    if sweep_lengths and SWEEP_CHECK in planned:
        section, length = min(sweep_lengths, key=lambda item: item[1])
        steps.append(
            NextStep(
                title=f"Find where it starts: every prefix length up to {length}",
                command=_run(
                    manifest,
                    f"{out}-wide",
                    SWEEP_CHECK,
                    f"{SWEEP_CHECK}.every_length_up_to={max(length, 1)}",
                    f"{SWEEP_CHECK}.log_spaced={WIDE_LOG_SPACED}",
                ),
                note=f"{section.check} first failed at {section.detected_at or length}; a dense sweep below it "
                "finds the first failing length, and the log-spaced lengths reach the longest prefix",
            )
        )
    if verdict == "awaiting-approval":  # the decision asked of this reader comes first
        steps.insert(
            0,
            NextStep(
                title="Approve it, if the envelope above is acceptable",
                command=_quoted(
                    ["gate", "approve", out, "--key", "YOUR.key", "--reason", APPROVE_REASON, *context.options()]
                ),
                note="needs an approver in the trust policy for this intervention (docs/audit.md); review the "
                "slices and download the flipped samples first",
            ),
        )
    for s in sections:
        if s.waiver is not None:
            steps.append(
                NextStep(
                    title=f"Fix {s.check} before its waiver "
                    + ("expired" if s.waiver.expired else f"expires on {s.waiver.expires}"),
                    command=_run(manifest, f"{out}-{s.check}", s.check),
                    note=f"waived by {s.waiver.approver}: {s.waiver.reason}",
                )
            )
    if steps and verdict != "pass":
        steps.append(
            NextStep(
                title="Verify this dossier offline",
                command=_quoted(
                    ["gate", "verify", out, *(["--trust", context.trust] if context.trust else ["--run-key", "CI.pub"])]
                    + (["--ledger", context.ledger] if context.ledger and "://" not in context.ledger else [])
                ),
                note="checks the signature, the digests and the verdict by role"
                + ("" if context.trust else " (CI.pub: the run signer's public key)")
                + (", and the ledger's revocations" if context.ledger and "://" not in context.ledger else "")
                + " (docs/audit.md)",
            )
        )
    return steps
