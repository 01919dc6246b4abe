"""The evidence digest: what an approval of an approximate change binds to, beyond one dossier.

A dossier's digest changes on every run (times and clocks differ); the evidence digest is the sha256
of a canonical document (`evidence_document`) of what the verdict rests on, from the signed
results.json and sample files, with each policy file's path written as `policy:SHA256`. So an
identical re-run of an approved change has the same evidence digest and `gate run` finds its
approval in the ledger (gate.trust.carry); any change to any of it needs a new approval.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

EVIDENCE_FORMAT = "gate-evidence/v1"
SAMPLES_PREFIX = "samples/"
UNBOUND_METRICS_STEP = 6
"""The release-gate step whose controls (timed) are not bound, only its outcome."""
BOUND_SUFFIX = ".bound"
ENVELOPE_COUNTS = ("envelopes", "envelopes_held", "samples")
HELD = ("pass", "warn")
"""Check statuses the verdict reads alike (a warning never fails the gate)."""


def evidence_document(results: Mapping[str, Any], samples: Mapping[str, str]) -> dict[str, Any]:
    """The document whose digest an approval binds to; `samples`: sample file name -> sha256."""
    from gate.checks.faces import ENVELOPE_CHECKS  # the check faces, read when a document is built

    manifest = results.get("manifest") or {}
    change = manifest.get("change") or {}
    checks = []
    for check in results.get("checks") or []:
        step = check.get("step")
        status = check.get("status")
        row: dict[str, Any] = {
            "check": check.get("check"),
            "severity": check.get("severity"),
            "step": step,
            "outcome": "held" if status in HELD else status,
        }
        if check.get("known_bug"):
            row["known_bug"] = check["known_bug"]  # held only as the manifest's declared known bug
        if step != UNBOUND_METRICS_STEP:
            row["controls"] = {c.get("fault"): c.get("outcome") for c in check.get("controls") or []}
        if check.get("check") in ENVELOPE_CHECKS:
            metrics = check.get("metrics") or {}
            row["bounds"] = {k: v for k, v in metrics.items() if k.endswith(BOUND_SUFFIX) or k in ENVELOPE_COUNTS}
        checks.append(row)
    plan = dict(results.get("plan") or {})
    if not plan.get("known_bugs"):
        plan.pop("known_bugs", None)  # a run declaring none binds what runs before known bugs bound
    known = list(results.get("known_bugs") or [])
    return {
        **({"known_bugs": known} if known else {}),
        "format": EVIDENCE_FORMAT,
        "manifest": {"name": manifest.get("name"), "sha256": (results.get("manifest_digest") or {}).get("sha256")},
        "commit": change.get("commit"),
        "plan": _without_paths(plan, results),
        "policies": sorted(str(d.get("sha256")) for d in results.get("policies") or []),
        "site_policy": _without_paths(list(results.get("site_policy") or []), results),
        "subjects": results.get("subjects") or {},
        "datasets": results.get("datasets") or {},
        "baseline": (results.get("baseline") or {}).get("sha256"),
        "checks": checks,
        "samples": dict(sorted(samples.items())),
        "verdict": results.get("verdict"),
    }


def _without_paths(value: Any, results: Mapping[str, Any]) -> Any:
    """`value` with each policy file's path in it replaced by `policy:SHA256`."""
    text = json.dumps(value, sort_keys=True)
    policies = sorted(results.get("policies") or [], key=lambda d: -len(str(d.get("path") or "")))
    for policy in policies:  # longest first, so no path is a prefix of one replaced later
        if path := str(policy.get("path") or ""):
            text = text.replace(json.dumps(path)[1:-1], f"policy:{policy.get('sha256')}")
    return json.loads(text)


def evidence_digest(results: Mapping[str, Any], files: Mapping[str, str]) -> str:
    """sha256 of the evidence document; `files`: the signed subjects, name -> sha256."""
    samples = {name: digest for name, digest in files.items() if name.startswith(SAMPLES_PREFIX)}
    body = json.dumps(evidence_document(results, samples), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(body.encode("utf-8")).hexdigest()
