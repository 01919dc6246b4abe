"""A signed dossier as `gate run --sign-key KEY --ledger PATH` leaves it, without running a model.

`signed_run` writes a real manifest, plans it with the real policies, builds the check results by
hand, applies the ledger's waivers and decides the verdict with the runner's own functions, writes
results.json, the dossier and its attestation with gate.report, and records the run in the ledger.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from gate.core.load import load_manifest
from gate.core.plan import build_plan
from gate.core.policy import load_policies
from gate.core.result import CheckResult, GateResult
from gate.engine.pipeline import write_outputs
from gate.engine.runner import decide
from gate.trust.run_record import record_run
from gate.trust.waivers import apply_waivers

QUANT_MANIFEST = textwrap.dedent(
    """\
    apiVersion: gate/v1
    name: kv-int8
    description: int8 KV cache with per-block scales
    change:
      repository: acme/engine
      commit: {commit}
    intervention: quantisation
    claim:
      level: bounded-degradation
      envelopes:
        - slice: long-range-retrieval
          metric: top1-agreement
          comparator: ">="
          threshold: "0.95"
    identity: [token-ids, positions, model-revision, kv-dtype]
    subject:
      reference: {{adapter: reference, options: {{}}}}
      candidate: {{adapter: reference, options: {{}}}}
    """
)


EXACT_MANIFEST = textwrap.dedent(
    """\
    apiVersion: gate/v1
    name: prefix-reuse
    description: block prefix cache, not approximate
    change:
      repository: acme/engine
      commit: {commit}
    intervention: prefix-reuse
    claim: {{level: tolerance, atol: 0.001}}
    identity: [token-ids, positions, model-revision, adapter, tokenizer, rope-scaling,
               attention-window, kv-dtype, tenant]
    subject:
      reference: {{adapter: reference, options: {{}}}}
      candidate: {{adapter: reference, options: {{}}}}
    """
)


def quant_manifest(path: Path, commit: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(QUANT_MANIFEST.format(commit=commit))
    return path


def exact_manifest(path: Path, commit: str) -> Path:
    """A change that is not approximate: a passing run is PASS, no approval needed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(EXACT_MANIFEST.format(commit=commit))
    return path


def _checks(quality: str) -> list[CheckResult]:
    bound = 0.962 if quality == "pass" else 0.912
    return [
        CheckResult(
            check="quality-slices",
            status=quality,
            severity="deny",
            step=7,  # type: ignore[arg-type]
            message=f"long-range-retrieval: top1-agreement lower bound {bound} vs 0.95",
            metrics={"slices": 1, "failed": 0 if quality == "pass" else 1},
            exercise={"quantised_blocks": 96},
        ),
        CheckResult(
            check="phase-performance",
            status="pass",
            severity="warn",
            step=6,  # type: ignore[arg-type]
            message="decode 1.31x faster, 47% fewer bytes held",
            exercise={"bytes_held": 1572864},
        ),
    ]


SAMPLES = "samples/long-range-retrieval.jsonl"
"""The quality slice's samples a run with `samples=True` carries, as write_report names them."""


def signed_run(
    out: Path,
    manifest: Path,
    gate_key: Path,
    *,
    ledger: Path | None = None,
    quality: str = "pass",
    checks: list[CheckResult] | None = None,
    samples: bool = False,
    policy_dirs: list[Path] | None = None,
    started_at: str = "2030-06-01T10:00:00+00:00",
) -> tuple[Path, GateResult]:
    """Write DIR as a signed `gate run` would; return DIR and its result. The run's trust policy is
    $GATE_TRUST's, as `gate run` finds it. `checks`: the results to sign (default: a run's, by
    `quality`). `samples`: the dossier also carries a quality slice's samples (a signed subject in
    samples/, as a real run's). `policy_dirs`: site policies; only the checks their plan keeps are in
    the result. `started_at`: the run's start (another one makes another dossier digest from the same
    evidence)."""
    from gate.trust.policy import find_trust

    loaded = load_manifest(manifest)
    plan = build_plan(loaded.manifest, loaded.doc, load_policies(policy_dirs or []))
    planned = {p.check for p in plan.checks}
    checks = checks if checks is not None else [c for c in _checks(quality) if c.check in planned]
    trust = find_trust(None)
    if ledger is not None:
        checks = apply_waivers(loaded, checks, ledger, trust=trust)
    verdict, code, summary = decide(checks, plan.claim)
    result = GateResult(
        gate_version="0.1.0",
        verdict=verdict,
        exit_code=code,
        summary=summary,
        manifest=loaded.manifest.model_dump(mode="json", by_alias=True),
        manifest_digest={"path": str(manifest), "sha256": loaded.sha256},  # type: ignore[arg-type]
        policies=plan.policies,
        site_policy=plan.site_policy,
        plan=plan.model_dump(mode="json"),
        checks=checks,
        started_at=started_at,
        finished_at="2030-06-01T10:05:00+00:00",
        trust_policy={"path": trust.path, "sha256": trust.sha256} if trust is not None else None,  # type: ignore[arg-type]
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(result.model_dump_json(indent=2) + "\n")
    write_outputs(result, out, manifest, gate_key, environ={})
    if samples:
        from gate.trust.attest import ENVELOPE_NAME, read_envelope, sign_directory
        from gate.trust.keys import load_private_key
        from gate.trust.statement import parse_statement

        (out / SAMPLES).parent.mkdir(exist_ok=True)
        (out / SAMPLES).write_text('{"id": 1, "agree": true}\n{"id": 2, "agree": false}\n')
        signed = parse_statement(read_envelope(out / ENVELOPE_NAME)[1])
        manifest_file = signed.predicate["manifest"]["file"]
        sign_directory(out, [*signed.files(), SAMPLES], manifest_file, load_private_key(gate_key))
    if ledger is not None:
        record_run(result, out, ledger, sign_key=gate_key)
    return out, result
