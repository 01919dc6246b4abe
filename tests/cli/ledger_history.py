"""A small real ledger for `gate diff` and `gate history`: real runs, a signed approval.

- prefix-basic: examples/reference-prefix-basic.yaml run for real by `gate run --ledger` on commit
  PASS_SHA (pass), then the same manifest name with the unordered-blocks fault on FAIL_SHA (fail);
- kv-int8 (tests/trust/runs.py, no model): a run whose dossier is then deleted (LOST_SHA), an
  awaiting-approval run (APPROVED_SHA) that alice approves with `gate approve`, and a run whose
  quality bound falls under its threshold (BROKEN_SHA), then APPROVED_SHA's run again (the same
  evidence, so alice's approval carries to it).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from gate._util.resources import data_dir
from gate.cli.main import cli
from gate.core.result import CheckResult
from tests.trust.runs import quant_manifest, signed_run
from tests.trust.trusted import make_keys, write_trust

PASS_SHA = "a1" * 20
FAIL_SHA = "b2" * 20
LOST_SHA = "c3" * 20
APPROVED_SHA = "d4" * 20
BROKEN_SHA = "e5" * 20
BOUND = "long-range-retrieval.top1-agreement.bound"


@dataclass
class Built:
    ledger: Path
    passed: Path
    failed: Path
    approved: Path
    broken: Path
    trust: Path


def gate(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    return result.exit_code, result.output


def _quality(bound: float) -> list[CheckResult]:
    return [
        CheckResult(
            check="quality-slices",
            status="pass" if bound >= 0.95 else "fail",  # type: ignore[arg-type]
            severity="deny",
            step=7,
            message=f"long-range-retrieval: top1-agreement lower bound {bound} vs 0.95",
            metrics={"envelopes": 1, "envelopes_held": int(bound >= 0.95), BOUND: bound},
            evidence={
                "envelopes": [
                    {
                        "slice": "long-range-retrieval",
                        "metric": "top1-agreement",
                        "comparator": ">=",
                        "threshold": "0.95",
                        "point": bound + 0.02,
                        "bound": bound,
                        "n": 400,
                        "n_required": 300,
                        "sigma": 0.5,
                        "passed": bound >= 0.95,
                        "reason": f"95% lower bound {bound} vs 0.95",
                        "confidence": 0.95,
                        "min_detectable_effect": 0.05,
                        "power": 0.8,
                        "worst": [],
                    }
                ],
                "slices": {},
                "space": "text",
                "datasets": {},
                "samples": {},
                "timing": {},
            },
        )
    ]


def build(root: Path) -> Built:
    keys = make_keys(root / "keys", ("ci", "alice"))
    trust = write_trust(root / "trust.yaml", keys, run_signers=("ci",), approvers=("alice",))
    ledger = root / "audit" / "ledger.sqlite"
    example = (data_dir("examples") / "reference-prefix-basic.yaml").read_text()
    good, bad = root / "prefix" / "basic.yaml", root / "prefix" / "basic-fault.yaml"
    good.parent.mkdir(parents=True)
    good.write_text(example)
    bad.write_text(example.replace("block_size: 4}", "block_size: 4, fault: unordered-blocks}"))
    assert "fault: unordered-blocks" in bad.read_text()
    env = {"GATE_TRUST": str(trust)}
    runs = {}
    for manifest, sha, expect in ((good, PASS_SHA, 0), (bad, FAIL_SHA, 1)):
        out = root / f"run-{sha[:2]}"
        code, output = gate(
            "run", str(manifest), "--out", str(out), "--ledger", str(ledger), "--sign-key", str(keys["ci.key"]), "-q",
            env={**env, "GATE_COMMIT": sha},
        )  # fmt: skip
        assert code == expect, output
        runs[sha] = out
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GATE_TRUST", str(trust))
        for sha, bound in ((LOST_SHA, 0.97), (APPROVED_SHA, 0.962), (BROKEN_SHA, 0.912)):
            manifest = quant_manifest(root / f"quant-{sha[:2]}" / "kv-int8.yaml", sha)
            runs[sha], _ = signed_run(
                root / f"quant-{sha[:2]}" / "out", manifest, keys["ci.key"], ledger=ledger, checks=_quality(bound)
            )
            if sha == APPROVED_SHA:
                code, output = gate(
                    "approve", str(runs[sha]), "--key", str(keys["alice.key"]), "--reason", "bound holds",
                    "--trust", str(trust), "--ledger", str(ledger),
                )  # fmt: skip
                assert code == 0, output
        again = quant_manifest(root / "quant-again" / "kv-int8.yaml", APPROVED_SHA)  # the same evidence again
        signed_run(root / "quant-again" / "out", again, keys["ci.key"], ledger=ledger, checks=_quality(0.962))
    shutil.rmtree(runs[LOST_SHA])
    return Built(ledger, runs[PASS_SHA], runs[FAIL_SHA], runs[APPROVED_SHA], runs[BROKEN_SHA], trust)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build(tmp_path_factory.mktemp("history"))
