"""What a recorded baseline cannot answer, its live reference does (gate.protocols.LiveCounterpart):
phase-performance times the model the baseline names side by side with the candidate (a planted
slowdown still fails its budget), and a failed check's diagnosis traces its layers against it, so the
replay names the same bug class as the live reference. Without one, the check is unproven and the
diagnosis says what it could not see."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.planted import SlowPath
from gate.adapters.recorded.store import BaselineStore, StoredPath, new_header
from gate.checks.greedy_parity import GreedyParityParams, greedy_parity
from gate.checks.phase_performance import PhasePerformanceParams, phase_performance
from gate.checks.prefix_sweep import PrefixSweepParams, prefix_sweep
from gate.core.manifest import Budget
from gate.errors import AdapterUnavailable
from gate.protocols import LiveCounterpart
from tests.support.reference import MAX_LEN, ctx, path

QUICK = PhasePerformanceParams(conversations=3, repeats=3, resamples=200)
SWEEP = PrefixSweepParams(longest=MAX_LEN - 1, log_spaced=8, compare="cached")
GREEDY = GreedyParityParams()


def recorded(tmp: Path, *, live_reference: bool = True, **build: Any) -> StoredPath:
    """A baseline of the dynamic path recorded by running the checks once against a correct candidate,
    then replayed with no live path behind the store (the `recorded` adapter)."""
    live = path("dynamic")
    store = BaselineStore(tmp / "baseline", new_header(live, "reference", {"path": "dynamic"}, "test"), dirty=True)
    recording = StoredPath(store, live, mode="recording")
    assert prefix_sweep(ctx(recording, path("static")), SWEEP).status == "pass"
    assert greedy_parity(ctx(recording, path("static")), GREEDY).status == "pass"
    store.save()
    replay = BaselineStore.open(tmp / "baseline")
    return StoredPath(replay, None, counterpart=(lambda: path("dynamic", **build)) if live_reference else None)


def test_a_replayed_baseline_is_timed_live_and_a_planted_slowdown_fails_its_budget(tmp_path: Path) -> None:
    stored = recorded(tmp_path)
    assert isinstance(stored, LiveCounterpart) and stored.mode == "recorded baseline"
    budgeted = ctx(stored, SlowPath(path("static"), sleep_s=0.025))
    budgeted.manifest = budgeted.manifest.model_copy(update={"performance": {"tpot_p95": Budget(max_ratio=1.05)}})
    out = phase_performance(budgeted, QUICK)
    assert out.status == "fail", out.message
    assert "over budget: tpot_p95 x" in out.message and "timed live as reference:dynamic" in out.message
    assert out.evidence["paths"]["reference"] == "reference:dynamic" and out.exercise["planted_steps"] > 0
    correct = phase_performance(ctx(stored, path("static")), QUICK)
    assert correct.status in ("pass", "warn"), correct.message  # no budget: noise can only warn
    assert stored.store.misses == 0  # timing asked the store nothing


def test_without_a_live_reference_performance_is_skipped_saying_why(tmp_path: Path) -> None:
    off = phase_performance(ctx(recorded(tmp_path, live_reference=False), path("static")), QUICK)
    assert off.status == "skip" and "live_reference: false" in off.message and "no clock" in off.message


def test_a_live_reference_of_another_model_is_refused(tmp_path: Path) -> None:
    stored = recorded(tmp_path, seed=1)  # other seeded weights than the recording's
    try:
        stored.live_reference()
    except AdapterUnavailable as err:
        assert "not the model" in str(err) and "weights_sha256" in str(err)
    else:
        raise AssertionError("a live reference of other weights was accepted")
    out = phase_performance(ctx(stored, path("static")), QUICK)
    assert out.status == "skip" and "not the model" in out.message


def test_the_replay_names_the_live_reference_s_bug_class(tmp_path: Path) -> None:
    stored = recorded(tmp_path)
    bug = path("static", fault="missing-start-pos")
    for check, params in ((prefix_sweep, SWEEP), (greedy_parity, GREEDY)):
        live = check(ctx(path("dynamic"), bug), params)  # type: ignore[operator]
        replay = check(ctx(stored, bug), params)  # type: ignore[operator]
        assert live.status == replay.status == "fail"
        assert live.diagnosis and replay.diagnosis
        assert live.diagnosis["bug_class"] == replay.diagnosis["bug_class"] == "positional-index", check
        assert live.diagnosis.get("first_diverging_layer") == replay.diagnosis.get("first_diverging_layer")
        assert "traced against reference:dynamic" in replay.diagnosis["layer_trace"]
        assert "layer_trace" not in live.diagnosis
    assert stored.store.misses == 0  # every logit the verdict compared came from the store


def test_without_a_live_reference_the_diagnosis_says_what_it_could_not_see(tmp_path: Path) -> None:
    stored = recorded(tmp_path, live_reference=False)
    out = prefix_sweep(ctx(stored, path("static", fault="missing-start-pos")), SWEEP)
    assert out.status == "fail" and out.diagnosis
    assert out.diagnosis["layer_trace"].startswith("not seen: the per-layer trace")
    assert "the class rests on the failure profile alone" in out.diagnosis["layer_trace"]
    assert "first_diverging_layer" not in out.diagnosis
