"""The dossier: report data from hand-built results, gold files, inert hostile strings, outputs."""

from __future__ import annotations

import io
import math
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

import tests.report.results as fx
from gate.checks.faces import EVIDENCE
from gate.core.result import GateResult, Status, Verdict
from gate.engine.pipeline import write_outputs
from gate.errors import InputError
from gate.report import build_report, render_html, render_markdown
from gate.report.build import Signing
from gate.report.evidence import read_evidence
from gate.report.github import publish, workflow_commands
from tests.report.results import assert_gold

# Report data ------------------------------------------------------------------------------------


def test_failing_parity_run_names_check_length_and_bug_class() -> None:
    data = build_report(fx.failing_parity_run())
    assert (data.banner.label, data.banner.signed_label) == ("ERROR", "UNSIGNED")
    first = data.failures[0]
    assert first.check == "prefix-sweep"
    assert first.detected_at == "prefix length 512"
    assert first.bug_class == "positional-index"  # gate.checks._diagnosis's `bug_class` key
    assert first.first_diverging_layer == "0"
    assert [f.check for f in data.failures] == ["prefix-sweep", "greedy-parity", "cache-identity"]
    sweep = next(s for s in data.sections if s.check == "prefix-sweep").sweep
    assert sweep is not None
    assert sweep.first_failure_label == "argmax flips from 512"
    assert sweep.tolerance_y is not None and len(sweep.ties) == 1
    assert [m.tone for m in sweep.markers] == ["good"] * 6 + ["bad"] * 3
    assert sweep.markers[0].hollow  # |Δ| = 0 is drawn hollow at the floor, not dropped from a log axis


def test_sweep_geometry_is_monotone_on_log_axes() -> None:
    sweep = next(s for s in build_report(fx.failing_parity_run()).sections if s.check == "prefix-sweep").sweep
    assert sweep is not None
    xs = [m.x for m in sweep.markers]
    ys = [m.y for m in sweep.markers]
    assert xs == sorted(xs) and len(set(xs)) == len(xs)
    assert ys[1:] == sorted(ys[1:], reverse=True)  # growing |Δ| climbs the plot (SVG y points down)
    frame = sweep.frame
    assert all(frame.left <= x <= frame.right and frame.top <= y <= frame.bottom for x, y in zip(xs, ys, strict=True))
    assert sweep.tolerance_y is not None and ys[5] > sweep.tolerance_y > ys[6]  # 4.1e-4 below, 0.021 above 1e-3


def test_control_matrix_is_fault_by_check() -> None:
    matrix = build_report(fx.failing_parity_run()).controls
    assert matrix.checks == ["mask-oracle", "greedy-parity"]
    rows = {row.fault: row.cells for row in matrix.rows}
    assert rows["mask-origin-reset"][0] is None
    cell = rows["wrong-start-pos"][1]
    assert cell is not None and (cell.outcome, cell.detected_at, cell.tone) == ("detected", "512", "good")
    unobservable = rows["layer-order-swap"][1]
    assert unobservable is not None and unobservable.tone == "warn"


def test_slices_and_distribution_views() -> None:
    slices = build_report(fx.slice_run())
    rows = slices.sections[0].slices
    assert [(r.slice, r.held) for r in rows] == [
        ("long-range-retrieval", "NO"),
        ("code-closure", "yes"),
        ("numbers", "yes"),
    ]
    assert all(r.plot is not None for r in rows)
    assert slices.claim.approximate and len(slices.claim.envelopes) == 3
    spec = build_report(fx.speculative_run())
    dist = spec.sections[1].distribution
    assert dist is not None and dist.plot is not None
    assert len(dist.plot.bars) == 20  # ten categories, observed and expected
    assert {kv.key: kv.value for kv in dist.facts}["p-value"] == "0.72"


def test_claim_is_stated_in_words() -> None:
    claim = build_report(fx.passing_run()).claim
    assert claim.intervention == "layout" and claim.level == "tolerance"
    assert "argmax" in claim.claim_words and "transfers" in claim.transfer
    assert [(kv.key, kv.value) for kv in claim.parameters] == [("atol", "0.001")]


SWEEP = fx.failing_parity_run().checks[1].evidence


@pytest.mark.parametrize(
    "check,evidence",
    [
        ("prefix-sweep", {**SWEEP, "per_length": {"length": [1, 2, 3]}}),
        ("prefix-sweep", {**SWEEP, "per_length": {**SWEEP["per_length"], "length": "oops"}}),
        ("prefix-sweep", {**SWEEP, "per_length": {**SWEEP["per_length"], "max_abs_delta": [0.1]}}),
        ("prefix-sweep", {**SWEEP, "per_length": {**SWEEP["per_length"], "max_abs_delta": ["Infinity"] * 9}}),
        ("prefix-sweep", {**SWEEP, "per_length": {key: [] for key in SWEEP["per_length"]}}),
        ("prefix-sweep", {**SWEEP, "ties": "x", "tolerance": "bad"}),
        ("prefix-sweep", {"lengths": [1, 2, 3], "max_abs_delta": [0.1, 0.2, 0.3]}),
        ("spec-distribution", {"categories": ["a"], "observed": [1, 2], "expected": [1]}),
        ("spec-distribution", {**fx.speculative_run().checks[1].evidence, "observed": [-1] * 10}),
        ("spec-distribution", {**fx.speculative_run().checks[1].evidence, "categories": [str(i) for i in range(300)]}),
        ("quality-slices", {"slices": "nope"}),
        ("quality-slices", {**fx.slice_run().checks[0].evidence, "envelopes": [{"point": "x"}]}),
        ("greedy-parity", {"runs": [{"first_divergence": {"step": "late"}}]}),
        ("phase-performance", {"clocks": [{"clock": 1}]}),
        ("third-party", {"huge": list(range(10_000)), "rows": [{"a": i} for i in range(500)]}),
    ],
)
def test_malformed_evidence_degrades_without_raising(check: str, evidence: dict[str, object]) -> None:
    views = read_evidence(check, evidence)
    result = fx.passing_run()
    checks = [result.checks[1].model_copy(update={"check": check, "evidence": evidence, "status": Status.failed})]
    html = render_html(build_report(result.model_copy(update={"checks": checks})))
    assert "<svg" in html or views.notes or views.tables or views.slices
    assert views.tables, "whatever did not validate is still shown"


def test_evidence_that_does_not_validate_is_named_in_a_note() -> None:
    views = read_evidence("prefix-sweep", {**SWEEP, "per_length": {"length": [1, 2, 3]}})
    assert views.sweep is None
    assert views.notes == [
        "prefix-sweep: evidence.per_length.max_abs_delta: Field required "
        "(not the SweepEvidence this gate reads; shown as tables)"
    ]
    assert "per length" in [row[0] for table in views.tables for row in table.rows]


@pytest.mark.parametrize("name", sorted(fx.ALL))
def test_built_in_evidence_reads_back_from_results_json(name: str) -> None:
    """Through the JSON results.json stores (non-finite floats as strings), every built-in check's
    evidence still validates into its record: no note, a view drawn."""
    result = fx.ALL[name]()
    for check in result.checks:
        if check.check == "prefix-sweep":  # a broken cache can produce NaN and infinite |Δlogit|
            check.evidence["per_length"]["max_abs_delta"][1:3] = [math.nan, math.inf]
    stored = GateResult.model_validate_json(result.model_dump_json())
    sections = build_report(stored).sections
    assert sections and not any(s.notes for s in sections)
    for check in stored.checks:
        if check.check in EVIDENCE and check.evidence:
            views = read_evidence(check.check, check.evidence)
            assert views.consumed or views.tokens, check.check


def test_third_party_evidence_is_shown_generically_whatever_its_keys() -> None:
    """Only a built-in check's evidence is read as a record: keys that look like a sweep are a table."""
    views = read_evidence("my-sweep", {"lengths": [1, 2, 3], "max_abs_delta": [0.1, 0.2, 0.3]})
    assert views.sweep is None and not views.notes
    assert [row[0] for row in views.tables[0].rows] == ["lengths", "max abs delta"]


def test_detected_at_prefers_the_first_argmax_flip() -> None:
    result = fx.failing_parity_run()
    sweep = result.checks[1]
    assert build_report(result).failures[0].detected_at == "prefix length 512"  # first flip in per_length
    # gate.checks._diagnosis counts lengths merely over tolerance as deviating: a later fallback, not the failure.
    earlier = sweep.model_copy(update={"diagnosis": {**(sweep.diagnosis or {}), "first_deviating_length": 200}})
    checks = [*result.checks[:1], earlier, *result.checks[2:]]
    assert build_report(result.model_copy(update={"checks": checks})).failures[0].detected_at == "prefix length 512"
    recorded = sweep.model_copy(update={"metrics": {**sweep.metrics, "detected_at": 64}})
    checks = [*result.checks[:1], recorded, *result.checks[2:]]
    assert build_report(result.model_copy(update={"checks": checks})).failures[0].detected_at == "prefix length 64"
    bare = sweep.model_copy(update={"evidence": {}, "diagnosis": {"first_deviating_length": 200}})
    checks = [*result.checks[:1], bare, *result.checks[2:]]
    assert build_report(result.model_copy(update={"checks": checks})).failures[0].detected_at == "prefix length 200"


def test_tie_records_and_failure_records_stay_visible() -> None:
    section = next(s for s in build_report(fx.failing_parity_run()).sections if s.check == "prefix-sweep")
    titles = [t.title for t in section.tables]
    assert "Other evidence: ties" in titles and "Other evidence: failures" in titles
    assert "Diagnosis: layers" in titles
    assert section.sweep is not None and section.sweep.tolerance_label == "atol 0.001 + rtol 1.00e-05·|ref| (claim)"
    slices = build_report(fx.slice_run()).sections[0]
    assert slices.slices[0].n == "600 (needs 400)" and "95% one-sided bound" in slices.slices[0].detail
    assert "Worst samples: long-range-retrieval / top1-agreement" in [t.title for t in slices.tables]
    assert "Other evidence: slices" in [t.title for t in slices.tables]  # per-slice facts, not envelopes
    run = fx.slice_run()  # a slice that stopped once its verdict could not change says so
    quality = run.checks[0]
    settled = {**quality.evidence["envelopes"][1], "n": 88, "planned": 619, "passed": False}
    evidence = {**quality.evidence, "envelopes": [quality.evidence["envelopes"][0], settled]}
    run = run.model_copy(update={"checks": [quality.model_copy(update={"evidence": evidence}), *run.checks[1:]]})
    assert [row.n for row in build_report(run).sections[0].slices] == ["600 (needs 400)", "88 of 619 (settled)"]


# Rendering --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(fx.ALL))
def test_rendered_outputs_match_gold(name: str) -> None:
    data = build_report(fx.ALL[name]())
    assert_gold({f"{name}.html": render_html(data), f"{name}.md": render_markdown(data)})


def test_rendering_from_results_json_needs_no_model() -> None:
    """Re-render from the JSON record alone, in a fresh interpreter that must not import torch."""
    result = fx.failing_parity_run()
    code = (
        "import sys; from gate.core.result import GateResult; from gate.report import build_report, render_html;"
        "r = GateResult.model_validate_json(sys.stdin.read()); sys.stdout.write(render_html(build_report(r)));"
        "assert 'torch' not in sys.modules, 'rendering imported torch'"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], input=result.model_dump_json(), capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == render_html(build_report(result))


class _Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.attributes: set[str] = set()
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attributes.update(name for name, _ in attrs)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_hostile_manifest_strings_are_inert_in_html() -> None:
    html = render_html(build_report(fx.hostile_run()))
    parsed = _Elements()
    parsed.feed(html)
    assert "script" not in parsed.tags and "img" not in parsed.tags
    assert not any(a.startswith("on") for a in parsed.attributes)
    assert not any("javascript:" in href for href in re.findall(r'href="([^"]*)"', html))
    assert fx.HOSTILE in "".join(parsed.text)  # shown, as text
    assert "Content-Security-Policy" in html and "default-src 'none'" in html


def test_hostile_manifest_strings_are_inert_in_markdown() -> None:
    md = render_markdown(build_report(fx.hostile_run()))
    assert "<script" not in md and "<img" not in md
    assert not re.search(r"(?<!\\)\]\(javascript:", md) and "\\[link\\]" in md
    assert "&lt;script&gt;" in md
    for line in md.splitlines():  # every table row keeps its column count: no injected pipes
        if line.startswith("| 4 | prefix-sweep"):
            assert len(re.findall(r"(?<!\\)\|", line)) == 7


def test_markdown_stays_under_the_limit() -> None:
    data = build_report(fx.failing_parity_run())
    full = render_markdown(data)
    compact_limit = len(full.encode()) - 1
    compact = render_markdown(data, limit=compact_limit)
    assert len(compact.encode()) <= compact_limit and "omitted" in compact and "prefix-sweep" in compact
    cut = render_markdown(data, limit=900)
    assert len(cut.encode()) <= 900 and cut.rstrip().endswith("see dossier.html for the rest._")


def test_every_output_says_unsigned_or_signed(tmp_path: Path) -> None:
    data = build_report(fx.passing_run())
    assert "UNSIGNED" in render_html(data) and "UNSIGNED" in render_markdown(data)
    signed = build_report(fx.passing_run(), Signing(signed=True, keyid="ab" * 32))
    html = render_html(signed)
    assert ">SIGNED<" in html and "UNSIGNED" not in html and "UNSIGNED" not in render_markdown(signed)


# write_outputs ----------------------------------------------------------------------------------


def _run_dir(tmp_path: Path, result: GateResult) -> tuple[Path, Path]:
    manifest = tmp_path / "change.yaml"
    manifest.write_text("apiVersion: gate/v1\nname: change\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text(result.model_dump_json(indent=2))
    return manifest, out


def test_write_outputs_unsigned(tmp_path: Path) -> None:
    manifest, out = _run_dir(tmp_path, fx.failing_parity_run())
    (out / "attestation.dsse.json").write_text("{}")  # stale, from an earlier signed run
    written = write_outputs(fx.failing_parity_run(), out, manifest, None, environ={})
    assert [p.name for p in written] == ["dossier.html", "dossier.md", "junit.xml", "manifest.yaml"]
    assert not (out / "attestation.dsse.json").exists()
    assert (out / "manifest.yaml").read_bytes() == manifest.read_bytes()
    for name in ("dossier.html", "dossier.md", "junit.xml"):
        assert "UNSIGNED" in (out / name).read_text()
    assert not [p for p in out.iterdir() if p.name.startswith(".")], "temp files left behind"


def test_write_outputs_rejects_a_bad_key_before_writing(tmp_path: Path) -> None:
    manifest, out = _run_dir(tmp_path, fx.passing_run())
    bad = tmp_path / "bad.key"
    bad.write_text("not a key")
    with pytest.raises(InputError, match=r"bad\.key"):
        write_outputs(fx.passing_run(), out, manifest, bad, environ={})
    assert sorted(p.name for p in out.iterdir()) == ["results.json"]


def test_github_annotations_are_capped_and_escaped(tmp_path: Path) -> None:
    result = fx.failing_parity_run()
    template = result.checks[1]
    checks = [template.model_copy(update={"check": f"check-{i}", "message": f"bad%\nline {i}"}) for i in range(12)]
    data = build_report(result.model_copy(update={"checks": checks}))
    lines = workflow_commands(data, Path("out/dossier.html"), "examples/a,b.yaml")
    errors = [line for line in lines if line.startswith("::error ")]
    assert len(errors) == 10 and lines[-1].startswith("::notice ")
    assert "2 more checks not annotated: every one is in the job summary" in lines[-1]
    assert "bad%25%0Aline 0" in errors[0] and "file=examples/a%2Cb.yaml," in errors[0]
    assert all("\n" not in line for line in lines)


def test_one_annotation_per_failing_check_on_the_changed_file() -> None:
    data = build_report(fx.failing_parity_run())
    lines = workflow_commands(data, Path("out/dossier.html"), "gate/m.yaml", ["src/kv.py", "src/other.py"])
    errors = [line for line in lines if line.startswith("::error ")]
    failing = [f for f in data.failures if f.status in ("FAIL", "ERROR")]
    assert failing and len(errors) == len(failing)  # one each, not one per file
    assert all(line.startswith("::error file=src/kv.py,") for line in errors)
    assert all("also concerns src/other.py, gate/m.yaml" in line for line in errors)
    alone = workflow_commands(data, Path("out/dossier.html"), "gate/m.yaml")
    assert all(line.startswith("::error file=gate/m.yaml,") for line in alone if line.startswith("::error"))


def test_a_verdict_that_held_shows_no_failure_box_and_annotates_no_error() -> None:
    amber = (
        fx.failing_parity_run()
        .checks[1]
        .model_copy(  # an amber check beside the ones that held
            update={"status": Status.unproven, "severity": "warn", "unproven": "warn"}
        )
    )
    warned = fx.failing_parity_run().checks[1].model_copy(update={"severity": "warn"})  # fails, never blocks
    for held in (fx.passing_run(), fx.waived_run(), fx.awaiting_run()):
        result = held.model_copy(update={"checks": [*held.checks, amber, warned]})
        data = build_report(result)
        assert data.held and data.failures, result.verdict
        md, html = render_markdown(data), render_html(data)
        assert "Why it did not pass" not in md and "Why it did not pass" not in html
        assert "Noted, not blocking (the verdict holds)" in md and 'class="notes"' in html
        lines = workflow_commands(data, Path("out/dossier.html"), "gate/m.yaml")
        assert not [line for line in lines if line.startswith("::error")]
    failing = build_report(fx.failing_parity_run())
    assert not failing.held and "Why it did not pass" in render_markdown(failing)


def test_publish_only_under_github_actions(tmp_path: Path) -> None:
    data = build_report(fx.passing_run())
    quiet = io.StringIO()
    publish(data, "# md\n", Path("d.html"), {}, stream=quiet)
    assert quiet.getvalue() == ""
    loud = io.StringIO()
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_WORKSPACE": "/ws"}
    publish(data, "# md\n", Path("d.html"), env, manifest_file="/ws/examples/x.yaml", stream=loud)
    assert loud.getvalue().splitlines()[-1].startswith("::notice title=gate verdict::PASS (UNSIGNED)")
    assert summary.read_text() == "earlier step\n# md\n"
    collected = tmp_path / "annotations.txt"  # the Action collects them to cap them over its step
    publish(data, "# md\n", Path("d.html"), {**env, "GATE_ANNOTATIONS": str(collected)}, stream=loud)
    assert collected.read_text().startswith("::notice title=gate verdict::PASS")


def test_report_evidence_doc_names_every_record() -> None:
    from gate.checks.faces import EVIDENCE

    doc = (Path(__file__).parents[2] / "docs" / "report-evidence.md").read_text()
    for check, record in EVIDENCE.items():
        assert f"`{check}`" in doc and f"`{record.__name__}`" in doc, check


def test_awaiting_approval_banner() -> None:
    result = fx.slice_run().model_copy(update={"verdict": Verdict.awaiting_approval, "exit_code": 4, "checks": []})
    data = build_report(result)
    assert (data.banner.label, data.banner.tone) == ("AWAITING APPROVAL", "await")
    assert "⏳ gate: AWAITING APPROVAL · UNSIGNED" in render_markdown(data)
    assert "AWAITING APPROVAL" in render_html(data)


def test_ties_as_flags_and_as_records() -> None:
    series = {"length": [1, 10, 100], "max_abs_delta": [1e-6, 1e-5, 1e-2], "argmax_agree": [True, True, True]}
    per_length = {**series, "tie": [False, True, False], "min_margin": [0.1, 0.0, 0.1]}
    evidence = {**SWEEP, "per_length": per_length, "ties": [{"length": 1, "row": 0, "margin": 0.0, "tolerance": 0.1}]}
    views = read_evidence("prefix-sweep", evidence)
    assert views.sweep is not None and len(views.sweep.ties) == 2
    assert views.sweep.ties[1].x == views.sweep.markers[1].x
    assert views.sweep.tolerance_label.startswith("atol 0.001") and views.first_failing_length == 100


def test_a_bounded_degradation_dossier_shows_the_invariants_beside_the_envelopes() -> None:
    """quant-invariants' and evict-invariants' evidence `invariants` (held | broken per invariant) is
    a table right under the envelopes in both dossiers; a check that judged none says why there."""
    run = fx.slice_run()
    invariants = {"evict-protected": "broken", "evict-ranking": "held"}
    evict = run.checks[0].model_copy(
        update={"check": "evict-invariants", "status": fx.Status.failed, "evidence": {"invariants": invariants}}
    )
    quant = run.checks[0].model_copy(
        update={"check": "quant-invariants", "status": fx.Status.unproven, "evidence": {}, "message": "no state"}
    )
    data = build_report(run.model_copy(update={"checks": [*run.checks, evict, quant]}))
    assert [(i.check, i.invariant, i.held, i.tone) for i in data.invariants] == [
        ("evict-invariants", "evict-protected", "BROKEN", "bad"),
        ("evict-invariants", "evict-ranking", "held", "good"),
        ("quant-invariants", "every invariant", "UNPROVEN", "unproven"),
    ]
    markdown = render_markdown(data)
    assert "| evict-invariants | evict-protected | ❌ BROKEN |" in markdown
    assert "| quant-invariants | every invariant | 🟠 UNPROVEN: no state |" in markdown
    html = render_html(data)
    assert '<td class="mono">evict-protected</td><td><span class="pill tone-bad">BROKEN</span>' in html
    assert build_report(fx.slice_run()).invariants == []  # no such check: nothing shown
