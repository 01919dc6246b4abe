"""Capabilities decide, before anything runs: the runner reads each check's declared needs (its
package's NEEDS) against what the built candidate offers (`gate.protocols.capabilities`), records
the decision in the run's plan, its log and its dossier in the words of `gate plan`, and never
starts a check it finds not applicable.

The subject is tests/plugins/gate-plugin-tinylm, a third-party engine written against gate.plugin
only, which offers a subset of the capabilities: sessions and weight reloading, the attention
probe only with `probe: true`, no prefix store. (Its `probe` option is new: run with
tests/plugins/gate-plugin-tinylm on PYTHONPATH until the test plugins are reinstalled.)"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import gate.core.registry as registry
from gate.adapters.reference import Options, ReferenceAdapter
from gate.checks.planning import DECLARED, path_offers
from gate.cli.main import cli
from gate.core.check import CheckContext, CheckSpec
from gate.core.plan import CheckCapabilities
from gate.core.result import Status
from gate.engine.capabilities import plan_with_capabilities
from gate.engine.runner import decide_capabilities, prepare, run_check
from gate.errors import EXIT_PASS, EXIT_UNPROVEN
from gate.protocols import Capability
from tests.support.repo import EXAMPLES

TINYLM = Path(__file__).parent / "tinylm"
PREFIX_CHECKS = {name for name, declared in DECLARED.items() if Capability.PREFIX_SERVING in declared.needs}


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The checks whose function was entered during the test (a positive run or a control)."""
    entered: list[str] = []
    real = registry.load_check

    def spying(name: str) -> CheckSpec[Any]:
        spec = real(name)

        def fn(ctx: CheckContext, params: Any) -> Any:
            entered.append(name)
            return spec.fn(ctx, params)

        return dataclasses.replace(spec, fn=fn)

    monkeypatch.setattr(registry, "load_check", spying)
    return entered


def run(manifest: Path, out: Path, *args: str) -> tuple[int, str, dict[str, Any], str]:
    result = CliRunner().invoke(cli, ["run", str(manifest), "--out", str(out), *args])
    record = json.loads((out / "results.json").read_text())
    dossier = (out / "dossier.md").read_text().replace("\\_", "_")  # Markdown escapes underscores
    return result.exit_code, result.output, record, dossier


def decisions(record: dict[str, Any]) -> dict[str, CheckCapabilities]:
    return {c["check"]: CheckCapabilities.model_validate(c["capabilities"]) for c in record["plan"]["checks"]}


def test_each_check_is_decided_on_the_built_subject_and_a_not_applicable_one_never_starts(
    tmp_path: Path, started: list[str]
) -> None:
    probed = tmp_path / "probed.yaml"
    text = (TINYLM / "kv-cache.yaml").read_text()
    probed.write_text(text.replace("options: {engine: kv-cache}", "options: {engine: kv-cache, probe: true}"))
    assert probed.read_text() != text
    for name, manifest, oracle_runs in (("bare", TINYLM / "kv-cache.yaml", False), ("probed", probed, True)):
        started.clear()
        code, output, record, dossier = run(manifest, tmp_path / name, "-v")
        assert code == EXIT_PASS and record["verdict"] == "pass", record["summary"]
        decided = decisions(record)
        assert {d.read_from for d in decided.values()} == {"path"}  # the run's own decision, not the plan's
        oracle = decided["mask-oracle"]
        assert (Capability.ATTENTION_PROBE in oracle.offered) == oracle_runs, oracle.offered
        for check, decision in decided.items():
            assert (check in started) == (decision.runs != "not-applicable"), (check, decision.runs, started)
            needs, means = decision.in_words()
            # the same words in the run's log and its dossier
            assert f"  needs:    {needs}" in output and f"  means:    {means}" in output
            assert f"Needs: {needs}. Means: {means}" in dossier
        if oracle_runs:
            assert oracle.runs == "own-controls" and oracle.would_run_with == []
            continue
        assert oracle.runs == "not-applicable" and oracle.would_run_with == ["AttentionProbe"]
        assert "tinylm:kv-cache offers no AttentionProbe; offering AttentionProbe would make the check run" in (
            oracle.meaning
        )
        assert "mask-oracle" not in started
        result = next(c for c in record["checks"] if c["check"] == "mask-oracle")
        # judged as the skip it would have returned: observed at model level by the sweep and the fuzzer
        assert result["status"] == "unproven" and result["unproven"] == "warn", result["message"]
        assert "offering AttentionProbe would make the check run" in result["message"]
        assert result["controls"] == [] and result["exercise"] == {}


def test_a_subject_without_a_prefix_store_never_starts_the_prefix_checks(tmp_path: Path, started: list[str]) -> None:
    """tinylm judged as a prefix store: each prefix check is not applicable before it runs, never
    started, and (the prefix-reuse policy gives them no `not_applicable` rule) a required deny check
    that cannot run is unproven, naming the capability that would make it run: never an error."""
    manifest = tmp_path / "tinylm-prefix.yaml"
    manifest.write_text(
        (TINYLM / "kv-cache.yaml")
        .read_text()
        .replace("intervention: layout", "intervention: prefix-reuse")
        .replace(
            "identity: [token-ids, positions, kv-dtype]",
            "identity: [token-ids, positions, model-revision, adapter, tokenizer, rope-scaling, attention-window, "
            "kv-dtype, tenant]",
        )
        .split("checks:")[0]
    )
    plan = CliRunner().invoke(cli, ["plan", str(manifest), "--format", "json"])
    assert plan.exit_code == 0, plan.output
    planned = {c["check"] for c in json.loads(plan.output)["checks"]}
    assert planned & PREFIX_CHECKS, planned
    code, _, record, _ = run(manifest, tmp_path / "out")
    assert code == EXIT_UNPROVEN, record["summary"]
    decided = decisions(record)
    results = {c["check"]: c for c in record["checks"]}
    for check in planned & PREFIX_CHECKS:
        assert decided[check].runs == "not-applicable" and decided[check].would_run_with == ["PrefixServing"]
        assert check not in started
        assert results[check]["status"] == "unproven" and results[check]["error"] is None
        assert "offering PrefixServing would make the check run" in results[check]["message"]
    assert set(started) == planned - PREFIX_CHECKS  # the rest ran


def boom(ctx: CheckContext, params: Any) -> Any:
    raise AssertionError("a check found not applicable was started")


def test_run_check_decides_on_the_candidate_when_the_plan_carries_no_decision() -> None:
    """The int8 example's invalidation on a session cache: the policy rule's `not_applicable` names
    the missing capability's word (`cross-request-cache`), so the check is not applicable, without
    its function ever being called; the decision is the one `decide_capabilities` records."""
    loaded, plan = prepare(EXAMPLES / "reference-quant-int8.yaml", [])
    adapter = ReferenceAdapter()
    ref = adapter.build(Options(path="dynamic", max_len=128), device="cpu", dtype="float32", seed=0)
    cand = adapter.build(Options(path="quantized", max_len=128), device="cpu", dtype="float32", seed=0)
    ctx = CheckContext(manifest=loaded.manifest, reference=ref, candidate=cand, seed=0, device="cpu", dtype="float32")
    planned = next(p for p in plan.checks if p.check == "invalidation")
    spec = CheckSpec(name="invalidation", params=registry.load_check("invalidation").params, fn=boom)
    result = run_check(planned, spec, spec.params(), ctx)
    assert result.status == Status.not_applicable and result.error is None, result.message
    assert f"{cand.name} offers no PrefixServing; offering PrefixServing would make the check run" in result.message
    recorded = next(p for p in decide_capabilities(plan, cand).checks if p.check == "invalidation").capabilities
    assert recorded is not None and recorded.runs == "not-applicable" and recorded.read_from == "path"
    # a check whose needs the candidate offers is started (here: into the stand-in that raises)
    reset = next(p for p in plan.checks if p.check == "reset-isolation")
    assert not DECLARED["reset-isolation"].missing(path_offers(cand))
    spec = CheckSpec(name="reset-isolation", params=registry.load_check("reset-isolation").params, fn=boom)
    started = run_check(reset, spec, spec.params(), ctx)
    assert started.status == Status.error and "was started" in started.message


@pytest.mark.parametrize(
    "example", ["reference-static-layout", "reference-quant-int8", "reference-prefix-basic", "reference-spec-correct"]
)
def test_the_plan_decides_as_the_run_does_where_the_adapter_states_what_it_offers(example: str) -> None:
    """`gate plan` decides from the adapter's statement before a run; the run from the built path:
    for the reference adapter, which states every capability a built-in check needs, they agree."""
    loaded, plan = prepare(EXAMPLES / f"{example}.yaml", [])
    stated = plan_with_capabilities(loaded.manifest, plan)
    spec = loaded.manifest.subject.candidate
    adapter = ReferenceAdapter()
    path = adapter.build(adapter.Options.model_validate(spec.options), device="cpu", dtype="float32", seed=0)
    built = decide_capabilities(plan, path)
    for before, during in zip(stated.checks, built.checks, strict=True):
        assert before.capabilities is not None and during.capabilities is not None
        assert before.capabilities.read_from == "options" and during.capabilities.read_from == "path"
        assert before.capabilities.runs == during.capabilities.runs, (before.check, before.capabilities.meaning)


def test_what_covers_a_check_without_its_needs_is_declared_in_its_face_and_names_declared_checks() -> None:
    """mask-oracle's COVERED_BY (read torch-free with its NEEDS) is what its body names when it runs
    through a probe and what the runner uses when it never starts: one declaration, two readers."""
    from gate.checks.mask_oracle.body import MODEL_LEVEL_STAND_INS

    covered = DECLARED["mask-oracle"].covered_by
    assert covered == MODEL_LEVEL_STAND_INS and set(covered) == {"prefix-sweep", "schedule-fuzz"}
    for name, declared in DECLARED.items():
        assert set(declared.covered_by) <= set(DECLARED) - {name}, name
