"""GitHub Actions outputs: workflow-command annotations and the job summary.

Under GITHUB_ACTIONS=true: for at most ten failing or erroring deny checks an `::error` on
the manifest and on each of the manifest's `change.paths` that the pull request changed
($GATE_CHANGED_FILES, written by the gate Action), then one `::notice` with the verdict. When
$GITHUB_STEP_SUMMARY is set, dossier.md is appended to it (render_markdown keeps it under 1 MiB).
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
    """The workflow-command lines: up to MAX_ERRORS errors, then the summary notice. Each failure is
    annotated on the manifest and on every `change_files` entry (the change's own files that the
    pull request touched), so the reviewer sees it in the diff."""
    denied = [f for f in data.failures if f.status in ("FAIL", "ERROR")]
    lines: list[str] = []
    targets: list[str | None] = [*([manifest_file] if manifest_file else []), *change_files] or [None]
    where = f"file={_property(manifest_file)}," if manifest_file else ""
    for unproven in [f for f in data.failures if f.status == "UNPROVEN"][:MAX_ERRORS]:
        title = f"gate {unproven.check} UNPROVEN (step {unproven.step})"
        lines.append(f"::warning {where}title={_property(title)}::{_data(unproven.message)}")
    for failure in denied[:MAX_ERRORS]:
        parts = [failure.message]
        if failure.detected_at:
            parts.append(f"first failed at {failure.detected_at}")
        if failure.bug_class:
            parts.append(f"likely bug class: {failure.bug_class}")
        title = f"gate {failure.check} {failure.status} (step {failure.step})"
        for target in targets:
            where = f"file={_property(target)}," if target else ""
            lines.append(f"::error {where}title={_property(title)}::{_data('; '.join(parts))}")
    summary = f"{data.banner.label} ({data.banner.signed_label}): {data.banner.summary}. Dossier: {dossier}"
    if len(denied) > MAX_ERRORS:
        summary += f" ({len(denied) - MAX_ERRORS} more failing checks not annotated)"
    for note in data.banner.notes:
        summary += f" | {note}"
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
    """The manifest's `change.paths` that the pull request changed. $GATE_CHANGED_FILES (one path a
    line, written by the gate Action from `git diff --name-only BASE...HEAD`) says which; without it
    every named path that is repository-relative is kept."""
    named = [p for p in (_workspace_relative(p, environ) for p in paths) if p]
    listed = environ.get("GATE_CHANGED_FILES")
    if listed is None:
        return named
    changed = set()
    for line in Path(listed).read_text(encoding="utf-8").splitlines() if Path(listed).is_file() else listed.split():
        if line.strip():
            changed.add(Path(line.strip()).as_posix())
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
        out = stream or sys.stdout
        files = change_files(paths, environ)
        for line in workflow_commands(data, dossier, _workspace_relative(manifest_file, environ), files):
            print(line, file=out)
        out.flush()
    summary = environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with Path(summary).open("a", encoding="utf-8") as fh:
            fh.write(markdown if markdown.endswith("\n") else markdown + "\n")
