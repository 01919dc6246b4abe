"""quant-invariants: a quantised cache keeps what it declares (residual, error bound, configuration),
read back after every prefill, chunk and decode step; each planted bookkeeping bug breaks one invariant."""

from __future__ import annotations

from typing import Any

import pytest

from gate.adapters.reference import Options, ReferenceAdapter
from gate.checks.quant_invariants import QuantInvariantsParams, quant_invariants
from gate.checks.quant_invariants.body import schedule
from gate.core.check import CheckContext
from gate.models.kv_approx import QUANT_FAULTS
from gate.protocols import Capability, capabilities
from tests.support import reference as ref

CLAIM = {
    "level": "bounded-degradation",
    "envelopes": [{"slice": "local-control", "metric": "greedy-match", "comparator": ">=", "threshold": "0.90"}],
}


def _quantized(**quant: Any) -> Any:
    options = Options.model_validate({"max_len": ref.MAX_LEN, "path": "quantized", "quant": quant})
    return ReferenceAdapter().build(options, device="cpu", dtype="float32", seed=0)


def _ctx(candidate: Any, *, control: str | None = None) -> CheckContext:
    context = ref.ctx(ref.path("full"), candidate, claim=CLAIM)
    if control is not None:
        context.control, context.stop_at_first_failure = control, True
    return context


@pytest.mark.parametrize(
    "quant",
    [
        {"bits": 8, "group_size": 32},
        {"bits": 4, "group_size": 16, "residual": 4},
        {"bits": 4, "group_size": 4, "key_axis": "channel", "residual": 3},
    ],
)
def test_a_correct_quantised_cache_holds_every_invariant_on_every_step(quant: dict[str, Any]) -> None:
    path = _quantized(**quant)
    assert Capability.QUANTIZED_KV in capabilities(path)
    outcome = quant_invariants(_ctx(path), QuantInvariantsParams())
    assert outcome.status == "pass", outcome.message
    steps = outcome.evidence["steps"]
    assert len(steps) == len(schedule(QuantInvariantsParams()))
    assert [s["phase"] for s in steps[:4]] == ["prefill", "chunk", "chunk", "chunk"]  # multi-token appends
    assert outcome.metrics["max_full_precision_tokens"] <= outcome.metrics["declared_max_residual"]
    assert 0 < outcome.metrics["max_error_over_bound"] <= 1
    assert outcome.metrics["bytes"] == outcome.metrics["declared_scheme_bytes"]
    if quant.get("residual"):  # the residual was really used and flushed across steps
        assert {s["full_precision_tokens"] for s in steps} != {0}


@pytest.mark.parametrize(
    ("fault", "bug_class"),
    [
        ("quant-residual-overflow", "quant-residual-overflow"),
        ("quant-scale-wrong", "quant-error-bound"),
        ("quant-bits-lower", "quant-error-bound"),
        ("quant-bits-ignored", "quant-config-mismatch"),
    ],
)
@pytest.mark.parametrize(
    "quant",
    [{"bits": 8, "group_size": 32}, {"bits": 8, "group_size": 16, "residual": 4}, {"bits": 4, "group_size": 32}],
)
def test_each_planted_bookkeeping_bug_breaks_exactly_its_own_invariant(
    fault: str, bug_class: str, quant: dict[str, Any]
) -> None:
    path = _quantized(**quant)
    assert fault in path.faults()
    full = quant_invariants(_ctx(path.with_fault(fault)), QuantInvariantsParams())
    assert full.status == "fail" and full.diagnosis is not None, full.message
    assert set(full.metrics["broken"]) == {bug_class}, full.metrics["broken"]  # one invariant, no other
    assert full.diagnosis["bug_class"] == bug_class and full.detected_at == 0
    control = quant_invariants(_ctx(path.with_fault(fault), control=fault), QuantInvariantsParams())
    assert control.status == "fail" and control.exercise["stopped_at_first_failure"] == {"step": 0}


def test_the_residual_overflow_shows_on_decode_steps_after_a_flush() -> None:
    """Flushed two tokens late: the cache keeps residual + 2 tokens unquantised after decode steps too."""
    path = _quantized(bits=8, group_size=16, residual=4).with_fault("quant-residual-overflow")
    outcome = quant_invariants(_ctx(path), QuantInvariantsParams())
    decode = [s for s in outcome.evidence["steps"] if s["phase"] == "decode"]
    assert all(s["full_precision_tokens"] == 6 for s in decode)
    assert all("quant-residual-overflow" in s["broken"] for s in decode)


def test_the_four_faults_are_the_quantised_paths_own() -> None:
    assert set(QUANT_FAULTS) <= set(_quantized(bits=8).faults())
    assert not set(QUANT_FAULTS) & set(ref.path("dynamic").faults())


def test_a_path_whose_quantised_state_cannot_be_read_is_unproven_with_why() -> None:
    outcome = quant_invariants(_ctx(ref.path("dynamic")), QuantInvariantsParams())
    assert outcome.status == "unproven"
    assert "QuantizedKV" in outcome.message and "cannot read back" in outcome.message


HF_QUANT = [
    pytest.param({"backend": "quanto", "nbits": 2, "residual_length": 16, "q_group_size": 16}, id="quanto-2bit"),
    pytest.param({"backend": "hqq", "nbits": 8, "residual_length": 16, "q_group_size": 16}, id="hqq-8bit"),
]


def _hf(**options: Any) -> Any:
    pytest.importorskip("transformers")
    from gate.adapters.hf import HFAdapter
    from gate.adapters.hf.options import Options as HFOptions

    backend = options.get("backend")
    pytest.importorskip({"quanto": "optimum.quanto", "hqq": "hqq"}.get(str(backend), "transformers"))
    return HFAdapter().build(HFOptions(model="llama", **options), device="cpu", dtype="float32", seed=0)


@pytest.mark.parametrize("options", HF_QUANT)
def test_transformers_quantized_cache_is_read_back_and_each_planted_fault_breaks_its_invariant(
    options: dict[str, Any],
) -> None:
    """QuantizedCache read after every call: a flush at residual_length keeps at most residual_length - 1
    tokens unquantised; the faults are planted into its QuantizedLayer objects from outside."""
    path = _hf(path="quantized", **options)
    assert Capability.QUANTIZED_KV in capabilities(path)
    clean = quant_invariants(_ctx(path), QuantInvariantsParams())
    assert clean.status == "pass", clean.message
    assert clean.metrics["max_full_precision_tokens"] == 15 == clean.metrics["declared_max_residual"]
    assert clean.metrics["bytes"] == clean.metrics["declared_scheme_bytes"]
    steps = clean.evidence["steps"]
    assert {s["full_precision_tokens"] for s in steps} > {0, 15}  # the residual filled and was flushed
    for fault, bug_class in [
        ("quant-residual-overflow", "quant-residual-overflow"),
        ("quant-scale-wrong", "quant-error-bound"),
        ("quant-bits-ignored", "quant-config-mismatch"),
    ]:
        caught = quant_invariants(_ctx(path.with_fault(fault)), QuantInvariantsParams())
        assert caught.status == "fail" and set(caught.metrics["broken"]) == {bug_class}, (fault, caught.message)


def test_hqq_re_quantising_its_history_drifts_from_what_was_written_reported_not_judged() -> None:
    """hqq groups along axis 0 of the whole flattened tensor, so each flush regroups the dequantised
    history: the scheme's bound holds per flush, not against the tokens as written."""
    path = _hf(path="quantized", backend="hqq", nbits=8, residual_length=16, q_group_size=16)
    outcome = quant_invariants(_ctx(path), QuantInvariantsParams())
    assert outcome.status == "pass" and outcome.metrics["max_error_over_bound"] <= 1
    assert outcome.metrics["max_error_vs_written_over_bound"] > 1.5, outcome.metrics
    assert "reported, not judged" in outcome.message


def test_an_unreadable_transformers_cache_is_unproven() -> None:
    """The fp8 backend or beams: no QuantizedKV, so the check names why it could not judge."""
    path = _hf(path="dynamic")
    assert Capability.QUANTIZED_KV not in capabilities(path)
    assert quant_invariants(_ctx(path), QuantInvariantsParams()).status == "unproven"


@pytest.mark.parametrize(
    "name", ["reference-quant-int8", "reference-quant-int4", "hf-quantized-hqq", "hf-quantized-2bit"]
)
def test_quantised_examples_plan_quant_invariants_with_its_four_controls(name: str) -> None:
    import json

    from click.testing import CliRunner

    from gate.cli.main import cli
    from tests.support.repo import EXAMPLES

    out = CliRunner().invoke(cli, ["plan", str(EXAMPLES / f"{name}.yaml"), "--format", "json"])
    assert out.exit_code == 0, out.output
    checks = {c["check"]: c for c in json.loads(out.output)["checks"]}
    rule = checks["quant-invariants"]
    assert [c["fault"] for c in rule["controls"]] == [
        "quant-residual-overflow",
        "quant-scale-wrong",
        "quant-bits-lower",
        "quant-bits-ignored",
    ]
    assert rule["severity"] == "deny" and rule["unproven"] == "warn"


def test_transformers_pre_5_20_flush_rule_replayed_overflows_on_multi_token_appends_only() -> None:
    """transformers 4.46-5.19 flushed a QuantizedLayer's residual on `keys.shape[-2] + 1 >= residual_length`,
    counting one token per append; 5.20 counts the whole append (`residual + n >= residual_length`). Raising
    residual_length by n - 1 around each update of an n-token append replays the old rule on the installed
    layer: a 17-token chunk leaves 25 tokens in full precision (declared at most 15), which decode steps of
    one token alone never show (the release diff and the replay: docs/real-bugs.md)."""
    path = _hf(path="quantized", backend="quanto", nbits=2, residual_length=16, q_group_size=16)
    make = path.make_cache

    def old_rule(batch_size: int) -> Any:
        cache = make(batch_size)
        for layer in cache.layers:

            def update(k: Any, v: Any, *args: Any, _layer: Any = layer, _update: Any = layer.update, **kw: Any) -> Any:
                extra = int(k.shape[-2]) - 1
                _layer.residual_length += extra
                try:
                    return _update(k, v, *args, **kw)
                finally:
                    _layer.residual_length -= extra

            layer.update = update
        return cache

    path.make_cache = old_rule
    chunked = quant_invariants(_ctx(path), QuantInvariantsParams())
    assert chunked.status == "fail" and set(chunked.metrics["broken"]) == {"quant-residual-overflow"}
    assert chunked.detected_at == 3 and chunked.metrics["max_full_precision_tokens"] == 25, chunked.message
    decode_only = quant_invariants(_ctx(path), QuantInvariantsParams(chunks=[], decode=40))
    assert decode_only.status == "pass", decode_only.message
