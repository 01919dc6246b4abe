"""The Python API: one call runs, renders, signs and records, as docs/architecture.md shows."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from gate.checks.prefix_reuse_parity.evidence import PrefixReuseEvidence
from gate.core.result import GateResult
from gate.engine.pipeline import run_pipeline
from gate.trust.attest import ENVELOPE_NAME, verify_envelope
from gate.trust.keys import generate_keypair
from gate.trust.ledger import Ledger
from tests.support.repo import EXAMPLES


def test_run_pipeline_writes_a_signed_recorded_dossier(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    key, pub, _ = generate_keypair(tmp_path / "ci")
    out = tmp_path / "run"
    outputs = run_pipeline(EXAMPLES / "reference-prefix-basic.yaml", out, sign_key=key, ledger=tmp_path / "l.sqlite")
    assert outputs.exit_code == 0 and outputs.result.verdict.value == "pass"
    names = {p.name for p in outputs.files}
    assert {"results.json", "dossier.html", "dossier.md", "junit.xml", ENVELOPE_NAME, "ledger.json"} <= names
    assert json.loads((out / "results.json").read_text())["verdict"] == "pass"
    assert verify_envelope(out, [pub]).valid
    with Ledger.open(tmp_path / "l.sqlite") as ledger:
        assert [e.seq for e in ledger.entries()] == [outputs.ledger_seq]
    # the evidence a real check wrote reads back from results.json as its typed record
    stored = GateResult.model_validate_json((out / "results.json").read_text())
    reuse = next(c for c in stored.checks if c.check == "prefix-reuse-parity")
    record = PrefixReuseEvidence.model_validate(reuse.evidence)
    assert record.requests and sum(r.reused for r in record.requests) > 0
