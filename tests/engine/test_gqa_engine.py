"""A second third-party engine (tests/plugins/gate-plugin-gqa, installed by `make install`), unlike
tinylm: grouped-query attention, rotary positions applied when keys are read, a static cache whose
unused tail holds NaN, offered with NO faults of its own and NO attention probe. Every control its
checks get is a generic stand-in chosen at run time.

Its correct cache passes the built-in layout policy in float32 and bfloat16 (amber with exit 0:
mask-oracle is unproven-not-applicable without a probe, and a bfloat16 sweep may warn), and each bug
planted in its own session code fails the check built to see it."""

from __future__ import annotations

import json
from importlib.metadata import distribution
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gate.cli.main import cli

MANIFEST = Path(__file__).parent / "gqa" / "static-cache.yaml"


def run(
    tmp: Path,
    *,
    dtype: str = "float32",
    bug: str = "none",
    only: tuple[str, ...] = (),
    trace: bool = False,
    policy: tuple[str, str] = ("layout", "tolerance"),
) -> tuple[int, dict[str, Any]]:
    """One `gate run` of the manifest; `policy`: (intervention, claim level) of a built-in policy."""
    text = MANIFEST.read_text().replace("dtype: float32", f"dtype: {dtype}")
    text = text.replace("intervention: layout", f"intervention: {policy[0]}")
    text = text.replace("level: tolerance", f"level: {policy[1]}")
    extra = ", trace: true" if trace else ""
    text = text.replace("options: {engine: recompute}", f"options: {{engine: recompute{extra}}}")
    if bug != "none":
        extra = f", bug: {bug}{extra}"
    text = text.replace("options: {engine: static-cache}", f"options: {{engine: static-cache{extra}}}")
    manifest = tmp / f"gqa-{dtype}-{bug}.yaml"
    manifest.write_text(text)
    out = tmp / "out"
    args = ["run", str(manifest), "--out", str(out), *(a for name in only for a in ("--check", name))]
    result = CliRunner().invoke(cli, args)
    return result.exit_code, json.loads((out / "results.json").read_text())


def by_check(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["check"]: c for c in record["checks"]}


def test_the_engine_is_a_separate_installed_package_that_imports_no_gate_in_its_model() -> None:
    dist = distribution("gate-plugin-gqa")
    assert any(ep.group == "gate.adapters" and ep.name == "gqa" for ep in dist.entry_points)
    import gate_plugin_gqa.gqa as model

    source = Path(model.__file__).read_text()
    assert "import gate" not in source and "from gate" not in source


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_correct_engine_passes_the_built_in_layout_policy_with_stand_ins(tmp_path: Path, dtype: str) -> None:
    code, record = run(tmp_path, dtype=dtype)
    assert code == 0, record["summary"]
    assert record["verdict"] == "pass" and record["site_policy"] == []
    checks = by_check(record)
    oracle = checks["mask-oracle"]
    assert oracle["status"] == "unproven" and oracle["unproven"] == "warn", oracle["message"]
    for name in ("prefix-sweep", "greedy-parity", "batch-invariance", "schedule-fuzz", "reset-isolation"):
        check = checks[name]
        assert check["status"] in ("pass", "warn"), check["message"]
        assert check["severity"] == "deny"
        ran = [c for c in check["controls"] if c["outcome"] != "unsupported"]
        assert ran and all(c["kind"] == "generic" and c["stand_in"] for c in ran), ran
        assert any(c["outcome"] == "detected" for c in ran)
        # nothing a control could not show counts against the check: never missed, never over-rejected
        assert not [c for c in check["controls"] if c["outcome"] in ("missed", "over-rejected")]
    assert checks["prefix-sweep"]["exercise"]["cached_steps"] > 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "bug, check, bug_class, candidates",
    [
        # no layer trace, no probe: model-level experiments with sessions alone (gate.checks._diagnosis).
        # The shrunk reproducer "prefill 1, append 2" is a chunk over a cache, and a chunk of 2 over 8 cached
        # tokens does not see the token before it: the chunk's mask starts at the chunk
        ("chunk-mask-origin", "schedule-fuzz", "mask-offset", None),
        # the sweep's first failing length is right after a one-shot prefill (so not a window, which depends
        # on the length alone) and wrong after its chunks, and the same visibility experiment says why
        ("chunk-mask-origin", "prefix-sweep", "mask-offset", None),
        # wrong from one token on an empty cache: no offset, no window, no prefix state. Which KV head a query
        # head reads cannot be told from logits alone (the weights and an absolute position would look the
        # same), so the diagnosis lists the candidates rather than naming one
        ("kv-head-map", "prefix-sweep", "uncertain", ["kv-head-mapping", "stale-state", "positional-index"]),
        ("kv-head-map", "schedule-fuzz", "uncertain", ["kv-head-mapping", "stale-state", "positional-index"]),
        ("reset-position", "reset-isolation", "reset-leak", None),
        # NaN through the cache while the candidate's own full pass over the same tokens is finite
        ("read-past-end", "prefix-sweep", "read-past-valid-length", None),
    ],
)
def test_a_bug_in_the_engines_own_code_fails_its_check_with_the_class_the_evidence_supports(
    tmp_path: Path, bug: str, check: str, bug_class: str, candidates: list[str] | None
) -> None:
    code, record = run(tmp_path, bug=bug, only=(check,))
    assert code == 1, record["summary"]
    assert record["verdict"] == "fail"
    failed = by_check(record)[check]
    assert failed["status"] == "fail", failed["message"]
    diagnosis = failed["diagnosis"] or {}
    assert diagnosis.get("bug_class") == bug_class, diagnosis
    assert diagnosis.get("candidates") == candidates, diagnosis
    assert "mask-window" not in json.dumps(diagnosis)


@pytest.mark.slow
@pytest.mark.parametrize("check", ["prefix-sweep", "schedule-fuzz"])
def test_with_a_layer_trace_a_wrong_kv_head_map_is_named_at_read_time(tmp_path: Path, check: str) -> None:
    """`trace: true` (a LayerTracing, not a probe): K/V agree with the full pass, and each query head's
    attention output is exactly another KV head's expected output, so the class is named; the same
    run without the trace stays uncertain (the test above)."""
    code, record = run(tmp_path, bug="kv-head-map", only=(check,), trace=True)
    assert code == 1, record["summary"]
    failed = by_check(record)[check]
    diagnosis = failed["diagnosis"] or {}
    assert diagnosis.get("bug_class") == "kv-head-mapping", diagnosis
    assert "candidates" not in diagnosis, diagnosis
    first = next(layer for layer in diagnosis["layers"] if layer.get("component") is not None)
    assert first["layer"] == 0 and first["component"] == "attention-output", first
    # 4 query heads over 2 KV heads: grouped-query attention assigns 0 0 1 1, the mutant reads 0 1 0 1
    assert first["read_map"] == [0, 1, 0, 1] and first["heads_remapped"], first
