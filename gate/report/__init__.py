"""The dossier: results.json -> ReportData -> dossier.html, dossier.md, junit.xml (+ attestation).

    write_outputs(result, out_dir, manifest_path, sign_key)

is what `gate run` calls after the runner has written results.json. Rendering reads only the
GateResult (no torch, no model), so an old results.json can be re-rendered years later.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from gate._util.atomic import write_bytes_atomic
from gate.core.result import GateResult
from gate.report.build import Signing, build_report
from gate.report.model import ReportData
from gate.report.render import render_html, render_markdown

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


def copy_manifest(manifest_path: Path, out_dir: Path) -> str:
    """Keep the manifest's exact bytes in out_dir (it is a signed subject); return its file name there."""
    if manifest_path.resolve().parent == out_dir.resolve():
        return manifest_path.name
    suffix = manifest_path.suffix.lower() if manifest_path.suffix.lower() in MANIFEST_SUFFIXES else ".yaml"
    name = f"manifest{suffix}"
    write_bytes_atomic(out_dir / name, manifest_path.read_bytes())
    return name


def write_outputs(
    result: GateResult,
    out_dir: Path,
    manifest_path: Path,
    sign_key: Path | None,
    environ: Mapping[str, str] | None = None,
) -> list[Path]:
    """Render dossier.html, dossier.md, junit.xml into out_dir (atomically: write temp files then
    os.replace), then sign attestation.dsse.json when sign_key is given (else the outputs say
    UNSIGNED). results.json is already written by the runner before this is called.

    Also keeps a copy of the manifest in out_dir (a signed subject) and, under GitHub Actions,
    prints annotations and appends dossier.md to $GITHUB_STEP_SUMMARY.
    """
    from gate.report.github import publish
    from gate.report.junit import junit_xml
    from gate.trust.attest import ENVELOPE_NAME, keyid, load_private_key, sign_directory

    key = load_private_key(sign_key) if sign_key is not None else None  # a bad key fails before any write
    signing = Signing(signed=key is not None, keyid=keyid(key.public_key()) if key is not None else None)
    data = build_report(result, signing)
    markdown = render_markdown(data)
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest_file = copy_manifest(manifest_path, out_dir)
    written = [
        write_bytes_atomic(out_dir / "dossier.html", render_html(data).encode()),
        write_bytes_atomic(out_dir / "dossier.md", markdown.encode()),
        write_bytes_atomic(out_dir / "junit.xml", junit_xml(result, data)),
        out_dir / manifest_file,
    ]
    envelope = out_dir / ENVELOPE_NAME
    if key is not None:
        files = [manifest_file, "results.json", "dossier.html", "dossier.md", "junit.xml"]
        written.append(sign_directory(out_dir, files, manifest_file, key))
    else:
        envelope.unlink(missing_ok=True)  # a stale envelope from an earlier run must not look like ours
    publish(
        data,
        markdown,
        out_dir / "dossier.html",
        os.environ if environ is None else environ,
        manifest_file=result.manifest_digest.path,
    )
    return written


__all__ = ["ReportData", "Signing", "build_report", "render_html", "render_markdown", "write_outputs"]
