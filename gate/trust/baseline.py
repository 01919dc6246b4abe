"""Signed, bound baselines: who recorded main's reference answers, for which commit.

`seal_baseline` (`gate record`) binds baseline.json to a commit and signs everything else with the
run key (domain `gate-baseline/v1`). A replay first calls `require_trusted_baseline`, which refuses
(InputError, nothing run) a header that is malformed, mis-keyed, unsigned, not signed by a run
signer, bound to another commit than main's (`main_commit`), or signed for another manifest.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gate._util.atomic import write_bytes_atomic
from gate._util.digest import ref_matches
from gate._util.limited import read_regular
from gate.core.baseline_format import FORMAT, HEADER, git_commit, read_json, reference_key
from gate.errors import InputError
from gate.trust.keys import load_private_key, sign_statement, verify_statement
from gate.trust.policy import Trust

BASELINE_DOMAIN = "gate-baseline/v1"
ENV_BASELINE_COMMIT = "GATE_BASELINE_COMMIT"
_HEADER_TYPES = {"key": str, "identity": dict, "adapter": str, "options": dict, "entries": dict, "shape": dict}


def read_header(directory: Path) -> dict[str, Any]:
    path = directory / HEADER
    if not path.exists():
        raise InputError(str(path), "no baseline here (baseline.json missing); run `gate record` first")
    doc = read_json(path)
    if doc.get("format") != FORMAT:
        raise InputError(
            str(path), f"not a gate baseline (format {doc.get('format')!r}, want {FORMAT})", field="format"
        )
    for name, kind in _HEADER_TYPES.items():
        if not isinstance(doc.get(name), kind):
            raise InputError(str(path), f"missing or not a {kind.__name__}", field=name)
    for question, entry in doc["entries"].items():
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str) or len(entry["sha256"]) != 64:
            raise InputError(str(path), "an entry without a sha256", field=f"entries.{question[:16]}")
    return doc


def _signed_part(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != "signature"}


def recomputed_key(doc: Mapping[str, Any]) -> str:
    return reference_key(doc["identity"], doc["adapter"], doc["options"], version=str(doc.get("gate_version")))


def recording_commit(manifest: Path, cwd: Path | None = None) -> str:
    """The commit a recording is made from (see the module docstring); InputError when none is known."""
    from gate.core.load import load_manifest

    change = load_manifest(manifest).manifest.change.with_ci_commit()
    if not (commit := change.commit or git_commit(cwd or Path.cwd())):
        raise InputError(
            str(manifest),
            "a baseline is bound to the commit it was recorded from, and none is known: set change.commit, "
            "$GATE_COMMIT, or record inside a git checkout",
            field="change.commit",
        )
    return commit


def seal_baseline(directory: Path, key_path: Path, commit: str) -> str:
    """Bind DIR/baseline.json to `commit` and sign it with the run key; return its new sha256."""
    key = load_private_key(key_path)
    doc = read_header(directory)
    if recomputed_key(doc) != doc["key"]:
        raise InputError(str(directory / HEADER), "its key is not the one its identity and options give", field="key")
    doc = {**_signed_part(doc), "commit": commit}
    doc["signature"] = sign_statement(key, BASELINE_DOMAIN, doc)
    data = (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()
    write_bytes_atomic(directory / HEADER, data)
    return hashlib.sha256(data).hexdigest()


def main_commit(explicit: str | None = None, environ: Mapping[str, str] | None = None) -> str | None:
    """The commit the CI says is main's: --baseline-commit, else $GATE_BASELINE_COMMIT, else the base
    commit of a GitHub pull_request event ($GITHUB_EVENT_PATH); None when nothing says."""
    env = os.environ if environ is None else environ
    if explicit:
        return explicit
    if env.get(ENV_BASELINE_COMMIT):
        return env[ENV_BASELINE_COMMIT]
    if env.get("GITHUB_EVENT_NAME", "").startswith("pull_request") and env.get("GITHUB_EVENT_PATH"):
        try:
            event = json.loads(read_regular(Path(env["GITHUB_EVENT_PATH"]), 64 * 1024 * 1024, "event"))
            return str(event["pull_request"]["base"]["sha"])
        except (InputError, ValueError, KeyError, TypeError):
            return None
    return None


def _same_commit(a: str, b: str) -> bool:
    return ref_matches(a, b) or ref_matches(b, a)


def require_trusted_baseline(
    directory: Path, trust: Trust | None, commit: str | None, manifest_name: str | None = None
) -> dict[str, Any]:
    """The baseline's header, when a replay of `manifest_name` may use it; else InputError."""
    path = str(directory / HEADER)
    doc = read_header(directory)
    if recomputed_key(doc) != doc["key"]:
        raise InputError(
            path, "its key is not the one recomputed from the identity, adapter and options it states", field="key"
        )
    if not isinstance(signature := doc.get("signature"), dict):
        raise InputError(
            path, "the baseline is unsigned: record it with `gate record --sign-key KEY`", field="signature"
        )
    if trust is None:
        raise InputError(path, "a recorded baseline needs a trust policy naming its run signers (--trust)")
    if bad := verify_statement(signature, BASELINE_DOMAIN, _signed_part(doc), list(trust.run_signer_keys())):
        raise InputError(path, f"{bad} (run signers of {trust.path})", field="signature")
    if (want := main_commit(commit)) is None:
        raise InputError(
            path,
            f"say which commit is main's: gate run --baseline-commit SHA, ${ENV_BASELINE_COMMIT}, "
            "or a GitHub pull_request event",
            field="commit",
        )
    if not _same_commit(str(doc.get("commit") or ""), want):
        raise InputError(path, f"recorded for commit {doc.get('commit')}, not main's {want}", field="commit")
    if manifest_name is not None and doc.get("manifest") != manifest_name:
        raise InputError(
            path,
            f"signed for manifest {doc.get('manifest')!r} (reference {reference_of(doc)}), not for {manifest_name!r}, "
            "the manifest replaying it: record a baseline for this manifest",
            field="manifest",
        )
    return doc


def reference_of(doc: Mapping[str, Any]) -> str:
    identity = doc.get("identity")
    model = (identity.get("model") or identity.get("name")) if isinstance(identity, Mapping) else None
    return f"{doc.get('adapter')} {model or '?'}, key {str(doc.get('key'))[:16]}"
