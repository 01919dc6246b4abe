"""GitHub Actions outputs: workflow-command annotations and the job summary.

Under GITHUB_ACTIONS=true: at most ten `::error` (one per failing or erroring check, a `::warning`
on a verdict that held) on the first changed file among the manifest's `change.paths`
($GATE_CHANGED_FILES), else on the manifest; a `::warning` per unproven check; then one `::notice`
with the verdict. $GATE_ANNOTATIONS redirects the lines to a file; dossier.md is appended to
$GITHUB_STEP_SUMMARY when set.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TextIO

from gate._util.text import printable
from gate.report.model import ReportData

MAX_ERRORS = 10


def _data(text: str) -> str:
    """Escape a workflow-command message (GitHub's escapeData), after control characters and bidi controls
    are made visible (gate._util.text.printable): a quoted engine error cannot steer the log's terminal."""
    return str(printable(text)).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    """Escape a workflow-command property value (GitHub's escapeProperty)."""
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def workflow_commands(
    data: ReportData, dossier: Path, manifest_file: str | None = None, change_files: Sequence[str] = ()
) -> list[str]:
    """The workflow-command lines: at most MAX_ERRORS errors (failing checks) and warnings (unproven),
    then the summary notice; a failure is annotated on the first `change_files` entry, else the manifest."""
    denied = [f for f in data.failures if f.status in ("FAIL", "ERROR")]
    amber = [f for f in data.failures if f.status not in ("FAIL", "ERROR")]
    target = change_files[0] if change_files else manifest_file
    where = f"file={_property(target)}," if target else ""
    lines: list[str] = []
    for unproven in amber[:MAX_ERRORS]:
        title = f"gate {unproven.check} {unproven.status} (step {unproven.step})"
        lines.append(f"::warning {where}title={_property(title)}::{_data(unproven.message)}")
    for failure in denied[:MAX_ERRORS]:
        parts = [failure.message]
        if failure.detected_at:
            parts.append(f"first failed at {failure.detected_at}")
        if failure.bug_class:
            parts.append(f"likely bug class: {failure.bug_class}")
        also = [f for f in [*change_files[1:], *([manifest_file] if manifest_file and change_files else [])] if f]
        if also:
            parts.append(f"also concerns {', '.join(also)}")
        title = f"gate {failure.check} {failure.status} (step {failure.step})"
        kind = "warning" if data.held else "error"
        lines.append(f"::{kind} {where}title={_property(title)}::{_data('; '.join(parts))}")
    summary = f"{data.banner.label} ({data.banner.signed_label}): {data.banner.summary}. Dossier: {dossier}"
    left = max(0, len(denied) - MAX_ERRORS) + max(0, len(amber) - MAX_ERRORS)
    if left:
        summary += f" ({left} more checks not annotated: every one is in the job summary)"
    summary += "".join(f" | {note}" for note in data.banner.notes)
    lines.append(f"::notice title={_property('gate verdict')}::{_data(summary)}")
    return lines


def _workspace_relative(path: str | None, environ: Mapping[str, str]) -> str | None:
    """Annotations point at repository-relative files; anything else is left out."""
    if not path:
        return None
    candidate = Path(path)
    if not candidate.is_absolute():
        return candidate.as_posix()
    workspace = environ.get("GITHUB_WORKSPACE")
    if workspace and candidate.is_relative_to(workspace):
        return candidate.relative_to(workspace).as_posix()
    return None


def change_files(paths: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    """The manifest's `change.paths` that the pull request changed ($GATE_CHANGED_FILES, one path a line);
    without it every repository-relative path."""
    named = [p for p in (_workspace_relative(p, environ) for p in paths) if p]
    listed = environ.get("GATE_CHANGED_FILES")
    if listed is None:
        return named
    lines = Path(listed).read_text(encoding="utf-8").splitlines() if Path(listed).is_file() else listed.split()
    changed = {Path(line.strip()).as_posix() for line in lines if line.strip()}
    return [p for p in named if p in changed]


def publish(
    data: ReportData,
    markdown: str,
    dossier: Path,
    environ: Mapping[str, str],
    manifest_file: str | None = None,
    stream: TextIO | None = None,
    paths: Sequence[str] = (),
) -> None:
    """Emit annotations and append the job summary when running under GitHub Actions. `paths`: the
    manifest's `change.paths`; failures are also annotated on those the pull request changed."""
    if environ.get("GITHUB_ACTIONS") == "true":
        files = change_files(paths, environ)
        lines = workflow_commands(data, dossier, _workspace_relative(manifest_file, environ), files)
        collect = environ.get("GATE_ANNOTATIONS")
        if collect:  # the Action caps the annotations over every manifest of its step
            with Path(collect).open("a", encoding="utf-8") as fh:
                fh.writelines(line + "\n" for line in lines)
        else:
            out = stream or sys.stdout
            print(*lines, sep="\n", file=out)  # never empty: the verdict notice is always last
            out.flush()
    summary = environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with Path(summary).open("a", encoding="utf-8") as fh:
            fh.write(markdown if markdown.endswith("\n") else markdown + "\n")
