"""What the ledger records for a run: the verdict and the digest of every output (bytes, not objects).

`record_run` appends this body after the dossier and its attestation are written.
"""

from __future__ import annotations

import base64
import hashlib
import json
from contextlib import suppress
from pathlib import Path
from typing import Any

from gate._util.digest import sha256_file
from gate.core.result import GateResult
from gate.errors import GateError
from gate.trust.attest import ENVELOPE_NAME, read_envelope, safe_name
from gate.trust.keys import keyid, load_private_key, public_key_b64
from gate.trust.ledger import RUN_KIND, Ledger, write_receipt
from gate.trust.ledger_records import Entry
from gate.trust.statement import RunPredicate, parse_statement

DOSSIER_FILES = ("results.json", "dossier.html", "dossier.md", "junit.xml", "attestation.dsse.json")


def statement_digest(envelope_path: Path) -> str | None:
    """sha256 of a DSSE envelope's payload: the dossier's digest (it does not change when a signature
    is added, so an approval binds to it rather than to the envelope file)."""
    if not envelope_path.is_file():
        return None
    try:
        envelope = json.loads(envelope_path.read_text(encoding="utf-8"))
        return hashlib.sha256(base64.b64decode(envelope["payload"], validate=True)).hexdigest()
    except (ValueError, KeyError, TypeError, RecursionError):
        return None


def _evidence(envelope_path: Path) -> str | None:
    try:
        _envelope, payload = read_envelope(envelope_path)
        value = RunPredicate.read(parse_statement(payload)).evidence_sha256
    except (OSError, ValueError, RecursionError):
        return None
    return value or None


def _envelope_facts(envelope_path: Path) -> tuple[list[str], list[str]]:
    """The file names the signed statement binds, and the key ids of the envelope's signatures."""
    try:
        envelope = json.loads(envelope_path.read_text(encoding="utf-8"))
        statement = json.loads(base64.b64decode(envelope["payload"], validate=True))
        names = [str(s["name"]) for s in statement.get("subject", []) if "sha256" in s.get("digest", {})]
        return names, [str(s.get("keyid", "")) for s in envelope.get("signatures", [])]
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return [], []


def run_payload(
    result: Any, out_dir: Path, sign_key: Path | None = None, *, dossier_dir: Path | None = None
) -> dict[str, Any]:
    """The ledger body of a run: what was judged, the verdict, and the digest of every output in `out_dir`."""
    manifest = result.manifest
    change = manifest.get("change") or {}
    signed, keyids = _envelope_facts(out_dir / ENVELOPE_NAME)
    names = sorted({*DOSSIER_FILES, *(n for n in signed if safe_name(n))})  # + the manifest copy, the samples
    files = {name: sha256_file(out_dir / name) for name in names if (out_dir / name).is_file()}
    signer = None
    if sign_key is not None and sign_key.is_file():
        with suppress(GateError):
            pub = load_private_key(sign_key).public_key()
            signer = {"keyid": keyid(pub), "public_key": public_key_b64(pub)}
    return {
        "manifest": {
            "name": manifest.get("name"),
            "path": result.manifest_digest.path,
            "sha256": result.manifest_digest.sha256,
        },
        "intervention": manifest.get("intervention"),
        "claim": (manifest.get("claim") or {}).get("level"),
        "approximate": bool(result.plan.get("approximate")),
        "policies": [{"path": d.path, "sha256": d.sha256} for d in result.policies],
        "site_policy": list(result.site_policy),
        "verdict": result.verdict.value,
        "exit_code": result.exit_code,
        "summary": result.summary,
        "change": {
            "repository": change.get("repository"),
            "pull_request": change.get("pull-request"),
            "commit": change.get("commit"),
        },
        "dossier": {
            "dir": str((dossier_dir or out_dir).resolve()),
            "files": files,
            "statement_sha256": statement_digest(out_dir / ENVELOPE_NAME),
            "evidence_sha256": _evidence(out_dir / ENVELOPE_NAME),
            "signature_keyids": keyids,
        },
        "signer": signer,
        "checks": [
            {
                "check": c.check,
                "status": c.status.value,
                "severity": c.severity,
                **({"waiver": c.waiver.ledger_id, "waiver_expired": c.waiver.expired} if c.waiver else {}),
            }
            for c in result.checks
        ],
        "waivers": sorted(
            {
                c.waiver.ledger_id
                for c in result.checks
                if c.waiver and not c.waiver.expired and c.waiver.ledger_id is not None
            }
        ),
        "trust_policy": result.trust_policy.model_dump() if getattr(result, "trust_policy", None) else None,
        "gate_version": result.gate_version,
        "started_at": result.started_at,
        "finished_at": result.finished_at,
    }


def record_run(
    result: GateResult,
    out_dir: Path,
    ledger_path: Path,
    *,
    sign_key: Path | None = None,
    key_path: Path | None = None,
    dossier_dir: Path | None = None,
    extra: dict[str, Any] | None = None,
) -> tuple[Entry, Path]:
    """Append a run's verdict to the ledger and write the receipt `ledger.json` into its dossier; call
    it after every output (and the attestation) is written, so their digests are the final ones."""
    payload = {**run_payload(result, out_dir, sign_key, dossier_dir=dossier_dir), **(extra or {})}
    with Ledger.open(ledger_path, key_path=key_path) as ledger:
        entry, checkpoint = ledger.append(RUN_KIND, payload)
        return entry, write_receipt(out_dir, ledger, entry, checkpoint)
