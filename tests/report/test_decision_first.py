"""The decision first: a verdict that held with a warning says so (pytest style) everywhere it is
read, a bounded-degradation dossier opens on its envelope table, "What next" offers approval first
and never a step that cannot run."""

from __future__ import annotations

from pathlib import Path

import tests.report.results as fx
from gate.core.manifest import ClaimLevel
from gate.core.result import CheckResult, Status
from gate.engine.runner import decide, reference_origin, tally
from gate.report import build_report
from gate.report.github import workflow_commands
from gate.report.render import render_html, render_markdown


def _check(name: str, status: Status, message: str, **more: object) -> CheckResult:
    return CheckResult(check=name, status=status, severity="deny", step=6, why="w", message=message, **more)  # type: ignore[arg-type]


PASSED = [_check(f"c{i}", Status.passed, "held", exercise={"ran": 1}) for i in range(7)]
WARNED = _check("phase-performance", Status.warn, "confidently worse, no budget: live_bytes x73 [70, 75]; budgets held")


def test_a_pass_with_a_warning_says_so_in_its_summary() -> None:
    verdict, code, summary = decide([*PASSED, WARNED], ClaimLevel.tolerance)
    assert (verdict.value, code) == ("pass", 0)
    assert summary == "7 passed, 1 warning (phase-performance live_bytes x73)"
    _, _, clean = decide(PASSED, ClaimLevel.tolerance)
    assert clean == "all 7 required checks passed"  # no warning: the wording is unchanged


def test_awaiting_approval_leads_with_the_tally_and_keeps_what_waits() -> None:
    na = _check("invalidation", Status.not_applicable, "not applicable, because nothing is kept")
    verdict, code, summary = decide([*PASSED[:2], WARNED, na], ClaimLevel.bounded_degradation)
    assert (verdict.value, code) == ("awaiting-approval", 4)
    assert summary.startswith(
        "2 passed, 1 warning (phase-performance live_bytes x73), 1 not applicable (invalidation); "
    )
    assert summary.endswith("an approximate change waits for a signed approval")


def test_a_long_warning_is_cut_at_a_whole_clause() -> None:
    long = _check(
        "phase-performance",
        Status.warn,
        "worse: ttft_p95 x1.71 [1, 2], tpot_p95 x1.66 [1, 2], itl_p95 x1.42 [1, 2], throughput x0.61 [0.4, 0.8]",
    )
    assert tally([long]) == "0 passed, 1 warning (phase-performance ttft_p95 x1.71, tpot_p95 x1.66, itl_p95 x1.42 …)"


def test_a_replayed_recording_is_named() -> None:
    recorded = {"kind": "recorded baseline", "commit": "9c0ffee1d2" * 4, "answers_read": 412}
    assert reference_origin(recorded) == "reference: main's recording at 9c0ffee1d29c, 412 answers"
    cached = {"kind": "reference cache", "answers_read": 3, "answers_computed": 2}
    assert reference_origin(cached) == "reference: the reference cache, 3 answers read, 2 computed"
    assert reference_origin({"kind": "recording", "answers_read": 0}) is None and reference_origin(None) is None


def test_the_notice_and_the_banner_carry_the_tally() -> None:
    run = fx.passing_run()  # one of its four checks warns (phase-performance)
    summary = decide(run.checks, ClaimLevel.tolerance)[2]
    tallied = "3 passed, 1 warning (phase-performance time per output token 12% slower than the reference)"
    assert summary == tallied
    data = build_report(run.model_copy(update={"summary": summary}))
    notice = workflow_commands(data, Path("out/dossier.html"))[-1]
    assert notice.startswith(f"::notice title=gate verdict::PASS (UNSIGNED): {tallied.replace('%', '%25')}")
    assert tallied in render_markdown(data).split("\n\n")[1]
    assert f"<p>{tallied} (exit code 0)</p>" in render_html(data)


def test_an_awaiting_dossier_opens_on_its_envelopes_and_offers_approval_first() -> None:
    result = fx.awaiting_run()
    data = build_report(result, out_dir="out")
    assert [e.slice for e in data.envelopes] == ["long-range-retrieval", "code-closure", "numbers"]
    markdown = render_markdown(data)
    decision = markdown.index("### The decision: each envelope on its one-sided bound")
    assert decision < markdown.index("### What next") < markdown.index("### What kind of")
    assert "| long-range-retrieval | top1-agreement | 0.951 (95% bound; point 0.97) | &gt;= 0.95 |" in markdown
    html = render_html(data)
    assert html.index('id="decision"') < html.index('id="next"') < html.index('id="claim"')
    assert data.next_steps[0].title.startswith("Approve it")


def test_what_next_offers_no_step_that_cannot_run() -> None:
    """An unproven check that exercised nothing could not run on this path: running it alone cannot
    either. One that ran and is unproven (its controls could not show power) may be reproduced."""
    result = fx.awaiting_run()
    could_not = _check("invalidation", Status.unproven, "required deny check could not run here (no store)")
    ran = _check("reset-isolation", Status.unproven, "no control could run", exercise={"requests": 2})
    data = build_report(result.model_copy(update={"checks": [*result.checks, could_not, ran]}), out_dir="out")
    titles = [s.title for s in data.next_steps]
    assert titles[0].startswith("Approve it")
    assert "Reproduce reset-isolation alone" in titles and "Reproduce invalidation alone" not in titles


def test_a_plan_names_no_machine_local_policy_path() -> None:
    from gate.core.policy import load_policies

    policies = load_policies()
    assert {d.path for d in policies.digests()} >= {"policies/quantisation.yaml", "policies/eviction.yaml"}
    assert all(not d.path.startswith("/") for d in policies.digests())
