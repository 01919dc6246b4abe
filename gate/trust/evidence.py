"""The evidence digest: what an approval of an approximate change binds to, beyond one dossier.

A dossier's digest (the sha256 of its signed statement) changes on every run: it names
results.json, whose times and clocks differ each time. An approval binds to the run statement it
was given AND to the run's **evidence digest**, the sha256 of a canonical JSON document built from
the signed results.json and the signed sample files:

* `manifest`: the manifest's name and the sha256 of its file (claim, envelopes, subject options);
* `commit`: the change's commit (a new commit is a new change, and needs a new approval);
* `plan`: the plan as run (checks, parameters, severities, required controls, claim), with each
  policy file's path in it written as `policy:SHA256` (bound by content, not install location);
* `policies`: the sha256 of every policy file that took part, and `site_policy`: how a
  `--policy-dir` replaced or extended the built-in rule and what it dropped;
* `subjects` and `datasets`: each path's identity (model config and weights digests, adapter
  options, library versions) and the fingerprints of the quality slices' data sets;
* `baseline`: the sha256 of the recorded reference answers, when the reference replayed them;
* `checks`, the verdict's inputs: each check's name, severity, step and outcome (`pass` and
  `warn` both read `held`, as the verdict reads them) and its negative controls' outcomes (not for
  step 6, phase-performance, whose clocks and their controls differ on every run: there only the
  outcome is bound); for the checks that judge the envelopes (quality-slices), the measured bound
  of every envelope and how many envelopes held over how many samples (not its throughput);
* `samples`: the sha256 of each `samples/<slice>.jsonl` the dossier carries (the per-sample
  outcomes behind each quality bound);
* `verdict`: the run's own verdict;
* `known_bugs` (only when the manifest declares any): every declared known bug with its
  disposition (expected, not showing, not affected, expired), and on each check that held only as
  one, `known_bug` (its id): a relaxation the change's own manifest asked for, signed by the approver.

So an identical re-run of an approved change (same commit, manifest, policies, models, data and
measured quality) has the same evidence digest, and `gate run` finds the approval in the ledger
(gate.trust.carry.carry_over); any change to any of it needs a new approval. Nothing here is
taken on the run's word: a verifier recomputes the digest from the signed files.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

EVIDENCE_FORMAT = "gate-evidence/v1"
SAMPLES_PREFIX = "samples/"
"""Subject names of the quality slices' sample files inside a dossier."""
UNBOUND_METRICS_STEP = 6
"""The release-gate step whose controls (timed) are not bound, only its outcome."""
BOUND_SUFFIX = ".bound"
"""An envelope check's metric `SLICE.METRIC.bound`: the measured one-sided bound of one envelope."""
ENVELOPE_COUNTS = ("envelopes", "envelopes_held", "samples")
"""An envelope check's counts that are bound with its bounds."""
HELD = ("pass", "warn")
"""Check statuses the verdict reads alike (a warning never fails the gate)."""


def evidence_document(results: Mapping[str, Any], samples: Mapping[str, str]) -> dict[str, Any]:
    """The document whose digest an approval binds to (see the module docstring).

    `results`: the parsed results.json; `samples`: sample file name -> sha256."""
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
    """`value` (the plan, the site policy lines), each policy file's path in it (rules name where they
    came from) replaced by `policy:SHA256`: a policy is bound by its bytes, not by where gate or the
    site installed it."""
    text = json.dumps(value, sort_keys=True)
    policies = sorted(results.get("policies") or [], key=lambda d: -len(str(d.get("path") or "")))
    for policy in policies:  # longest first, so no path is a prefix of one replaced later
        path = str(policy.get("path") or "")
        if path:
            text = text.replace(json.dumps(path)[1:-1], f"policy:{policy.get('sha256')}")
    return json.loads(text)


def evidence_digest(results: Mapping[str, Any], files: Mapping[str, str]) -> str:
    """sha256 (hex) of the canonical evidence document; `files`: the signed subjects, name -> sha256
    (only the sample files among them count)."""
    samples = {name: digest for name, digest in files.items() if name.startswith(SAMPLES_PREFIX)}
    body = json.dumps(evidence_document(results, samples), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


__all__ = ["EVIDENCE_FORMAT", "evidence_digest", "evidence_document"]
