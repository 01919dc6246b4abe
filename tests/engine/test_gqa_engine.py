"""A second third-party engine (tests/plugins/gate-plugin-gqa, installed by `make install`), unlike
tinylm: grouped-query attention, rotary positions applied when keys are read, a static cache whose
unused tail holds NaN, offered with NO faults of its own and NO attention probe. Every control its
checks get is a generic stand-in chosen at run time.

Its correct cache passes every built-in policy that applies to it (layout and scheduling, tolerance
and greedy-tokens claims) in float32 and bfloat16 (amber with exit 0: mask-oracle is
unproven-not-applicable without a probe, and a bfloat16 sweep may warn; under greedy-tokens in
bfloat16 handle-swap cannot flip a token and rows-crossed stands in after it), and each bug planted in its
own session code fails the check built to see it with the class the evidence supports; with the
plugin's optional layer trace (`trace: true`, not a probe) a wrong KV-head map is named at read time.
tests/checks/test_classes_without_tracing.py runs the variants that look like another class."""

from __future__ import annotations

import json
from importlib.metadata import distribution
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gate.cli.main import cli

MANIFEST = Path(__file__).parent / "gqa" / "static-cache.yaml"
IDENTITY = {"layout": "[token-ids, positions, kv-dtype]", "scheduling": "[token-ids, positions, attention-mask]"}
"""What each built-in policy that applies to a session-only path requires the manifest to declare."""
POLICIES = [(intervention, claim) for intervention in IDENTITY for claim in ("tolerance", "greedy-tokens")]
"""Every built-in (intervention, claim) a path with sessions alone can be gated under: layout and
scheduling, against a full pass (exact needs the old cached path as the reference, and gqa has one
cached engine; the other policies need a prefix store, a draft, a server or an approximation)."""


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
    text = text.replace("identity: [token-ids, positions, kv-dtype]", f"identity: {IDENTITY[policy[0]]}")
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


def plan(tmp: Path, policy: tuple[str, str]) -> dict[str, tuple[str, str, list[str]]]:
    """`gate plan --format json` of the manifest under `policy`: per check its severity, params and controls."""
    text = MANIFEST.read_text().replace("intervention: layout", f"intervention: {policy[0]}")
    text = text.replace("identity: [token-ids, positions, kv-dtype]", f"identity: {IDENTITY[policy[0]]}")
    manifest = tmp / f"plan-{'-'.join(policy)}.yaml"
    manifest.write_text(text.replace("level: tolerance", f"level: {policy[1]}"))
    result = CliRunner().invoke(cli, ["plan", str(manifest), "--format", "json"])
    assert result.exit_code == 0, result.output
    return {
        c["check"]: (c["severity"], json.dumps(c["params"], sort_keys=True), [x["fault"] for x in c["controls"]])
        for c in json.loads(result.output)["checks"]
    }


def test_every_applicable_policy_runs_the_checks_the_engine_runs_are_tested_under(tmp_path: Path) -> None:
    """The end-to-end runs below take layout/tolerance in float32 and scheduling/tolerance in bfloat16
    (CI time: each run is about a minute). Every other applicable (intervention, claim) plans the same
    checks with the same parameters and controls, only a severity weaker (greedy-tokens: the sweep
    warns) and layout adding phase-performance (serving clocks, not logits). The claim level still
    changes what a check asserts: under greedy-tokens, batch-invariance asserts tokens only (the test
    after the next)."""
    from gate.engine.generic_faults import GENERIC_FAULTS

    # gqa plants no fault of its own: a control no generic fault stands in for is unsupported under
    # every policy (layout also names the hf beam and generate-cache faults), so what the runs below
    # prove is the same where the controls that can run on it are
    runnable = {f for g in GENERIC_FAULTS for f in (g.name, *g.stands_for)}
    plans = {
        policy: {name: (sev, params, [f for f in faults if f in runnable]) for name, (sev, params, faults) in p.items()}
        for policy, p in ((policy, plan(tmp_path, policy)) for policy in POLICIES)
    }
    base = plans[("scheduling", "tolerance")]
    assert set(plans[("layout", "tolerance")]) - set(base) == {"phase-performance"}
    for policy, checks in plans.items():
        assert set(checks) - {"phase-performance"} == set(base), policy
        for name, (severity, params, controls) in base.items():
            assert checks[name][1:] == (params, controls), (policy, name)
            weaker = policy[1] == "greedy-tokens" and name == "prefix-sweep"
            assert checks[name][0] == ("warn" if weaker else severity), (policy, name)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("policy", "dtype"),
    [(("layout", "tolerance"), "float32"), (("scheduling", "tolerance"), "bfloat16")],
    ids=["layout-float32", "scheduling-bfloat16"],
)
def test_the_correct_engine_passes_the_built_in_policies_with_stand_ins(
    tmp_path: Path, policy: tuple[str, str], dtype: str
) -> None:
    code, record = run(tmp_path, dtype=dtype, policy=policy)
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
        # wrong from one token on an empty cache: no offset, no window, no prefix state; and wrong on one token
        # repeated, where the full pass is position-free and no mask or position can move the answer: a query
        # head reads another KV head's values (gate.checks._diagnosis.head_map)
        ("kv-head-map", "prefix-sweep", "kv-head-mapping", None),
        ("kv-head-map", "schedule-fuzz", "kv-head-mapping", None),
        ("reset-position", "reset-isolation", "reset-leak", None),
        # NaN through the cache while the candidate's own full pass over the same tokens is finite
        ("read-past-end", "prefix-sweep", "read-past-valid-length", None),
    ],
)
@pytest.mark.parametrize("policy", ["layout", "scheduling+trace"])
def test_a_bug_in_the_engines_own_code_fails_its_check_with_the_class_the_evidence_supports(
    tmp_path: Path, bug: str, check: str, bug_class: str, candidates: list[str] | None, policy: str
) -> None:
    """Under layout without a trace; under scheduling with the plugin's layer trace, where every bug keeps
    the class it gets from logits alone (the head map named at read time with the trace)."""
    traced = policy == "scheduling+trace"
    code, record = run(tmp_path, bug=bug, only=(check,), trace=traced, policy=(policy.split("+")[0], "tolerance"))
    assert code == 1, record["summary"]
    assert record["verdict"] == "fail"
    failed = by_check(record)[check]
    assert failed["status"] == "fail", failed["message"]
    diagnosis = failed["diagnosis"] or {}
    assert diagnosis.get("bug_class") == bug_class, diagnosis
    assert diagnosis.get("candidates") == candidates, diagnosis
    assert "mask-window" not in json.dumps(diagnosis)
    if traced and bug == "kv-head-map":
        # `trace: true` is a LayerTracing, not a probe: K/V agree with the full pass, and each query head's
        # attention output is exactly another KV head's expected output. 4 query heads over 2 KV heads:
        # grouped-query attention assigns 0 0 1 1, the mutant reads 0 1 0 1
        first = next(layer for layer in diagnosis["layers"] if layer.get("component") is not None)
        assert first["layer"] == 0 and first["component"] == "attention-output", first
        assert first["read_map"] == [0, 1, 0, 1] and first["heads_remapped"], first


@pytest.mark.slow
def test_a_stand_in_that_cannot_show_under_a_token_claim_hands_over_to_the_next(tmp_path: Path) -> None:
    """Under greedy-tokens batch-invariance asserts the tokens alone. In bfloat16 on gqa the handle-swap
    stand-in moves rows by about 0.57 without flipping a greedy token: the claim is not broken, so that
    stand-in could show nothing (unobservable, never "no power"), and the next generic fault covering
    the same rule runs: rows-crossed, a batch answered one row over, flips tokens and is detected."""
    code, record = run(tmp_path, dtype="bfloat16", policy=("scheduling", "greedy-tokens"), only=("batch-invariance",))
    check = by_check(record)["batch-invariance"]
    assert check["status"] in ("pass", "warn"), check["message"]
    swap = next(c for c in check["controls"] if c["fault"] == "cross-request-handle")
    assert swap["applied"] == "rows-crossed" and swap["outcome"] == "detected", swap
    assert "after handle-swap unobservable" in swap["message"], swap["message"]
    assert not [c for c in check["controls"] if c["outcome"] in ("missed", "over-rejected")]
    assert code != 1, record["summary"]
