"""quality-slices and phase-performance on reference-decoder paths (exact, faulty, approximate)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from gate.adapters.reference import Options, ReferenceAdapter
from gate.checks.phase_performance import PhasePerformanceParams, phase_performance
from gate.checks.quality_slices import QualitySlicesParams, quality_slices
from gate.core.check import CheckContext
from gate.core.manifest import Manifest
from gate.models.trained import WEIGHTS_DIR

torch.set_num_threads(1)


def path(**options: Any) -> Any:
    return ReferenceAdapter().build(Options.model_validate(options), device="cpu", dtype="float32", seed=0)


def context(reference: Any, candidate: Any, envelopes: list[dict[str, Any]]) -> CheckContext:
    manifest = Manifest.model_validate(
        {
            "apiVersion": "gate/v1",
            "name": "t",
            "intervention": "quantisation",
            "claim": {"level": "bounded-degradation", "envelopes": envelopes},
            "subject": {"reference": {"adapter": "reference"}, "candidate": {"adapter": "reference"}},
        }
    )
    return CheckContext(
        manifest=manifest, reference=reference, candidate=candidate, seed=0, device="cpu", dtype="float32"
    )


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATE_CACHE_DIR", str(tmp_path))


RANDOM = {"max_len": 320}
ENVELOPES = [
    {
        "slice": "long-range-retrieval",
        "metric": "greedy-match",
        "comparator": ">=",
        "threshold": "0.8",
        "min-detectable-effect": 0.4,
    },
    {"slice": "local-control", "metric": "kl", "comparator": "<=", "threshold": "0.01", "min-detectable-effect": 0.4},
]


def test_exact_cache_passes_with_bounds_worst_samples_and_fingerprints() -> None:
    ctx = context(path(path="full", **RANDOM), path(path="chunked", chunk_size=32, **RANDOM), ENVELOPES)
    out = quality_slices(ctx, QualitySlicesParams(samples=16))
    assert out.status == "pass", out.message
    assert out.exercise["cached_steps"] > 0 and out.exercise["samples_scored"] == 32
    envelope = out.evidence["envelopes"][0]
    assert {
        "slice",
        "metric",
        "point",
        "bound",
        "threshold",
        "comparator",
        "n",
        "n_required",
        "passed",
        "worst",
    } <= set(envelope)
    assert envelope["point"] == 1.0 and envelope["bound"] < 1.0 and envelope["n"] == 16
    assert len(envelope["worst"]) == 3 and "prompt_tail" in envelope["worst"][0]
    assert set(out.evidence["datasets"]) == {"long-range-retrieval", "local-control"}
    assert all(fp.startswith("sha256:") for fp in out.evidence["datasets"].values())
    assert out.observation is not None and out.observation.shape == (32,)


def test_faulty_candidate_fails_and_says_where() -> None:
    ctx = context(path(path="full", **RANDOM), path(path="dynamic", fault="off-by-one-pos", **RANDOM), ENVELOPES)
    out = quality_slices(ctx, QualitySlicesParams(samples=16))
    assert out.status == "fail"
    assert out.detected_at is not None and out.diagnosis is not None
    worst = out.evidence["envelopes"][0]["worst"][0]
    assert worst["greedy_match"] is False and worst["first_divergence"] is not None


GREEDY = [ENVELOPES[0]]


def test_a_lost_rate_envelope_stops_scoring_with_the_verdict_it_would_have_had() -> None:
    """Deterministic curtailment: once no unscored sample could lift the bound over the threshold,
    the slice stops; the verdict is the whole slice's, and the evidence says where it stopped."""
    reference, faulty = path(path="full", **RANDOM), path(path="dynamic", fault="off-by-one-pos", **RANDOM)
    cut = quality_slices(context(reference, faulty, GREEDY), QualitySlicesParams(samples=64))
    whole = quality_slices(context(reference, faulty, GREEDY), QualitySlicesParams(samples=64, curtail=False))
    assert cut.status == whole.status == "fail"
    short, full = cut.evidence["envelopes"][0], whole.evidence["envelopes"][0]
    assert short["planned"] == 64 and short["n"] < 64 and full.get("planned") is None and full["n"] == 64
    assert short["bound"] < float(short["threshold"]) and "settled after" in short["reason"]
    assert cut.exercise["samples_scored"] == short["n"] == cut.evidence["slices"]["long-range-retrieval"]["n"]
    assert cut.diagnosis is not None and cut.diagnosis["bug_class"] != "underpowered"
    # the rows kept are the ones scored: every kept sample's worst-case entry names a scored prompt
    assert len(cut.evidence["samples"]["long-range-retrieval"]) == short["n"]


def test_a_held_or_mean_envelope_is_scored_whole() -> None:
    exact = quality_slices(
        context(path(path="full", **RANDOM), path(path="chunked", chunk_size=32, **RANDOM), GREEDY),
        QualitySlicesParams(samples=32),
    )
    assert exact.status == "pass" and exact.evidence["envelopes"][0]["n"] == 32
    assert exact.evidence["envelopes"][0].get("planned") is None
    faulty = path(path="dynamic", fault="off-by-one-pos", **RANDOM)
    top1 = {**ENVELOPES[0], "metric": "top1-agreement", "threshold": "0.5"}  # a mean beside the rate
    mixed = quality_slices(
        context(path(path="full", **RANDOM), faulty, [ENVELOPES[0], top1]), QualitySlicesParams(samples=32)
    )
    assert mixed.status == "fail" and [e["n"] for e in mixed.evidence["envelopes"]] == [32, 32]
    small = [{**ENVELOPES[0], "min-detectable-effect": 0.1}]  # 155 needed: 32 fail as underpowered, whole
    under = quality_slices(context(path(path="full", **RANDOM), faulty, small), QualitySlicesParams(samples=32))
    assert under.evidence["envelopes"][0]["n"] == 32 and under.diagnosis is not None
    assert under.diagnosis["bug_class"] == "underpowered"


def test_too_few_samples_cannot_pass() -> None:
    envelopes = [{**ENVELOPES[0], "min-detectable-effect": 0.05}]
    ctx = context(path(path="full", **RANDOM), path(path="dynamic", **RANDOM), envelopes)
    out = quality_slices(ctx, QualitySlicesParams(samples=16))
    assert out.status == "fail" and "greedy-match" in out.message
    entry = out.evidence["envelopes"][0]
    assert entry["point"] == 1.0 and entry["n_required"] == 619 and not entry["passed"]
    assert out.diagnosis is not None and out.diagnosis["bug_class"] == "underpowered"


def test_unknown_metric_is_refused() -> None:
    ctx = context(path(path="full", **RANDOM), path(path="dynamic", **RANDOM), [{**ENVELOPES[0], "metric": "bleu"}])
    with pytest.raises(ValueError, match="unknown metric"):
        quality_slices(ctx, QualitySlicesParams(samples=4))


class ByteTokenizer:
    """A byte-level tokenizer for the 256-token tiny preset: text space without the hub."""

    name_or_path = "bytes"
    bos_token_id = None

    def get_vocab(self) -> dict[str, int]:
        return {f"<{i}>": i for i in range(256)}

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": list(text.encode())}

    def decode(self, ids: list[int]) -> str:
        return bytes(ids).decode(errors="replace")


def test_text_space_when_the_path_has_a_tokenizer() -> None:
    ref, cand = path(path="full", **RANDOM), path(path="quantized", quant={"bits": 8}, **RANDOM)
    ref.tokenizer = ByteTokenizer()
    envelopes = [
        {
            "slice": "local-control",
            "metric": "top1-agreement",
            "comparator": ">=",
            "threshold": "0.5",
            "min-detectable-effect": 0.4,
        }
    ]
    out = quality_slices(context(ref, cand, envelopes), QualitySlicesParams(samples=6, min_samples=4))
    assert out.evidence["space"] == "text"
    worst = out.evidence["envelopes"][0]["worst"][0]
    assert worst["prompt_tail"].endswith(" is")  # the last 16 bytes of "... The colour of the X is"
    assert worst["answer"].endswith(".") and out.evidence["slices"]["local-control"]["n"] == 6


needs_weights = pytest.mark.skipif(
    not (WEIGHTS_DIR / "copy-model.safetensors").is_file(), reason="copy-model weights not built"
)


@needs_weights
def test_trained_model_window_forgets_long_range_but_keeps_local() -> None:
    """The forgetful stenographer: a 32-token window fails retrieval, passes the local control."""
    envelopes = [
        {
            "slice": "long-range-retrieval",
            "metric": "greedy-match",
            "comparator": ">=",
            "threshold": "0.8",
            "min-detectable-effect": 0.4,
        },
        {
            "slice": "local-control",
            "metric": "greedy-match",
            "comparator": ">=",
            "threshold": "0.5",
            "min-detectable-effect": 0.4,
        },
    ]
    ref = path(weights="copy-model", path="dynamic")
    cand = path(weights="copy-model", path="evicting", evict={"window": 32, "sink": 4})
    out = quality_slices(context(ref, cand, envelopes), QualitySlicesParams(samples=16))
    by_slice = {e["slice"]: e for e in out.evidence["envelopes"]}
    assert not by_slice["long-range-retrieval"]["passed"]
    assert by_slice["local-control"]["passed"], by_slice["local-control"]["reason"]
    assert out.exercise["evicted_tokens"] > 0 and out.exercise["kept_tokens"] <= 36
    assert out.diagnosis is not None and out.diagnosis["bug_class"] == "lost-long-range-context"


@needs_weights
def test_as_a_control_it_stops_after_the_first_slice_that_breaks_an_envelope() -> None:
    from dataclasses import replace

    ref = path(weights="copy-model", path="dynamic")
    cand = path(weights="copy-model", path="evicting", evict={"window": 32, "sink": 4})
    ctx = replace(context(ref, cand, ENVELOPES), stop_at_first_failure=True)
    out = quality_slices(ctx, QualitySlicesParams(samples=16))
    assert out.status == "fail"
    assert [e["slice"] for e in out.evidence["envelopes"]] == ["long-range-retrieval"]  # local-control never scored
    assert set(out.evidence["datasets"]) == {"long-range-retrieval"}


def test_phase_performance_reports_the_int4_saving_against_theory() -> None:
    ctx = context(path(path="dynamic", **RANDOM), path(path="quantized", quant={"bits": 4}, **RANDOM), ENVELOPES)
    params = PhasePerformanceParams(conversations=3, repeats=3, resamples=200, show_savings=True)
    out = phase_performance(ctx, params)
    assert out.metrics["live_bytes_ratio"] < 0.35  # int4 codes + fp16 group scales vs float32
    assert out.evidence["kv_theory"]["candidate"]["live_over_theory"] < 0.3
    assert out.exercise["kv_bits"] == 4
    assert out.status in ("pass", "warn")  # warn only for a confident slowdown of a time clock


def test_slices_run_requests_through_a_reused_session_so_a_reset_that_keeps_codes_is_seen() -> None:
    """The quantised cache's reset keeps its codes and position (reset-keeps-position planted on the
    quantised store): with fresh sessions per request the slices could never see it; through the
    reused sessions every request after the first reads the previous request's codes."""
    envelopes = [ENVELOPES[1]]
    full, quant = path(path="full", **RANDOM), path(path="quantized", **RANDOM)
    clean = quality_slices(context(full, quant, envelopes), QualitySlicesParams(samples=16))
    assert clean.status == "pass", clean.message
    assert clean.exercise["reused_session_requests"] > 0 and clean.exercise["fresh_session_requests"] >= 1
    leaky = quality_slices(
        context(full, quant.with_fault("reset-keeps-position"), envelopes), QualitySlicesParams(samples=16)
    )
    assert leaky.status == "fail", leaky.message
    assert leaky.exercise["reused_session_requests"] == clean.exercise["reused_session_requests"]
