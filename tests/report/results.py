"""Hand-built GateResults for the report tests: no runner, no model, fixed times and digests.

- passing_run: a layout change under a tolerance claim, every check passing, controls detected.
- failing_parity_run: the same change with a start_pos bug: the prefix sweep fails from length 512,
  with a diagnosis, a control matrix, an erroring check and a waived one.
- speculative_run: proposal-and-verify under a distribution claim (observed vs expected).
- slice_run: KV quantisation under bounded degradation, one slice outside its envelope.
- hostile_run: manifest strings carrying HTML and script, which every output must render inert.

assert_gold compares rendered outputs with tests/report/gold/ after scrubbing volatile values.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from gate.checks.greedy_parity.evidence import GreedyEvidence, GreedyRun
from gate.checks.phase_performance.evidence import ClockRow, LatencySamples, LiveBytes, ServingEvidence
from gate.checks.prefix_sweep.evidence import Boundaries, SweepCoverage, SweepEvidence, SweepRow, SweepSeries
from gate.checks.quality_slices.evidence import JudgedEnvelope, SlicesEvidence
from gate.checks.spec_distribution.evidence import DistributionEvidence
from gate.core.evidence import ToleranceRecord
from gate.core.manifest import Manifest
from gate.core.result import CheckResult, ControlResult, GateResult, Status, Verdict


def _check(**fields: Any) -> CheckResult:
    return CheckResult.model_validate(fields)


def _control(**fields: Any) -> ControlResult:
    return ControlResult.model_validate(fields)


STARTED = "2025-01-02T03:04:05Z"
FINISHED = "2025-01-02T03:05:06Z"
ENVIRONMENT = {
    "gate": "0.1.0",
    "python": "3.11.9",
    "platform": "Linux-x86_64",
    "torch": "2.13.0",
    "transformers": "5.24.0",
    "datasets": None,
    "device": "cpu",
}
SUBJECTS = {
    "reference": {
        "adapter": "reference",
        "path": "reference-full",
        "config_sha256": "ab" * 32,
        "weights_sha256": "cd" * 32,
    },
    "candidate": {
        "adapter": "reference",
        "path": "reference-paged",
        "config_sha256": "ab" * 32,
        "weights_sha256": "cd" * 32,
    },
}
SPEC_RULE = "policies/proposal-and-verify.yaml: interventions.proposal-and-verify.claims.distribution"
LENGTHS = [0, 1, 2, 16, 64, 200, 512, 2048, 8192]


def _manifest(intervention: str, claim: dict[str, Any], **extra: Any) -> dict[str, Any]:
    doc = {
        "apiVersion": "gate/v1",
        "name": extra.pop("name", f"{intervention} change"),
        "description": extra.pop("description", f"A {intervention} change under test."),
        "change": {
            "repository": "example/engine",
            "pull-request": 42,
            "commit": "0123456789abcdef0123456789abcdef01234567",
        },
        "intervention": intervention,
        "claim": claim,
        "identity": extra.pop("identity", ["token-ids", "positions"]),
        "subject": {
            "reference": {"adapter": "reference", "options": {"cache": "none"}},
            "candidate": {"adapter": "reference", "options": {"cache": "paged"}},
            "device": "cpu",
            "dtype": "float32",
            "seed": 7,
        },
        **extra,
    }
    return Manifest.model_validate(doc).model_dump(mode="json", by_alias=True)


def _plan(intervention: str, claim: str, approximate: bool, summary: str, words: str, rule: str) -> dict[str, Any]:
    return {
        "manifest_name": f"{intervention} change",
        "intervention": intervention,
        "intervention_summary": summary,
        "approximate": approximate,
        "claim": claim,
        "claim_in_words": words,
        "claim_rule": rule,
        "claim_source": f"policies/{intervention}.yaml",
        "identity_required": ["token-ids", "positions"],
        "identity_declared": ["positions", "token-ids"],
        "checks": [],
        "policies": [],
    }


def _result(
    verdict: str,
    exit_code: int,
    summary: str,
    manifest: dict[str, Any],
    plan: dict[str, Any],
    checks: list[CheckResult],
    **extra: Any,
) -> GateResult:
    return GateResult.model_validate(
        dict(
            gate_version="0.1.0",
            verdict=verdict,
            exit_code=exit_code,
            summary=summary,
            manifest=manifest,
            manifest_digest={"path": "examples/change.yaml", "sha256": "11" * 32},
            policies=[{"path": f"policies/{manifest['intervention']}.yaml", "sha256": "22" * 32}],
            plan=plan,
            checks=checks,
            subjects=SUBJECTS,
            environment=ENVIRONMENT,
            started_at=STARTED,
            finished_at=FINISHED,
            **extra,
        )
    )


def _layout_plan() -> dict[str, Any]:
    return _plan(
        "layout",
        "tolerance",
        False,
        "Exact tensors stored in a different layout: nothing about the conditional distribution may change.",
        "tolerance-bounded logits: the same argmax everywhere, logits within a stated tolerance",
        "A layout change moves bytes, not arithmetic: logits must match within rounding.",
    )


def _sweep(
    lengths: list[int],
    deltas: list[float],
    agree: list[bool],
    tie_lengths: list[int],
    rtol: float = 0.0,
    boundaries: tuple[int, ...] = (),
    **records: list[SweepRow],
) -> dict[str, Any]:
    """A prefix-sweep evidence record as gate's prefix-sweep writes it."""
    return SweepEvidence(
        per_length=SweepSeries(
            length=lengths,
            max_abs_delta=deltas,
            argmax_agree=agree,
            tie=[n in tie_lengths for n in lengths],
            min_margin=[0.2] * len(lengths),
        ),
        rows_total=len(lengths),
        rows_shown=len(lengths),
        failures=records.get("failures", []),
        ties=records.get("ties", []),
        tolerance=ToleranceRecord(atol=1e-3, rtol=rtol, source="claim"),
        boundaries=Boundaries(count=len(boundaries), first=list(boundaries[:8]), lengths=list(boundaries)),
        coverage=SweepCoverage(wanted=LENGTHS, scoped_to=None, reachable_longest=lengths[-1], unreachable=[]),
        boundary_coverage={},
        sweep_plan={"lengths": len(lengths), "longest": lengths[-1]},
    ).dump()


def _mask_oracle(status: str = "pass") -> CheckResult:
    return _check(
        check="mask-oracle",
        status=status,
        severity="deny",
        step=4,
        why="The mask defines the legal past: a leaked future edge must be caught before anything else.",
        policy_rule="policies/layout.yaml: interventions.layout.claims.tolerance.checks[0]",
        message="no future position influences any logit",
        metrics={"positions_probed": 64, "leaks": 0},
        exercise={"cached_steps": 64},
        duration_s=0.41,
        controls=[
            _control(
                fault="mask-off-by-one",
                outcome="detected",
                detected_at=1,
                output_difference=0.73,
                message="future edge at position 1",
            )
        ],
    )


def _controls(wrong_start_at: int) -> list[ControlResult]:
    return [
        _control(
            fault="mask-origin-reset",
            outcome="detected",
            detected_at=1,
            output_difference=2.31,
            message="argmax diverged at prefix length 1",
            duration_s=0.03,
            forward_s=0.02,
        ),
        _control(
            fault="wrong-start-pos",
            outcome="detected",
            detected_at=wrong_start_at,
            output_difference=0.92,
            message=f"argmax diverged at prefix length {wrong_start_at}",
        ),
        _control(
            fault="layer-order-swap",
            outcome="unobservable",
            output_difference=0.0,
            message="the fault did not change the observed outputs at these settings (max |Δ| = 0)",
        ),
    ]


def passing_run() -> GateResult:
    sweep = _check(
        check="prefix-sweep",
        status="pass",
        severity="deny",
        step=4,
        why="Each bug class hides at some length: sweep from 0 to 8192 rather than one comfortable length.",
        policy_rule="policies/layout.yaml: interventions.layout.claims.tolerance.checks[1]",
        message="argmax agrees at all 9 lengths; max |Δlogit| 3.1e-06",
        params={"lengths": LENGTHS, "atol": 1e-3},
        metrics={"max_abs_delta": 3.1e-6, "argmax_agreement": 1.0},
        evidence=_sweep(
            LENGTHS, [0.0, 1.2e-7, 2.4e-7, 4.8e-7, 9.5e-7, 1.3e-6, 1.9e-6, 2.4e-6, 3.1e-6], [True] * 9, [200]
        ),
        exercise={"cache_lengths": LENGTHS, "cached_steps": 9},
        controls=_controls(64),
        duration_s=2.5,
        positive_s=2.2,
        forward_s=2.3,
        subject_s=0.1,
    )
    greedy = _check(
        check="greedy-parity",
        status="pass",
        severity="deny",
        step=4,
        why="A cached path that agrees on the first token and then drifts reads blocks back wrongly.",
        policy_rule="policies/layout.yaml: interventions.layout.claims.tolerance.checks[2]",
        message="64 greedy tokens identical on 8 prompts",
        metrics={"prompts": 8, "tokens": 64, "first_mismatch": None},
        exercise={"cached_steps": 512},
        duration_s=1.1,
    )
    perf = _check(
        check="phase-performance",
        status="warn",
        severity="warn",
        step=6,
        why="Report time to first token, token latency and live bytes: an exact change can still be slower.",
        policy_rule="policies/layout.yaml: interventions.layout.claims.tolerance.checks[3]",
        message="time per output token 12% slower than the reference",
        metrics={"ttft_ms": 41.0, "tpot_ms": 9.3, "tpot_ratio": 1.12, "live_bytes": 1048576},
        evidence=ServingEvidence(
            scenario={"name": "chat", "conversations": 8},
            timer="perf_counter",
            device="cpu",
            repeats=3,
            confidence=0.95,
            clocks=[
                ClockRow(
                    clock="tpot_p95",
                    measures="time per output token, p95",
                    unit="s",
                    better="lower",
                    reference=0.0083,
                    candidate=0.0093,
                    budget="x1.05",
                    verdict="fail",
                    ratio=1.12,
                    low=1.08,
                    high=1.16,
                ),
            ],
            kv_theory=None,
            pressure={},
            goodput_share={"reference": 1.0, "candidate": 1.0},
            paths={"reference": "reference-full", "candidate": "reference-paged"},
            latency_samples={
                role: LatencySamples(ttft_s=[0.04, 0.041], tpot_s=[tpot, tpot * 1.1], itl_s=[tpot])
                for role, tpot in (("reference", 0.0083), ("candidate", 0.0093))
            },
            live_bytes_over_time={
                role: LiveBytes(t_s=[0.0, 0.5, 1.0], live_bytes=[0, held, held // 2], theory_bytes=None)
                for role, held in (("reference", 1048576), ("candidate", 786432))
            },
        ).dump(),
        exercise={"decode_steps": 128},
        duration_s=3.0,
    )
    return _result(
        "pass",
        0,
        "all 4 required checks passed",
        _manifest("layout", {"level": "tolerance", "atol": 1e-3}),
        _layout_plan(),
        [_mask_oracle(), sweep, greedy, perf],
    )


def failing_parity_run() -> GateResult:
    deltas = [0.0, 1.1e-7, 2.0e-7, 3.9e-6, 8.8e-5, 4.1e-4, 0.021, 0.37, 2.9]
    agree = [True, True, True, True, True, True, False, False, False]
    sweep = _check(
        check="prefix-sweep",
        status="fail",
        severity="deny",
        step=4,
        why="Each bug class hides at some length: sweep from 0 to 8192 rather than one comfortable length.",
        policy_rule="policies/layout.yaml: interventions.layout.claims.tolerance.checks[1]",
        message="argmax diverged at prefix length 512 (max |Δlogit| 0.021 > tolerance 0.001)",
        params={"lengths": LENGTHS, "atol": 1e-3},
        metrics={"max_abs_delta": 2.9, "argmax_agreement": 0.667, "argmax_failures": 3, "ties": 1},
        # tie and failure records, and gate.checks._diagnosis's profile with per-layer divergence
        evidence=_sweep(
            LENGTHS,
            deltas,
            agree,
            [200],
            rtol=1e-5,
            boundaries=(16, 256, 4096),
            ties=[SweepRow(length=200, row=1, margin=0.0002, tolerance=0.001)],
            failures=[
                SweepRow(length=512, row=0, reference_token=17, candidate_token=93, margin=0.2, max_abs_delta=0.021)
            ],
        ),
        exercise={"cache_lengths": LENGTHS, "cached_steps": 9},
        diagnosis={
            "bug_class": "positional-index",
            "explanation": "the appended token is encoded at the wrong position (start_pos / position ids)",
            "first_deviating_length": 512,
            "deviating_lengths": 3,
            "profile": "grows-with-length",
            "log_slope": 1.9,
            "first_diverging_layer": 0,
            "component": "new-kv",
            "traced_prefix_len": 512,
            "layers": [
                {
                    "layer": 0,
                    "component": "new-kv",
                    "new_k": True,
                    "new_v": False,
                    "k_delta": 0.41,
                    "v_delta": 0.0,
                    "hidden_delta": 0.09,
                },
                {
                    "layer": 1,
                    "component": "new-kv",
                    "new_k": True,
                    "new_v": True,
                    "k_delta": 0.62,
                    "v_delta": 0.2,
                    "hidden_delta": 0.33,
                },
            ],
        },
        duration_s=2.7,
    )
    greedy = _check(
        check="greedy-parity",
        status="fail",
        severity="deny",
        step=4,
        why="A cached path that agrees on the first token and then drifts reads blocks back wrongly.",
        policy_rule="policies/layout.yaml: interventions.layout.claims.tolerance.checks[2]",
        message="greedy continuation diverged at token 3 of prompt 5",
        metrics={"prompts": 8, "first_mismatch": 3},
        evidence=GreedyEvidence(
            runs=[
                GreedyRun.model_validate(
                    {
                        "prompt_len": 5,
                        "steps": 12,
                        "match": {"8": False},
                        "first_divergence": {
                            "step": 3,
                            "row": 0,
                            "absolute_position": 8,
                            "reference_token": 19,
                            "candidate_token": 93,
                            "reference_margin": 0.9,
                            "tie_band": 0.001,
                            "tie": False,
                            "max_abs_delta": 1.4,
                            "reference_top_k": [],
                            "candidate_top_k": [],
                            "tokens_from": 0,
                            "reference_tokens": [11, 52, 7, 19, 19, 40, 3, 8, 8, 21, 60, 2],
                            "candidate_tokens": [11, 52, 7, 93, 4, 4, 17, 61, 0, 5, 5, 9],
                        },
                    }
                )
            ],
            tolerance=ToleranceRecord(atol=1e-3, rtol=0.0, source="claim"),
        ).dump(),
        exercise={"cached_steps": 512},
        duration_s=1.2,
        controls=_controls(512),
    )
    identity = _check(
        check="cache-identity",
        status="error",
        severity="deny",
        step=3,
        why="Every attribute that can change K, V, mask or position must be part of the cache key.",
        policy_rule="policies/layout.yaml: interventions.layout.claims.tolerance.checks[3]",
        message="RuntimeError: adapter does not expose its cache key",
        error={
            "type": "RuntimeError",
            "message": "adapter does not expose its cache key",
            "traceback": 'Traceback (most recent call last):\n  File "gate/checks/cache_identity.py", line 40\n'
            "RuntimeError: adapter does not expose its cache key\n",
        },
        duration_s=0.05,
    )
    waived = _check(
        check="invalidation",
        status="waived",
        severity="deny",
        step=8,
        why="A model update or restart must not revive incompatible cache state.",
        policy_rule="policies/layout.yaml: interventions.layout.claims.tolerance.checks[4]",
        message="waived: stale block after weight reload",
        waiver={
            "check": "invalidation",
            "reason": "reload path is disabled in this release (tracked in #51)",
            "approver": "rivera@example.com",
            "expires": "2025-03-01",
            "ledger_id": 3,
        },
        duration_s=0.9,
    )
    return _result(
        "error",
        3,
        "error in cache-identity",
        _manifest("layout", {"level": "tolerance", "atol": 1e-3}),
        _layout_plan(),
        [_mask_oracle(), sweep, greedy, identity, waived],
    )


def speculative_run() -> GateResult:
    categories = ["the", "a", "of", "to", "and", "in", "is", "it", "that", "<other>"]
    expected = [0.21, 0.15, 0.12, 0.1, 0.09, 0.08, 0.07, 0.06, 0.05, 0.07]
    observed = [431, 296, 236, 205, 177, 163, 139, 121, 97, 135]
    spec_greedy = _check(
        check="spec-greedy",
        status="pass",
        severity="deny",
        step=4,
        why="At temperature 0 verification must reproduce the target's greedy tokens exactly.",
        policy_rule=f"{SPEC_RULE}.checks[0]",
        message="128 greedy tokens identical; 61% of drafts accepted",
        metrics={"tokens": 128, "acceptance_rate": 0.61},
        exercise={"draft_passes": 44, "accepted": 78},
        duration_s=1.9,
    )
    distribution = _check(
        check="spec-distribution",
        status="pass",
        severity="deny",
        step=4,
        why="Sampling with verification must leave the target distribution unchanged (Leviathan et al.).",
        policy_rule=f"{SPEC_RULE}.checks[1]",
        message="chi-square 6.2 on 9 dof, p = 0.72 ≥ α = 0.01",
        metrics={"p_value": 0.72, "samples": 2000},
        evidence=DistributionEvidence(
            categories=categories,
            observed=observed,
            expected=[2000 * e for e in expected],
            statistic=6.2,
            p_value=0.72,
            dof=9,
            pooled_cells=0,
            alpha=0.01,
            declared_power=0.9,
            power={"skip-verification": 0.99},
            samples_needed={},
            k=4,
            horizon=5,
            n_samples=2000,
            temperature=1.0,
            top_k=10,
            prompt=[1, 2, 3],
            by_depth=[],
            efficiency={"acceptance_rate": 0.61},
            min_top_k_gap=0.3,
            outside_enumeration_examples=[],
        ).dump(),
        exercise={"draft_passes": 1310, "bonus_tokens": 402},
        duration_s=6.2,
        controls=[
            _control(
                fault="skip-verification",
                outcome="detected",
                detected_at=400,
                output_difference=0.18,
                message="p = 3e-09 < α",
            ),
            _control(
                fault="drop-bonus",
                outcome="tolerated",
                output_difference=0.0,
                message="harmless fault tolerated as expected",
            ),
        ],
    )
    manifest = _manifest("proposal-and-verify", {"level": "distribution", "alpha": 0.01, "power": 0.9})
    plan = _plan(
        "proposal-and-verify",
        "distribution",
        False,
        "A draft proposes tokens; the target accepts or rejects them.",
        "the same output distribution under sampling, tested at a stated significance level",
        "Verified speculative sampling leaves the target distribution unchanged.",
    )
    return _result("pass", 0, "all 2 required checks passed", manifest, plan, [spec_greedy, distribution])


def slice_run() -> GateResult:
    envelopes = [
        {"slice": "long-range-retrieval", "metric": "top1-agreement", "comparator": ">=", "threshold": "0.95"},
        {"slice": "code-closure", "metric": "greedy-match", "comparator": ">=", "threshold": "0.9"},
        {"slice": "numbers", "metric": "kl", "comparator": "<=", "threshold": "0.05"},
    ]
    slices = [
        {
            "slice": "long-range-retrieval",
            "metric": "top1-agreement",
            "point": 0.93,
            "bound": 0.912,
            "threshold": 0.95,
            "comparator": ">=",
            "n": 600,
            "passed": False,
        },
        {
            "slice": "code-closure",
            "metric": "greedy-match",
            "point": 0.97,
            "bound": 0.955,
            "threshold": 0.9,
            "comparator": ">=",
            "n": 400,
            "passed": True,
        },
        {
            "slice": "numbers",
            "metric": "kl",
            "point": 0.012,
            "bound": 0.019,
            "threshold": 0.05,
            "comparator": "<=",
            "n": 500,
            "passed": True,
        },
    ]
    quality = _check(
        check="quality-slices",
        status="fail",
        severity="deny",
        step=7,
        why="An approximation earns only the envelope it is evaluated on; slices where it enters can fail apart.",
        policy_rule="policies/quantisation.yaml: interventions.quantisation.claims.bounded-degradation.checks[0]",
        message="long-range-retrieval: top1-agreement lower bound 0.912 < 0.95",
        metrics={"slices": 3, "failed": 1},
        # The shape gate's quality-slices writes: envelope records (with the bootstrap judgement and
        # the worst samples) under `envelopes`, per-slice facts under `slices`.
        evidence=SlicesEvidence(
            envelopes=[
                JudgedEnvelope(
                    **{**env, "threshold": str(env["threshold"])},
                    confidence=0.95,
                    min_detectable_effect=0.02,
                    power=0.8,
                    n_required=400,
                    sigma=0.2,
                    reason="bound vs threshold",
                    worst=[{"context_len": 1900, "kl": 0.8, "greedy_match": False}],
                )
                for env in slices
            ],
            slices={
                "long-range-retrieval": {"n": 600, "k": 16, "dependency": "long-range", "fingerprint": "33" * 32},
                "code-closure": {"n": 400, "k": 16, "dependency": "local", "fingerprint": "44" * 32},
            },
            space="tokens",
            datasets={"long-range-retrieval": "33" * 32, "code-closure": "44" * 32},
            samples={},
            timing={"wall_s": 11.9, "samples": 1500},
        ).dump(),
        exercise={"bytes_held": 3145728, "quantised_blocks": 96},
        duration_s=12.0,
    )
    manifest = _manifest(
        "quantisation",
        {"level": "bounded-degradation", "envelopes": envelopes},
        identity=["token-ids", "positions", "kv-dtype"],
    )
    plan = _plan(
        "quantisation",
        "bounded-degradation",
        True,
        "KV state kept at reduced precision.",
        "an approximation: task quality stays inside a stated envelope on each evaluated slice, and only there",
        "Quantised KV is an approximation: it may claim only bounded degradation on named slices.",
    )
    return _result(
        "fail",
        1,
        "failed: quality-slices",
        manifest,
        plan,
        [quality],
        datasets={"long-range-retrieval": "sha256:" + "33" * 32, "code-closure": "sha256:" + "44" * 32},
    )


def window_sweep_run() -> GateResult:
    """A sliding-window bug seen only at long lengths: ~100 swept lengths, the argmax first flips at 2107."""
    lengths = sorted({0, *(round(1.07**k) for k in range(1, 114))} | {2047, 2048, 2049, 2107, 3000, 4096})
    lengths = [n for n in lengths if n <= 2049 or n in (2107, 3000, 4096)]
    deltas = [1e-6 if n < 2107 else 0.4 for n in lengths]
    agree = [n < 2107 for n in lengths]
    sweep = _check(
        check="prefix-sweep",
        status="fail",
        severity="deny",
        step=4,
        why="Each bug class hides at some length: sweep from 0 to 8192 rather than one comfortable length.",
        policy_rule="policies/layout.yaml: interventions.layout.claims.tolerance.checks[1]",
        message="argmax differs at 3 lengths, first at prefix length 2107 (window-edge)",
        params={"atol": 1e-3},
        metrics={"max_abs_delta": 0.4, "argmax_failures": 3},
        evidence=_sweep(lengths, deltas, agree, [], boundaries=(2048, 2049)),
        exercise={"cached_steps": 120},
        duration_s=3.3,
    )
    return _result(
        "fail",
        1,
        "failed: prefix-sweep",
        _manifest("layout", {"level": "tolerance", "atol": 1e-3}),
        _layout_plan(),
        [_mask_oracle(), sweep],
    )


def awaiting_run() -> GateResult:
    """The quantisation change with every envelope held: awaiting approval, with the samples behind a bound."""
    result = slice_run()
    quality = result.checks[0]
    envelopes = [{**e, "passed": True, "point": 0.97, "bound": 0.951} for e in quality.evidence["envelopes"]]
    samples = {
        "long-range-retrieval": [
            {
                "index": 3,
                "kind": "needle",
                "context_len": 1900,
                "flipped": True,
                "first_divergence": 2,
                "kl": 0.8,
                "prompt_tail": "… the code is",
                "answer": "4 1 7",
                "reference": "4 1 7",
                "candidate": "4 1 9",
            },
            {
                "index": 4,
                "kind": "needle",
                "context_len": 640,
                "flipped": False,
                "first_divergence": None,
                "kl": 4.12e-06,
                "prompt_tail": "… the key is",
                "answer": "2 2",
                "reference": "2 2",
                "candidate": "2 2",
            },
        ]
    }
    passed = quality.model_copy(
        update={
            "status": Status.passed,
            "message": "all 3 envelopes held on their one-sided bounds; upper bound of KL 4.12e-06",
            "evidence": {**quality.evidence, "envelopes": envelopes, "samples": samples},
        }
    )
    return result.model_copy(
        update={
            "verdict": Verdict.awaiting_approval,
            "exit_code": 4,
            "summary": "every envelope held; an approximate change waits for a signed approval",
            "checks": [passed],
        }
    )


APPROVAL = {"approver": "alice", "reason": "retrieval envelope reviewed", "approved at": "2025-01-03T00:00:00Z"}


def waived_run() -> GateResult:
    """A pass in which one deny check was waived."""
    result = passing_run()
    failing = failing_parity_run()
    waived = next(c for c in failing.checks if c.check == "invalidation")
    return result.model_copy(
        update={
            "verdict": Verdict.passed_with_waivers,
            "checks": [*result.checks, waived],
            "summary": "all 4 required checks passed (1 waived: invalidation)",
        }
    )


HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def hostile_run() -> GateResult:
    result = failing_parity_run()
    manifest = _manifest(
        "layout",
        {"level": "tolerance", "atol": 1e-3},
        name=f"evil {HOSTILE}",
        description=f"desc {HOSTILE} | `code` *bold* [link](javascript:alert(1))",
    )
    checks = [c.model_copy(update={"message": f"{c.message} {HOSTILE}"}) for c in result.checks]
    checks[1] = checks[1].model_copy(
        update={
            "diagnosis": {**(checks[1].diagnosis or {}), "explanation": HOSTILE},
            "evidence": {**checks[1].evidence, "sweep_plan": {"note": HOSTILE}},
        }
    )
    return result.model_copy(update={"manifest": manifest, "checks": checks, "summary": f"failed {HOSTILE}"})


ALL = {
    "passing": passing_run,
    "failing": failing_parity_run,
    "speculative": speculative_run,
    "slices": slice_run,
    "window": window_sweep_run,
    "awaiting": awaiting_run,
}


GOLD = Path(__file__).parent / "gold"
UPDATE_GOLD = os.environ.get("GATE_UPDATE_GOLD") == "1"


def scrub(text: str) -> str:
    """Replace values that change between machines and runs: digests, times, versions, temp paths."""
    text = re.sub(r"\b[0-9a-f]{64}\b", "<sha256>", text)
    text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?", "<time>", text)
    text = re.sub(r"\b\d+\.\d+\.\d+\b", "<version>", text)
    return re.sub(r"/tmp/[^\s\"'<>]+", "<tmp>", text)


def assert_gold(outputs: dict[str, str]) -> None:
    """Compare each rendered output with tests/report/gold/NAME; GATE_UPDATE_GOLD=1 rewrites them."""
    missing = []
    for name, text in outputs.items():
        path = GOLD / name
        text = scrub(text)
        if UPDATE_GOLD or not path.exists():
            path.parent.mkdir(exist_ok=True)
            path.write_text(text, encoding="utf-8")
            missing += [] if UPDATE_GOLD else [name]
            continue
        assert text == path.read_text(encoding="utf-8"), (
            f"{name} differs from its gold file; rerun with GATE_UPDATE_GOLD=1 after reviewing the change"
        )
    if missing:
        pytest.fail(f"gold files {missing} were missing and have been written; review and commit them")
