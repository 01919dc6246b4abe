"""A capability the subject adds never makes a check worse: a correct third-party engine (tinylm,
tests/plugins/gate-plugin-tinylm) judged by mask-oracle with and without an attention probe. Without
one the check is not applicable (a warning while the sweep and the fuzzer hold, exit 0); with one
it runs and passes, but none of its five controls (the engine plants no mask faults, and nothing
generic stands in at the attention level) can run: it is judged as without the probe, the probe's
result kept as evidence, never "unproven, exit 6". (tinylm's `probe` option is new: run with
tests/plugins/gate-plugin-tinylm on PYTHONPATH until the test plugins are reinstalled.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from gate_plugin_tinylm import Options, TinyLMAdapter

from gate.checks.mask_oracle import MaskOracleParams, mask_oracle
from gate.cli.main import cli
from gate.core.manifest import ClaimLevel
from gate.core.plan import PlannedCheck
from gate.core.policy import ControlSpec
from gate.core.result import CheckResult, ControlOutcome, ControlResult, Status, Verdict
from gate.engine.runner import decide, run_check, settle_covered
from gate.errors import EXIT_UNPROVEN
from tests.support import reference

MASK_CONTROLS = ["mask-origin-reset", "truncated-last-block", "cross-request-handle", "poisoned-tail-read"]
MASK_CONTROLS += ["reset-keeps-position"]


class Probed:
    """tinylm with an attention probe added: a correct cache/mask/attention kernel (gate's reference
    static cache), the engine otherwise unchanged (its faults, none)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.probe = inner, reference.path("static")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def attention_probe(self, requests: Any, *, poison_tail: bool = False) -> Any:
        return self.probe.attention_probe(requests, poison_tail=poison_tail)


def covering(name: str, status: Status = Status.passed) -> CheckResult:
    """A covering check's result as the run would record it: passed with one control detected."""
    detected = ControlResult(fault="cross-request-handle", kind="generic", outcome=ControlOutcome.detected)
    return CheckResult(check=name, status=status, severity="deny", step=4, controls=[detected])


def judged(candidate: Any) -> CheckResult:
    planned = PlannedCheck(
        check="mask-oracle",
        step=4,
        severity="deny",
        why="test",
        source="policies/layout.yaml",
        available=True,
        controls=[ControlSpec(fault=f) for f in MASK_CONTROLS],
    )
    ctx = reference.ctx(candidate, candidate)
    return run_check(planned, mask_oracle, MaskOracleParams(), ctx)


def test_a_probe_that_lets_mask_oracle_run_without_controls_never_makes_it_worse() -> None:
    tiny = TinyLMAdapter().build(Options(engine="kv-cache"), device="cpu", dtype="float32", seed=0)
    bare, probed = judged(tiny), judged(Probed(tiny))
    assert bare.status == probed.status == Status.unproven
    assert bare.covered_by == probed.covered_by and set(probed.covered_by) == {"prefix-sweep", "schedule-fuzz"}
    assert not bare.controls  # nothing to run the controls on
    assert [c.outcome for c in probed.controls] == [ControlOutcome.unsupported] * 5
    assert "none of the 5 negative controls of mask-oracle could run" in probed.message
    shown = probed.evidence["without_its_controls"]  # what the probe showed, recorded
    assert shown["status"] == "pass" and "oracle cases exact" in shown["message"]
    assert probed.evidence["fixture"]["got"] == pytest.approx([7.5, 12.4])
    for oracle in (bare, probed):
        # with the sweep and the fuzzer passing with power: unproven-not-applicable, a warning, exit 0
        settled = settle_covered([oracle, covering("prefix-sweep"), covering("schedule-fuzz")])
        assert settled[0].unproven == "warn" and "unproven-not-applicable" in settled[0].message
        verdict, code, _ = decide(settled, ClaimLevel.tolerance)
        assert (verdict, code) == (Verdict.passed, 0), settled[0].message
        # and with the sweep failed: unproven as the rule says, alike with or without the probe
        short = settle_covered([oracle, covering("prefix-sweep", Status.failed), covering("schedule-fuzz")])
        assert short[0].unproven == "deny" and "prefix-sweep is fail" in short[0].message
        assert decide(short[:1], ClaimLevel.tolerance)[1] == EXIT_UNPROVEN


def test_a_correct_engine_offering_the_probe_passes_the_run_exactly_as_without_it(tmp_path: Path) -> None:
    """The whole run through the CLI: tinylm with `probe: true` (its own attention function behind
    gate's AttentionProbe) stays green, exit 0, with mask-oracle a warning as without the probe, and
    the probe's exact answers in its evidence; never "unproven, exit 6"."""
    manifests = Path(__file__).parent / "tinylm"
    text = (manifests / "kv-cache.yaml").read_text()
    probed = tmp_path / "probed.yaml"
    probed.write_text(text.replace("options: {engine: kv-cache}", "options: {engine: kv-cache, probe: true}"))
    assert probed.read_text() != text
    runs = {}
    for name, manifest in (("bare", manifests / "kv-cache.yaml"), ("probed", probed)):
        out = tmp_path / name
        result = CliRunner().invoke(cli, ["run", str(manifest), "--out", str(out)])
        assert result.exit_code == 0, result.output
        record = json.loads((out / "results.json").read_text())
        runs[name] = next(c for c in record["checks"] if c["check"] == "mask-oracle")
        assert record["verdict"] == "pass", record["summary"]
    for oracle in runs.values():
        assert oracle["status"] == "unproven" and oracle["unproven"] == "warn", oracle["message"]
        assert "unproven-not-applicable" in oracle["message"]
    assert runs["probed"]["evidence"]["without_its_controls"]["status"] == "pass"
    assert runs["probed"]["evidence"]["fixture"]["got"] == pytest.approx([7.5, 12.4])
    assert "without_its_controls" not in runs["bare"]["evidence"]
