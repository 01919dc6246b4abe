"""The dossier: results.json -> ReportData -> dossier.html, dossier.md, junit.xml.

Renders what the runner recorded from the GateResult alone (no torch, no model); it neither signs
nor records (gate.trust does, driven by gate.engine.pipeline).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gate._util.atomic import write_bytes_atomic
from gate.core.result import GateResult
from gate.report.build import Signing, build_report
from gate.report.model import ReportData
from gate.report.next_steps import CommandContext
from gate.report.render import render_html, render_markdown

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass
class WrittenReport:
    """The files one rendering wrote, and what of them an attestation must cover."""

    data: ReportData
    markdown: str
    manifest_file: str
    """The manifest's file name inside out_dir (a signed subject)."""
    files: list[Path]
    """Every file written, in the order written."""
    downloads: list[str] = field(default_factory=list)
    """Files beside the dossier a reader downloads (samples/*.jsonl), as names inside out_dir."""

    @property
    def signed_names(self) -> list[str]:
        """The subjects of the run's attestation, as names inside out_dir."""
        return [self.manifest_file, "results.json", "dossier.html", "dossier.md", "junit.xml", *self.downloads]


def copy_manifest(manifest_path: Path, out_dir: Path) -> str:
    """Keep the manifest's exact bytes in out_dir (it is a signed subject); return its file name there."""
    if manifest_path.resolve().parent == out_dir.resolve():
        return manifest_path.name
    suffix = manifest_path.suffix.lower() if manifest_path.suffix.lower() in MANIFEST_SUFFIXES else ".yaml"
    name = f"manifest{suffix}"
    write_bytes_atomic(out_dir / name, manifest_path.read_bytes())
    return name


def write_report(
    result: GateResult,
    out_dir: Path,
    manifest_path: Path,
    *,
    signer_keyid: str | None = None,
    final_dir: Path | None = None,
    commands: CommandContext | None = None,
) -> WrittenReport:
    """Render dossier.html, dossier.md and junit.xml into out_dir, each replaced atomically, and copy
    the manifest there. `signer_keyid`: the key that will sign (None: UNSIGNED); `final_dir`: where the
    dossier will end up (default out_dir) and `commands`: the ledger and trust policy, for the printed
    commands.
    """
    from gate.report.junit import junit_xml

    data = build_report(
        result,
        Signing(signed=signer_keyid is not None, keyid=signer_keyid),
        out_dir=_shown_dir(final_dir or out_dir),
        commands=commands,
    )
    markdown = render_markdown(data)
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest_file = copy_manifest(manifest_path, out_dir)
    for stale in (out_dir / "samples").glob("*.jsonl"):  # an earlier run's samples must not look like ours
        stale.unlink()
    downloads = []
    for download in data.downloads:
        (out_dir / download.file).parent.mkdir(parents=True, exist_ok=True)
        text = "".join(line + "\n" for line in download.lines)
        downloads.append(write_bytes_atomic(out_dir / download.file, text.encode()))
    files = [
        write_bytes_atomic(out_dir / "dossier.html", render_html(data).encode()),
        write_bytes_atomic(out_dir / "dossier.md", markdown.encode()),
        write_bytes_atomic(out_dir / "junit.xml", junit_xml(result, data)),
        out_dir / manifest_file,
        *downloads,
    ]
    return WrittenReport(
        data=data,
        markdown=markdown,
        manifest_file=manifest_file,
        files=files,
        downloads=[d.file for d in data.downloads],
    )


def _shown_dir(out_dir: Path) -> str:
    """The output directory as a reader would type it: relative to the working directory when inside it."""
    try:
        return out_dir.resolve().relative_to(Path.cwd().resolve()).as_posix() or "."
    except ValueError:
        return str(out_dir)


__all__ = [
    "CommandContext",
    "ReportData",
    "Signing",
    "WrittenReport",
    "build_report",
    "render_html",
    "render_markdown",
    "write_report",
]
