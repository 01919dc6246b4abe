"""JSON Schemas generated from the records (committed under schemas/ for editors)."""

from __future__ import annotations

import json
from typing import Any

from gate.core.clocks import ServingTrace
from gate.core.evidence import EVIDENCE
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
    **{f"evidence-{check}": record for check, record in EVIDENCE.items()},
}


def render_schemas() -> dict[str, str]:
    """File name -> JSON Schema text for each record."""
    out: dict[str, str] = {}
    for name, model in RECORDS.items():
        schema = model.model_json_schema(by_alias=True)
        schema["$id"] = f"https://gate.dev/schemas/{name}.schema.json"
        out[f"{name}.schema.json"] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return out
