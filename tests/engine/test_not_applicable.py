"""A check with nothing to judge on a path is not applicable, as its policy rule says: never a warning.

The int8 example's invalidation check cannot run on a session cache (nothing is kept across
requests, so nothing can go stale). The quantisation and eviction policies say so
(`not_applicable: {without: cross-request-cache}`), so the runner reports it `not-applicable` with
the policy's reason, and the verdict and its summary carry no warning for it. A rule without that
statement keeps the old meaning: a required deny check that cannot run is unproven.
"""

from __future__ import annotations

from click.testing import CliRunner

from gate.adapters.reference import Options, ReferenceAdapter
from gate.checks.invalidation import invalidation
from gate.cli.main import cli
from gate.core.check import CheckContext
from gate.core.manifest import ClaimLevel
from gate.core.result import Status, Verdict
from gate.engine.runner import decide, prepare, run_check
from gate.report.build import build_report
from gate.report.junit import junit_xml
from gate.report.render import render_markdown
from tests.report.results import awaiting_run
from tests.support.repo import EXAMPLES

INT8 = EXAMPLES / "reference-quant-int8.yaml"


def _run_invalidation(drop_rule: bool = False):  # type: ignore[no-untyped-def]
    loaded, plan = prepare(INT8, [])
    planned = next(p for p in plan.checks if p.check == "invalidation")
    if drop_rule:
        planned = planned.model_copy(update={"not_applicable": None})
    adapter = ReferenceAdapter()
    ref = adapter.build(Options(path="dynamic", max_len=128), device="cpu", dtype="float32", seed=0)
    cand = adapter.build(Options(path="quantized", max_len=128), device="cpu", dtype="float32", seed=0)
    ctx = CheckContext(manifest=loaded.manifest, reference=ref, candidate=cand, seed=0, device="cpu", dtype="float32")
    return run_check(planned, invalidation, invalidation.params(), ctx)


def test_the_quantisation_policy_says_when_invalidation_has_nothing_to_judge() -> None:
    _, plan = prepare(INT8, [])
    rule = next(p for p in plan.checks if p.check == "invalidation").not_applicable
    assert rule is not None and rule.without == "cross-request-cache"
    assert "no entry to invalidate" in rule.because
    result = CliRunner().invoke(cli, ["plan", str(INT8)])
    assert result.exit_code == 0, result.output
    assert "applies:  not applicable, because the path keeps no entries across requests" in result.output
    assert "(the candidate offers no cross request cache)" in result.output


def test_a_session_cache_makes_invalidation_not_applicable_and_the_verdict_carries_no_warning() -> None:
    result = _run_invalidation()
    assert result.status == Status.not_applicable, result.message
    assert result.message.startswith("not applicable, because the path keeps no entries across requests")
    assert result.controls == []  # nothing was judged, so no control can show anything
    verdict, code, summary = decide([result], ClaimLevel.bounded_degradation)
    assert verdict == Verdict.awaiting_approval and code == 4
    assert "unproven" not in summary and "warning" not in summary
    assert "1 not applicable: invalidation" in summary


def test_without_the_policy_statement_it_is_unproven_as_before() -> None:
    result = _run_invalidation(drop_rule=True)
    assert result.status == Status.unproven and result.unproven == "warn"
    assert "required deny check could not run here" in result.message
    assert (
        "unproven (a warning by policy, not a pass): invalidation"
        in decide([result], ClaimLevel.bounded_degradation)[2]
    )


def test_reports_show_a_not_applicable_check_with_its_reason_and_no_warning() -> None:
    run = awaiting_run()
    result = run.model_copy(update={"checks": [*run.checks, _run_invalidation()]})
    data = build_report(result, None)
    xml = junit_xml(result, data).decode()
    assert '<skipped message="not applicable, because the path keeps no entries' in xml
    assert "<failure" not in xml
    markdown = render_markdown(data)
    assert "NOT APPLICABLE" in markdown and "UNPROVEN" not in markdown
    assert data.banner.tone != "unproven"
