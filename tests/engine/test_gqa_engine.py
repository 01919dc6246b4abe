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
    tmp: Path, *, dtype: str = "float32", bug: str = "none", only: tuple[str, ...] = ()
) -> tuple[int, dict[str, Any]]:
    text = MANIFEST.read_text().replace("dtype: float32", f"dtype: {dtype}")
    if bug != "none":
        text = text.replace("options: {engine: static-cache}", f"options: {{engine: static-cache, bug: {bug}}}")
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
    "bug, check, bug_class",
    [
        # class not asserted where the diagnosis cannot name it without a layer tracer: the sweep calls a
        # chunk-mask origin mask-window (it does not know which lengths a multi-token append reached) and
        # schedule-fuzz uncertain, though its shrunk reproducer is the chunk itself ("prefill 1, append 2")
        ("chunk-mask-origin", "schedule-fuzz", None),
        # a wrong query-to-KV-head map at read time reads as mask-offset: kv-head-mapping needs the stored
        # K/V permuted, and judging the read needs each query head's output against each KV head's
        ("kv-head-map", "prefix-sweep", None),
        ("reset-position", "reset-isolation", "reset-leak"),
        # NaN logits with no layer trace to place the read: named for what is seen, not read-past-valid-length
        ("read-past-end", "prefix-sweep", "non-finite-output"),
    ],
)
def test_a_bug_in_the_engines_own_code_fails_its_check(
    tmp_path: Path, bug: str, check: str, bug_class: str | None
) -> None:
    code, record = run(tmp_path, bug=bug, only=(check,))
    assert code == 1, record["summary"]
    assert record["verdict"] == "fail"
    failed = by_check(record)[check]
    assert failed["status"] == "fail", failed["message"]
    named = (failed["diagnosis"] or {}).get("bug_class")
    if bug_class is not None:
        assert named == bug_class, failed["diagnosis"]
