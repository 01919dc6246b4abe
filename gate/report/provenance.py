"""The dossier's claim view, the invariants an approximate cache was held to, and the provenance
groups (change, manifest, policies, subjects, datasets, run, environment)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gate.core.result import GateResult
from gate.report.fmt import as_float, as_mapping, display
from gate.report.model import ClaimView, InvariantRow, KeyValue, ProvenanceGroup
from gate.report.words import CLAIM_WORDS, INTERVENTION_WORDS, TRANSFER


def servers_words(servers: dict[str, Any]) -> str:
    """The run's server starts in a line: how many, why, the launch configurations, the most alive at once."""
    why = "; ".join(f"{reason}: {n}" for reason, n in servers.get("why", {}).items())
    return (
        f"{servers.get('checks')} for the checks + {servers.get('controls')} for their controls ({why}), "
        f"{servers.get('configurations')} launch configurations, at most {servers.get('alive_peak')} alive at once"
    )


def key_values(values: Mapping[str, Any]) -> list[KeyValue]:
    return [KeyValue(str(k).replace("_", " "), display(v)) for k, v in values.items()]


INVARIANT_CHECKS = ("quant-invariants", "evict-invariants")
"""The checks that judge what an approximate cache kept against what it promises; their evidence
`invariants` maps each invariant (its failure's bug class) to held | broken."""


def invariant_rows(result: GateResult) -> list[InvariantRow]:
    """Each invariant an approximate cache was held to, held or broken, for beside the envelopes; a
    check that judged none (unproven: the state cannot be read; error; not run) is one row saying so."""
    rows = []
    for c in result.checks:
        if c.check not in INVARIANT_CHECKS:
            continue
        held = c.evidence.get("invariants")
        if isinstance(held, dict) and held:
            for name, word in held.items():
                ok = str(word) == "held"
                rows.append(InvariantRow(c.check, display(name), "held" if ok else "BROKEN", "good" if ok else "bad"))
            continue
        status = str(getattr(c.status, "value", c.status))
        tone = "unproven" if status == "unproven" else "bad" if status in ("fail", "error") else "muted"
        rows.append(InvariantRow(c.check, "every invariant", status.upper(), tone, display(c.message)))
    return rows


def claim_view(result: GateResult) -> ClaimView:
    """What the change claims, in words: the manifest's claim and envelopes, the plan's rule."""
    manifest = result.manifest
    plan = result.plan
    claim = as_mapping(manifest.get("claim"))
    level = str(claim.get("level", plan.get("claim", "unknown")))
    intervention = str(manifest.get("intervention", plan.get("intervention", "unknown")))
    approximate = bool(plan.get("approximate", level == "bounded-degradation"))
    parameters = [
        KeyValue(str(k), display(v)) for k, v in claim.items() if k not in ("level", "envelopes") and v is not None
    ]
    envelopes = []
    for env in claim.get("envelopes", []) if isinstance(claim.get("envelopes"), list) else []:
        env = as_mapping(env)
        confidence = as_float(env.get("confidence", 0.95)) or 0.95
        envelopes.append(
            f"{display(env.get('slice'))}: {display(env.get('metric'))} "
            f"{display(env.get('comparator'))} {display(env.get('threshold'))} "
            f"at {confidence:.0%} one-sided confidence"
        )
    return ClaimView(
        intervention=intervention,
        intervention_words=str(plan.get("intervention_summary") or INTERVENTION_WORDS.get(intervention, "")),
        approximate=approximate,
        level=level,
        claim_words=str(plan.get("claim_in_words") or CLAIM_WORDS.get(level, level)),
        parameters=parameters,
        envelopes=envelopes,
        rule=str(plan.get("claim_rule", "")).strip(),
        rule_source=str(plan.get("claim_source", "")),
        description=str(manifest.get("description", "")),
        identity_declared=[str(v) for v in manifest.get("identity", []) or []],
        identity_required=[str(v) for v in plan.get("identity_required", []) or []],
        transfer=TRANSFER.get(level, TRANSFER["bounded-degradation"] if approximate else ""),
    )


def provenance(result: GateResult) -> list[ProvenanceGroup]:
    manifest = result.manifest
    change = as_mapping(manifest.get("change"))
    subject = as_mapping(manifest.get("subject"))
    groups = [
        ProvenanceGroup(
            "Change",
            [
                KeyValue("name", display(manifest.get("name"))),
                KeyValue("repository", display(change.get("repository"))),
                KeyValue("pull request", display(change.get("pull-request"))),
                KeyValue("commit", display(change.get("commit"))),
            ],
        ),
        ProvenanceGroup(
            "Manifest",
            [KeyValue("path", result.manifest_digest.path), KeyValue("sha256", result.manifest_digest.sha256)],
        ),
        ProvenanceGroup("Policies", [KeyValue(p.path, p.sha256) for p in result.policies]),
    ]
    for role, identity in result.subjects.items():
        groups.append(ProvenanceGroup(f"Subject: {role}", key_values(as_mapping(identity))))
    if result.datasets:
        groups.append(ProvenanceGroup("Dataset fingerprints", [KeyValue(k, v) for k, v in result.datasets.items()]))
    groups.append(
        ProvenanceGroup(
            "Run",
            [
                *(KeyValue(key, display(subject.get(key))) for key in ("seed", "device", "dtype")),
                KeyValue("started", result.started_at),
                KeyValue("finished", result.finished_at),
                KeyValue("result version", str(result.result_version)),
                *([KeyValue("server starts", servers_words(result.servers))] if result.servers else []),
            ],
        )
    )
    groups.append(
        ProvenanceGroup(
            "Environment",
            [KeyValue("gate", result.gate_version)] + [kv for kv in key_values(result.environment) if kv.key != "gate"],
        )
    )
    return groups
