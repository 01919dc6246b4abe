"""hf negative controls: each fault changes the computation, and an inert one is seen as inert."""

from __future__ import annotations

import pytest
import torch

from gate.adapters.hf import compat
from gate.core.check import CheckContext, CheckSpec, Outcome, Params
from gate.core.policy import ControlSpec
from gate.core.result import ControlOutcome
from gate.engine.controls import run_control
from gate.errors import UnknownFault
from tests.adapters.hf.subjects import path, run, tokens

PREFIX = 40
LIVE = [
    "off-by-one-pos",
    "missing-start-pos",
    "truncated-last-block",
    "cross-request-handle",
    "stale-weights",
    "mask-origin-reset",
]


@pytest.mark.parametrize("kind", ["dynamic", "static", "prefix-reuse"])
@pytest.mark.parametrize("fault", LIVE)
def test_fault_changes_the_appended_logits(kind: str, fault: str) -> None:
    clean = path("llama", path=kind)
    toks = tokens()
    good = run(clean.new_session(2), toks, PREFIX)
    bad = run(clean.with_fault(fault).new_session(2), toks, PREFIX)
    assert (bad - good).abs().max().item() > 0.5
    assert torch.equal(clean.with_fault(fault).full_logits(toks), clean.full_logits(toks))  # full pass untouched


def test_stale_weights_restores_the_weights_after_the_prefill() -> None:
    clean = path("llama", path="dynamic")
    before = {k: v.clone() for k, v in clean.model.state_dict().items()}
    run(clean.with_fault("stale-weights").new_session(2), tokens(), PREFIX)
    assert all(torch.equal(before[k], v) for k, v in clean.model.state_dict().items())


def test_reset_keeps_position_shows_where_positions_are_absolute() -> None:
    toks, other = tokens(), tokens(seed=5)
    # before 5.4 the stale counter also reaches the mask through cache_position (future tokens leak)
    mask_follows_positions = compat.cache_api(path("llama").model).takes_cache_position
    for model, visible in (("gpt2", True), ("llama", mask_follows_positions)):
        clean, faulty = path(model, path="dynamic"), path(model, path="dynamic").with_fault("reset-keeps-position")
        outs = []
        for candidate in (clean, faulty):
            session = candidate.new_session(2)
            run(session, other, 30)
            session.reset()
            outs.append(run(session, toks, PREFIX))
        delta = (outs[0] - outs[1]).abs().max().item()
        # GPT-2's learned positions see the shift; under RoPE a uniform shift is (nearly) invisible
        assert (delta > 0.5) if visible else (delta < 1e-2), (model, delta)


def test_unknown_and_unsupported_faults_are_refused() -> None:
    with pytest.raises(UnknownFault):
        path("llama", path="dynamic").with_fault("flip-bits")
    assert "truncated-last-block" not in path("llama", path="sliding-window", window=16).faults()
    assert path("llama").faults() == ()


class _Params(Params):
    pass


def _appended_logits_check(ctx: CheckContext, _params: _Params) -> Outcome:
    """A minimal parity check: the appended token's logits against the reference's full pass."""
    toks = tokens()
    got = run(ctx.candidate.new_session(2), toks, PREFIX)
    want = ctx.reference.full_logits(toks)[:, PREFIX : PREFIX + 11]
    ok = torch.equal(got.argmax(-1), want.argmax(-1))
    return Outcome("pass" if ok else "fail", "", exercise={"cache_len": PREFIX}, observation=got)


def test_wrong_cache_position_is_inert_from_5_4_and_reported_unobservable() -> None:
    spec = CheckSpec("appended-logits", _Params, _appended_logits_check)
    for kind in ("dynamic", "static"):
        candidate = path("llama", path=kind)
        ctx = CheckContext(
            manifest=None,
            reference=path("llama"),
            candidate=candidate,
            seed=0,  # type: ignore[arg-type]
            device="cpu",
            dtype="float32",
        )
        clean = spec(ctx, _Params())
        result = run_control(spec, ctx, _Params(), clean, ControlSpec(fault="wrong-cache-position"))
        live = compat.cache_api(candidate.model).takes_cache_position
        if live:  # before 5.4 cache_position sets the mask (and a static cache's write slot)
            assert result.outcome == ControlOutcome.detected
        else:  # 5.4+: forward swallows cache_position; a control that counted this would lie
            assert result.outcome == ControlOutcome.unobservable and result.output_difference == 0.0


def test_a_live_control_is_counted_as_detected() -> None:
    spec = CheckSpec("appended-logits", _Params, _appended_logits_check)
    ctx = CheckContext(
        manifest=None,
        reference=path("llama"),
        candidate=path("llama", path="dynamic"),  # type: ignore[arg-type]
        seed=0,
        device="cpu",
        dtype="float32",
    )
    clean = spec(ctx, _Params())
    assert clean.status == "pass"
    result = run_control(spec, ctx, _Params(), clean, ControlSpec(fault="off-by-one-pos"))
    assert result.outcome == ControlOutcome.detected and (result.output_difference or 0) > 0.5


def test_window_and_tail_faults_show_past_the_window_and_on_a_preallocated_buffer() -> None:
    toks = tokens(length=300)
    for kind in ("dynamic", "static"):
        clean = path("llama", path=kind)
        good = run(clean.new_session(2), toks, 200)
        windowed = run(clean.with_fault("sliding-window-mask").new_session(2), toks, 200)
        assert (windowed - good).abs().max().item() > 0.5  # window = 512 // 4 = 128 < 200
    poisoned = run(path("llama", path="static").with_fault("poisoned-tail-read").new_session(2), toks, 200)
    assert bool(poisoned.isnan().any())
    assert "poisoned-tail-read" not in path("llama", path="dynamic").faults()


def test_reset_keeps_position_in_generates_own_static_cache() -> None:
    toks, other = tokens(), tokens(seed=5)
    outs = []
    for fault in (None, "reset-keeps-position"):
        candidate = path("llama", path="generate-static")
        session = (candidate.with_fault(fault) if fault else candidate).new_session(2)
        run(session, other, 30)
        session.reset()
        outs.append(run(session, toks, PREFIX))
    fresh = run(path("llama", path="generate-static").new_session(2), toks, PREFIX)
    assert torch.equal(outs[0], fresh)
    if compat.cache_api(path("llama").model).static_crop:  # a counter to keep exists from 5.15
        assert (outs[1] - fresh).abs().max().item() > 0.5


def _reset_ctx(candidate: object) -> CheckContext:
    from tests.support.reference import manifest

    return CheckContext(
        manifest=manifest(),
        reference=path("llama", path="full"),
        candidate=candidate,  # type: ignore[arg-type]
        seed=0,
        device="cpu",
        dtype="float32",
    )


def test_reset_keeps_position_is_declared_invisible_from_what_the_path_feeds() -> None:
    """On every release: declared only where the session's count reaches a rotary model as
    position_ids alone (5.4+); where forward also takes it as cache_position (5.2-5.3) the fault is
    live and nothing is declared; GPT-2's absolute positions make it live everywhere."""
    llama = path("llama", path="dynamic")
    feeds = compat.position_inputs(llama.model)
    assert feeds == (
        ("position_ids", "cache_position") if compat.cache_api(llama.model).takes_cache_position else ("position_ids",)
    )
    assert llama.position_feeds() == feeds
    assert ("reset-keeps-position" in llama.invisible_faults()) == (feeds == ("position_ids",))
    assert path("gpt2", path="dynamic").invisible_faults() == {}


def dynamic_reset_keeps_length() -> bool:
    """Whether the installed DynamicCache.reset() keeps the length it had (the shipped bug up to 5.17)."""
    cache = compat.cache_utils.DynamicCache()
    cache.update(torch.ones(1, 1, 2, 1), torch.ones(1, 1, 2, 1), 0)
    cache.reset()
    return compat.seq_length(cache) > 0


@pytest.mark.skipif(
    "cache_position" in compat.position_inputs(path("llama", path="dynamic").model) or dynamic_reset_keeps_length(),
    reason="this release's forward takes cache_position (the kept count moves the mask: the fault is live), "
    "or its DynamicCache.reset() keeps the length (the clean path fails reset-isolation: a real bug)",
)
def test_a_uniform_position_shift_under_rope_is_declared_invisible_and_a_generic_reset_shows_power() -> None:
    """reset-keeps-position on Llama shifts the next request's positions uniformly: under RoPE that
    changes the logits by rounding only. The path says so up front; the control engine plants the
    generic reset-ignored instead, which reset-isolation detects far beyond rounding. GPT-2's
    absolute positions make the adapter's own fault visible, so it runs there."""
    from gate.checks.reset_isolation import ResetIsolationParams, reset_isolation

    llama = path("llama", path="dynamic")
    assert "relative positions" in llama.invisible_faults()["reset-keeps-position"]
    assert path("gpt2", path="dynamic").invisible_faults() == {}
    clean = reset_isolation(_reset_ctx(llama), ResetIsolationParams())
    assert clean.status == "pass" and clean.rounding_spread is not None
    # the adapter's own fault fails the bit-exact comparison only through rounding noise
    noisy = reset_isolation(_reset_ctx(llama.with_fault("reset-keeps-position")), ResetIsolationParams())
    assert noisy.metrics["max_abs_delta"] <= clean.rounding_spread
    control = run_control(
        reset_isolation, _reset_ctx(llama), ResetIsolationParams(), clean, ControlSpec(fault="reset-keeps-position")
    )
    assert (control.kind, control.applied, control.outcome) == ("generic", "reset-ignored", ControlOutcome.detected)
    assert control.output_difference is not None and control.output_difference > 100 * clean.rounding_spread
    assert control.message.startswith("its own reset-keeps-position is invisible here")


def test_stale_generate_cache_is_offered_only_where_generate_keeps_a_cache() -> None:
    # elsewhere it planted nothing: a control that changed nothing and cost a whole check's walk
    for kind in ("dynamic", "static"):
        assert "stale-generate-cache" not in path("llama", path=kind).faults()
        assert "stale-generate-cache" not in path("llama", path=kind, beams=4).faults()
