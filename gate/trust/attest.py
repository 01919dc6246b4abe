"""Signing a run: an in-toto Statement v1 in a DSSE envelope (DIR/attestation.dsse.json), Ed25519.

Every signature covers PAE(payloadType, payload), so an approval can append its own signature
without touching the payload (`add_signature`).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import ValidationError

from gate._util.atomic import inside, write_bytes_atomic
from gate._util.digest import sha256_file
from gate._util.limited import read_regular
from gate.core.result import GateResult
from gate.errors import InputError
from gate.trust.evidence import evidence_digest
from gate.trust.keys import keyid, load_private_key, load_public_key
from gate.trust.statement import (
    BASELINE_SUBJECT,
    PAYLOAD_TYPE,
    PREDICATE_TYPE,
    STATEMENT_TYPE,
    DsseSignature,
    Envelope,
    RunPredicate,
    Statement,
    Subject,
    parse_statement,
)

ENVELOPE_NAME = "attestation.dsse.json"
REQUIRED_SUBJECTS = ("results.json", "dossier.html", "dossier.md")
"""Files every gate attestation must bind (the manifest copy is named in the predicate)."""


def envelope_for(statement: Statement, key: Ed25519PrivateKey) -> Envelope:
    body = statement.canonical()
    return Envelope(
        payloadType=PAYLOAD_TYPE,
        payload=base64.b64encode(body).decode(),
        signatures=[DsseSignature.model_validate(_signature(key, body))],
    )


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def _signature(key: Ed25519PrivateKey, payload: bytes) -> dict[str, str]:
    return {"keyid": keyid(key.public_key()), "sig": base64.b64encode(key.sign(pae(PAYLOAD_TYPE, payload))).decode()}


def statement(out_dir: Path, files: Sequence[str], manifest_file: str) -> Statement:
    """The statement binding `files` (names inside out_dir), the replayed baseline and the commit."""
    raw = (out_dir / "results.json").read_bytes()
    results = json.loads(raw)
    subjects = [Subject(name=name, digest={"sha256": sha256_file(out_dir / name)}) for name in files]
    run = GateResult.model_validate_json(raw)
    if run.baseline and run.baseline.get("sha256"):
        subjects.append(
            Subject(name=f"{BASELINE_SUBJECT}{run.baseline.get('path')}", digest={"sha256": run.baseline["sha256"]})
        )
    change = run.manifest.get("change") or {}
    if change.get("commit"):
        subjects.append(
            Subject(name=str(change.get("repository") or "commit"), digest={"gitCommit": str(change["commit"])})
        )
    pred = RunPredicate.of_run(run, manifest_file)
    pred.evidence_sha256 = evidence_digest(results, {s.name: s.digest["sha256"] for s in subjects[: len(files)]})
    return Statement(subject=subjects, predicateType=PREDICATE_TYPE, predicate=pred.dump())


def sign_directory(out_dir: Path, files: Sequence[str], manifest_file: str, key: Ed25519PrivateKey) -> Path:
    return write_envelope(out_dir / ENVELOPE_NAME, envelope_for(statement(out_dir, files, manifest_file), key))


def write_envelope(path: Path, envelope: Envelope) -> Path:
    return write_bytes_atomic(path, (json.dumps(envelope.dump(), indent=2) + "\n").encode())


ENVELOPE_BYTES = 64 * 1024 * 1024
"""Largest attestation envelope read (its payload lists every signed file)."""


def read_envelope(path: Path) -> tuple[Envelope, bytes]:
    """The envelope and its decoded payload; ValueError saying what is malformed."""
    try:
        envelope = Envelope.model_validate_json(read_regular(path, ENVELOPE_BYTES, "envelope"))
    except InputError as err:
        raise ValueError(f"{path.name}: {err.message}") from None
    except ValidationError:
        raise ValueError(f"{path.name}: not a DSSE envelope (needs payloadType, payload, signatures)") from None
    try:
        return envelope, envelope.payload_bytes()
    except ValueError as err:
        raise ValueError(f"{path.name}: {err}") from None


def verifies(public_key: Ed25519PublicKey, payload: bytes, sig: Any, payload_type: str = PAYLOAD_TYPE) -> bool:
    if not isinstance(sig, str):
        return False
    try:
        public_key.verify(base64.b64decode(sig, validate=True), pae(payload_type, payload))
    except (InvalidSignature, binascii.Error, ValueError):
        return False
    return True


def add_signature(envelope_path: Path, key_path: Path) -> str:
    """Append a signature by `key_path` over the same payload (idempotent); return the key id."""
    key = load_private_key(key_path)
    try:
        envelope, payload = read_envelope(envelope_path)
    except ValueError as err:
        raise InputError(str(envelope_path), str(err)) from None
    if envelope.payloadType != PAYLOAD_TYPE:
        raise InputError(str(envelope_path), f"payloadType is {envelope.payloadType!r}, not {PAYLOAD_TYPE}")
    if not any(verifies(key.public_key(), payload, existing.sig) for existing in envelope.signatures):
        envelope.signatures.append(DsseSignature.model_validate(_signature(key, payload)))
        write_envelope(envelope_path, envelope)
    return keyid(key.public_key())


@dataclass(frozen=True)
class Signer:
    """A trusted key that produced a valid signature."""

    label: str
    keyid: str
    index: int = 0
    """Position of its first signature in the envelope (0: the run's own; approvals add theirs after)."""


@dataclass
class VerifyReport:
    """What `verify_envelope` found; valid when nothing failed."""

    envelope: Path
    signed_by: list[Signer] = field(default_factory=list)
    other_signatures: list[str] = field(default_factory=list)
    """Key ids of signatures that no trusted key verified (e.g. another reviewer's)."""
    matched: list[str] = field(default_factory=list)
    """Names of the signed files whose sha256 matched."""
    failures: list[str] = field(default_factory=list)
    missing: list[Signer] = field(default_factory=list)
    """Keys that had to sign and did not (all keys with `require_all`, else all when none signed)."""
    statement: Statement | None = None
    predicate: RunPredicate | None = None

    @property
    def problems(self) -> list[str]:
        return [f"no valid signature by {s.label} (keyid {s.keyid[:16]}…)" for s in self.missing] + self.failures

    @property
    def valid(self) -> bool:
        return not self.failures and not self.missing and bool(self.signed_by)

    def expect(self, what: str, got: str, want: str) -> None:
        if got != want:
            self.failures.append(f"{what} is {got!r}, expected {want!r}")


def safe_name(name: Any) -> bool:
    """A relative POSIX path inside the dossier directory: no empty, `.` or `..` part, no backslash."""
    if not isinstance(name, str) or not name or "\\" in name or name.startswith("/"):
        return False
    return all(part not in ("", ".", "..") for part in name.split("/"))


def check_files(directory: Path, signed: Mapping[str, str], matched: list[str], failures: list[str]) -> None:
    """Each signed name must be a file inside `directory` (no link out of it) with the signed sha256."""
    for name, digest in signed.items():
        if not safe_name(name):
            failures.append(f"subject {name!r}: not a file name inside the dossier")
            continue
        path = directory / name
        if not inside(path, directory):
            failures.append(f"{name}: leads out of the dossier directory (a link)")
            continue
        if not path.is_file():
            failures.append(f"{name}: signed file is missing")
            continue
        if (actual := sha256_file(path)) != digest:
            failures.append(f"{name}: sha256 {actual} does not match the signed {digest}")
            continue
        matched.append(name)


def _check_subjects(directory: Path, stmt: Statement, pred: RunPredicate | None, report: VerifyReport) -> None:
    signed = stmt.files()
    commits = [s.digest["gitCommit"] for s in stmt.subject if "gitCommit" in s.digest]
    for s in stmt.subject:
        if "gitCommit" not in s.digest and "sha256" not in s.digest:
            report.failures.append(f"subject {s.name!r}: not a file name with a sha256 digest")
    check_files(directory, signed, report.matched, report.failures)
    manifest_file = pred.manifest.file if pred is not None else None
    if not manifest_file:
        report.failures.append("predicate names no manifest file")
    for required in (*REQUIRED_SUBJECTS, *([manifest_file] if manifest_file else [])):
        if required not in signed:
            report.failures.append(f"{required}: not among the signed subjects")
    if "results.json" in report.matched:
        try:
            results = json.loads((directory / "results.json").read_bytes())
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            report.failures.append("results.json: not JSON (malformed or nested too deeply)")
            return
        if pred is not None:
            _check_consistency(pred, results, signed.get(manifest_file or ""), commits, report)
            if pred.evidence_sha256 is not None and pred.evidence_sha256 != evidence_digest(results, signed):
                report.failures.append(
                    "evidenceSha256: the signed evidence digest differs from the one the signed files give"
                )
        baselines = [s.digest.get("sha256") for s in stmt.subject if s.name.startswith(BASELINE_SUBJECT)]
        recorded = (results.get("baseline") or {}).get("sha256")
        if baselines != ([recorded] if recorded else []):
            report.failures.append(f"baseline subject {baselines} does not match results.json's {recorded}")


def _check_consistency(
    pred: RunPredicate,
    results: Mapping[str, Any],
    signed_manifest: str | None,
    commits: list[str],
    report: VerifyReport,
) -> None:
    """The predicate and the commit subject must agree with the signed results.json."""
    if pred.verdict != results.get("verdict"):
        report.failures.append(
            f"predicate verdict {pred.verdict!r} differs from results.json {results.get('verdict')!r}"
        )
    recorded = (results.get("manifest_digest") or {}).get("sha256")
    if signed_manifest is not None and recorded != signed_manifest:
        report.failures.append("manifest: the signed copy's sha256 differs from the digest in results.json")
    if pred.manifest.sha256 != recorded:
        report.failures.append("manifest: the predicate's sha256 differs from the digest in results.json")
    commit = ((results.get("manifest") or {}).get("change") or {}).get("commit")
    if commit and commits != [commit]:
        report.failures.append(f"commit subject {commits} does not match results.json's commit {commit}")


def verify_envelope(
    directory: Path,
    public_keys: Sequence[Path] | Mapping[str, Path | Ed25519PublicKey],
    require_all: bool = True,
) -> VerifyReport:
    """Verify DIR/attestation.dsse.json offline against trusted public keys (each must have signed
    when `require_all`, else at least one). Never raises for a bad envelope: see `failures`."""
    named = dict(public_keys) if isinstance(public_keys, Mapping) else {str(p): p for p in public_keys}
    keys = {label: k if isinstance(k, Ed25519PublicKey) else load_public_key(k) for label, k in named.items()}
    report = VerifyReport(envelope=directory / ENVELOPE_NAME)
    if not report.envelope.is_file():
        report.failures.append(f"{ENVELOPE_NAME}: missing (an UNSIGNED run has no attestation)")
        return report
    try:
        envelope, payload = read_envelope(report.envelope)
    except ValueError as err:
        report.failures.append(str(err))
        return report
    report.expect("payloadType", envelope.payloadType, PAYLOAD_TYPE)
    matched: set[int] = set()
    unsigned: list[Signer] = []
    for label, key in keys.items():
        hits = [i for i, sig in enumerate(envelope.signatures) if verifies(key, payload, sig.sig, envelope.payloadType)]
        (report.signed_by if hits else unsigned).append(Signer(label, keyid(key), hits[0] if hits else -1))
        matched.update(hits)
    report.other_signatures = [sig.keyid or "?" for i, sig in enumerate(envelope.signatures) if i not in matched]
    if not envelope.signatures:
        report.failures.append("the envelope carries no signatures")
    report.missing = unsigned if require_all or not report.signed_by else []
    try:
        stmt = parse_statement(payload)
    except ValueError as err:
        report.failures.append(str(err))
        return report
    report.statement = stmt
    report.expect("statement _type", stmt.type, STATEMENT_TYPE)
    report.expect("predicateType", stmt.predicateType, PREDICATE_TYPE)
    try:
        report.predicate = RunPredicate.read(stmt)
    except ValueError as err:
        report.failures.append(str(err))
    _check_subjects(directory, stmt, report.predicate, report)
    return report
