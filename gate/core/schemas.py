"""JSON Schemas generated from the records (committed under schemas/ for editors).

The built-in checks' evidence records live with their checks, which core cannot import: the caller
passes them (gate.checks.faces.EVIDENCE, each written as `evidence-<check>.schema.json`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gate.core.clocks import ServingTrace
from gate.core.evidence import EvidenceRecord
from gate.core.manifest import Manifest
from gate.core.matrix import Matrix
from gate.core.plan import Plan
from gate.core.policy import PolicyFile
from gate.core.result import GateResult
from gate.core.scenario import Scenario

RECORDS: dict[str, type[Any]] = {
    "manifest": Manifest,
    "matrix": Matrix,
    "policy": PolicyFile,
    "plan": Plan,
    "result": GateResult,
    "scenario": Scenario,
    "serving-trace": ServingTrace,
}
"""The records of core, by schema name."""


def render_schemas(evidence: Mapping[str, type[EvidenceRecord]]) -> dict[str, str]:
    """File name -> JSON Schema text for each record of core and each check's evidence record
    (`evidence`: check name -> record)."""
    out: dict[str, str] = {}
    records = {**RECORDS, **{f"evidence-{check}": record for check, record in evidence.items()}}
    for name, model in records.items():
        schema = model.model_json_schema(by_alias=True)
        schema["$id"] = f"https://gate.dev/schemas/{name}.schema.json"
        out[f"{name}.schema.json"] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return out
