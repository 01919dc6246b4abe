"""Bug classes named without the optional capabilities (issue 49): a decoder that offers sessions
alone, no LayerTracing and no AttentionProbe, still gets its class from model-level experiments
(gate.checks._diagnosis: window_or_chunk, offset_or_map, head_map), and the same class with the
layer trace, the attention probe or both; docs/plugins.md's diagnosis table is the one generated
from DIAGNOSIS_TABLE.

The decoders are tests/plugins/gate-plugin-gqa's (grouped-query attention, 4 query heads over 2 KV
heads, RoPE, a static cache), each wrong in one way in its own session code, never a gate fault:
its own chunked prefill (`prefill_chunk: 16`) masking each chunk from the chunk's origin fails from
the first prefix it chunks on, the onset a window would show; a sliding window is a window; an
interleaved KV-head map, everywhere or only in the one-token decode step over a cache (whose
failures from prefix 1 on are a mask offset's profile), is a head map."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gate.checks._diagnosis import BUG_CLASSES, DIAGNOSIS_TABLE, diagnosis_table
from gate.checks._diagnosis.classes import uncertain
from gate.cli.main import cli
from tests.support.repo import REPO

MANIFEST = REPO / "tests" / "engine" / "gqa" / "static-cache.yaml"

WRONG = [
    # four layers: with two, the wrong chunk rows move the next token by less than bfloat16's tolerance
    ("layers: 4, prefill_chunk: 16, bug: chunk-mask-origin", "mask-offset"),
    ("bug: sliding-window", "mask-window"),
    ("bug: kv-head-map-decode", "kv-head-mapping"),
    ("bug: kv-head-map", "kv-head-mapping"),
]
"""gqa candidate options -> the class its failure must carry."""


def run(
    tmp: Path, options: str, *, dtype: str, trace: bool, checks: tuple[str, ...], probe: bool = False
) -> tuple[int, dict[str, Any]]:
    """`gate run` of the gqa manifest (its sweep to 300) with these candidate options (`layers` for both
    paths), these checks only."""
    extra = ", trace: true" if trace else ""
    if probe:
        options += ", probe: true"
    if "layers: " in options:
        extra += ", layers: " + options.split("layers: ")[1].split(",")[0]
        options = ", ".join(o for o in options.split(", ") if not o.startswith("layers"))
    text = MANIFEST.read_text().replace("dtype: float32", f"dtype: {dtype}")
    text = text.replace("longest: 2047", "longest: 300")
    text = text.replace("options: {engine: recompute}", f"options: {{engine: recompute{extra}}}")
    text = text.replace("options: {engine: static-cache}", f"options: {{engine: static-cache, {options}{extra}}}")
    manifest = tmp / "gqa.yaml"
    manifest.write_text(text)
    out = tmp / "out"
    args = ["run", str(manifest), "--out", str(out), *(a for name in checks for a in ("--check", name))]
    result = CliRunner().invoke(cli, args)
    return result.exit_code, {c["check"]: c for c in json.loads((out / "results.json").read_text())["checks"]}


@pytest.mark.parametrize("trace", [False, True], ids=["sessions-alone", "trace"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize(
    ("options", "bug_class"), WRONG, ids=["chunked-prefill", "window", "head-map-decode", "head-map"]
)
def test_a_wrong_decoder_fails_with_its_class_with_or_without_the_trace(
    tmp_path: Path, options: str, bug_class: str, dtype: str, trace: bool
) -> None:
    code, checks = run(tmp_path, options, dtype=dtype, trace=trace, checks=("prefix-sweep",))
    sweep = checks["prefix-sweep"]
    assert code == 1 and sweep["status"] == "fail", sweep["message"]
    diagnosis = sweep["diagnosis"]
    assert diagnosis["bug_class"] == bug_class, diagnosis
    assert ("layers" in diagnosis) == trace  # the class came from the trace, or from sessions alone
    if not trace:
        seen = diagnosis["model_level"]
        if bug_class == "mask-offset":  # the onset looked like a window; a chunk over a cache is blind
            assert diagnosis["profile"] == "onset-at-length" and seen["visibility"]["blind"], seen
        if bug_class == "mask-window":  # every step sees the token before it, and one-token steps fail too
            assert not seen["visibility"]["blind"] and seen["stepwise_deviates"] is True, seen
        if bug_class == "kv-head-mapping":
            assert seen["uniform_prompt"]["position_free"], seen


@pytest.mark.parametrize("trace", [False, True], ids=["probe", "probe+trace"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize(("options", "bug_class"), WRONG, ids=["chunked", "window", "map-decode", "map"])
def test_the_probe_names_no_other_class(tmp_path: Path, options: str, bug_class: str, dtype: str, trace: bool) -> None:
    """With the attention probe (gqa's session code fed mask-oracle's q, k, v) the sweep keeps its class,
    and mask-oracle, where its cases show the bug, names the same one (a window longer than its 10
    positions it cannot see)."""
    _, checks = run(tmp_path, options, dtype=dtype, trace=trace, checks=("prefix-sweep", "mask-oracle"), probe=True)
    sweep, oracle = checks["prefix-sweep"], checks["mask-oracle"]
    assert sweep["status"] == "fail" and sweep["diagnosis"]["bug_class"] == bug_class, sweep["diagnosis"]
    if bug_class == "mask-window":
        assert oracle["status"] != "fail", oracle["message"]
    else:
        assert oracle["status"] == "fail" and oracle["diagnosis"]["bug_class"] == bug_class, oracle["message"]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_decode_only_head_map_is_named_by_schedule_fuzz_too(tmp_path: Path, dtype: str) -> None:
    """The shrunk reproducer ends in a one-token step over a cache: it sees the token before it (no mask
    offset) and is wrong on one token repeated."""
    code, checks = run(tmp_path, "bug: kv-head-map-decode", dtype=dtype, trace=False, checks=("schedule-fuzz",))
    fuzz = checks["schedule-fuzz"]
    assert code == 1 and fuzz["status"] == "fail", fuzz["message"]
    assert fuzz["diagnosis"]["bug_class"] == "kv-head-mapping", fuzz["diagnosis"]
    assert not fuzz["diagnosis"]["visibility"]["blind"]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_correct_decoder_with_its_own_chunked_prefill_passes(tmp_path: Path, dtype: str) -> None:
    code, checks = run(
        tmp_path, "prefill_chunk: 16", dtype=dtype, trace=False, checks=("prefix-sweep", "schedule-fuzz")
    )
    for name in ("prefix-sweep", "schedule-fuzz"):
        assert checks[name]["status"] in ("pass", "warn"), checks[name]["message"]
    assert code == 5  # a run of chosen checks is partial, never a pass; nothing failed


def test_undecided_classes_name_the_capability_that_decides() -> None:
    mask = uncertain(("mask-offset", "kv-head-mapping"), "why")
    assert mask["decide"] == "offer AttentionProbe or LayerTracing to decide between mask-offset, kv-head-mapping"
    other = uncertain(("kv-head-mapping", "positional-index", "per-layer-ordering"), "why")
    assert other["decide"].startswith("offer LayerTracing to decide between") and other["decide"] in other["evidence"]


TABLE = re.compile(r"<!-- diagnosis-table:[^\n]*-->\n(.*?)<!-- /diagnosis-table -->", flags=re.S)


def test_the_doc_table_is_the_generated_one() -> None:
    (committed,) = TABLE.findall((REPO / "docs" / "plugins.md").read_text())
    result = CliRunner().invoke(cli, ["checks", "--diagnoses"])
    assert result.exit_code == 0, result.output
    assert committed == result.output == diagnosis_table(), "docs/plugins.md is stale: paste `gate checks --diagnoses`"
    assert set(DIAGNOSIS_TABLE) <= set(BUG_CLASSES)
    rows = {line.split("|")[1].strip(" `"): line for line in committed.splitlines()[2:]}
    assert "cannot" in rows["per-layer-ordering"].split("|")[2]  # what sessions alone cannot tell says so


TINYLM = REPO / "tests" / "engine" / "tinylm" / "kv-cache.yaml"


def run_tinylm(tmp: Path, extra: str, *, dtype: str) -> tuple[int, dict[str, Any], str]:
    """tinylm with `bug: head-roll` and `extra` candidate options (`trace: true` on both paths):
    prefix-sweep, schedule-fuzz and mask-oracle; the checks by name and the dossier's text."""
    text = TINYLM.read_text().replace("dtype: float32", f"dtype: {dtype}")
    traced = ", trace: true" if "trace" in extra else ""
    text = text.replace("options: {engine: recompute}", f"options: {{engine: recompute{traced}}}")
    text = text.replace("options: {engine: kv-cache}", f"options: {{engine: kv-cache, bug: head-roll{extra}}}")
    manifest = tmp / "tinylm.yaml"
    manifest.write_text(text)
    out = tmp / "out"
    checks = ("prefix-sweep", "schedule-fuzz", "mask-oracle")
    result = CliRunner().invoke(
        cli, ["run", str(manifest), "--out", str(out), *(a for c in checks for a in ("--check", c))]
    )
    record = json.loads((out / "results.json").read_text())
    return result.exit_code, {c["check"]: c for c in record["checks"]}, (out / "dossier.md").read_text()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_where_sessions_cannot_decide_the_dossier_names_the_candidates_and_the_capability(
    tmp_path: Path, dtype: str
) -> None:
    """tinylm (learned positions, 4 heads, no grouping) reading head h + 1's K/V in its cached steps is
    wrong from one token on an empty cache; with absolute positions even one token repeated moves the
    full pass, so no model-level experiment tells a head map from the cached path's weights or a
    position: uncertain, the candidates listed, and the dossier says which capability would decide."""
    code, checks, dossier = run_tinylm(tmp_path, "", dtype=dtype)
    assert code == 1
    for name in ("prefix-sweep", "schedule-fuzz"):
        diagnosis = checks[name]["diagnosis"]
        assert checks[name]["status"] == "fail" and diagnosis["bug_class"] == "uncertain", diagnosis
        assert diagnosis["candidates"] == ["kv-head-mapping", "stale-state", "positional-index"], diagnosis
        assert (
            diagnosis["decide"] == "offer LayerTracing to decide between kv-head-mapping, stale-state, positional-index"
        )
    assert "offer LayerTracing to decide between kv-head-mapping, stale-state, positional-index" in dossier


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("extra", [", trace: true", ", probe: true"], ids=["trace", "probe"])
def test_the_capability_named_decides(tmp_path: Path, extra: str, dtype: str) -> None:
    """The layer trace names the head map in the sweep and the fuzz (each query head's output is another
    head's); the probe (tinylm's attention fed mask-oracle's q, k, v) names it in mask-oracle."""
    code, checks, _ = run_tinylm(tmp_path, extra, dtype=dtype)
    assert code == 1
    named = ("prefix-sweep", "schedule-fuzz") if "trace" in extra else ("mask-oracle",)
    for name in named:
        assert checks[name]["status"] == "fail", checks[name]["message"]
        assert checks[name]["diagnosis"]["bug_class"] == "kv-head-mapping", checks[name]["diagnosis"]
