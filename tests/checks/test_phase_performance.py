"""phase-performance: the serving scenario, the four clocks, their intervals and budgets that can deny.

Timing here is never asserted against a speed target (that lives in benchmarks/perf_gate.md). The
planted slowdown (a 25 ms sleep on every step) is judged on a virtual clock (`virtual_clock`): the
check's timer reads it, every step costs one tick on it and the planted sleep moves it by its
length without sleeping, so the verdicts do not depend on how loaded the machine is.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

import benchmarks.planted
import gate.checks._serving
from benchmarks.planted import SlowPath
from gate.checks._engine import PREFIX_BLOCKS
from gate.checks.phase_performance import PhasePerformanceParams, phase_performance
from gate.checks.phase_performance.body import _verdict, shared_prefix_on
from gate.core.clocks import METRICS, Interval, LiveBytes, RequestTiming, ServingTrace, compare, summary
from gate.core.manifest import Budget, ClockName, Manifest
from gate.core.scenario import conversations, load_scenario, shipped_scenarios
from gate.errors import InputError
from tests.support.reference import ctx, path

QUICK = PhasePerformanceParams(conversations=3, repeats=3, resamples=200)


def test_shipped_scenarios_load_and_replay_the_same_requests_for_a_seed() -> None:
    assert {"chat-shared-prefix", "assistant-24"} <= set(shipped_scenarios())
    scenario = load_scenario("chat-shared-prefix")
    first = conversations(scenario, seed=3, vocab=256, max_len=256)
    assert first == conversations(scenario, seed=3, vocab=256, max_len=256)
    assert first != conversations(scenario, seed=4, vocab=256, max_len=256)
    assert len(first) == scenario.conversations
    assert all(c.system == first[0].system and len(c.system) == scenario.system_prefix for c in first)
    assert len({tuple(c.turns[0].prompt) for c in first}) > 1  # private turns differ
    assert [c.start_s for c in first] == sorted(c.start_s for c in first)
    for conv in first:
        assert conv.tokens <= 256
        for turn in conv.turns:
            assert scenario.output_tokens.min <= turn.output_tokens <= scenario.output_tokens.max


def test_a_long_scenario_is_cut_to_the_paths_max_len() -> None:
    scenario = load_scenario("assistant-24")
    convs = conversations(scenario, seed=0, vocab=256, max_len=600)
    assert all(c.tokens <= 600 and c.turns for c in convs)


def test_a_bad_scenario_names_file_line_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: gate/scenario/v1\nname: bad\nconversations: 2\nsystem_prefix: 4\n"
        "turns: {min: 1, max: 1}\nprompt_tokens: {min: 9, max: 3}\noutput_tokens: {min: 1, max: 2}\n"
        "slo: {ttft_s: 1, tpot_s: 1}\n"
    )
    with pytest.raises(InputError) as err:
        load_scenario(str(bad))
    assert "bad.yaml" in str(err.value) and "prompt_tokens" in str(err.value) and ":6" in str(err.value)


def trace(scale: float, path: str = "p") -> ServingTrace:
    """Two requests: arrivals 0 and 1; first tokens 0.5 and 1.2 after; then 0.1 s per token (x scale)."""
    reqs = [
        RequestTiming(conversation=0, turn=0, arrival_s=0.0, prompt_tokens=8, token_s=[0.5 * scale, 0.6 * scale]),
        RequestTiming(
            conversation=1, turn=0, arrival_s=1.0, prompt_tokens=8, token_s=[1 + 1.2 * scale, 1 + 1.3 * scale]
        ),
    ]
    memory = [LiveBytes(t_s=0.0, live_bytes=100, tokens=10), LiveBytes(t_s=1.0, live_bytes=300, tokens=30)]
    return ServingTrace(path=path, clock="perf_counter", requests=reqs, memory=memory, makespan_s=2.0)


def test_clocks_from_a_hand_computed_trace() -> None:
    clocks = summary([trace(1.0)], slo=(1.0, 0.2))
    assert clocks["ttft_p50"] == pytest.approx(0.85)
    assert clocks["tpot_p50"] == pytest.approx(0.1)
    assert clocks["itl_p99"] == pytest.approx(0.1)
    assert clocks["throughput"] == pytest.approx(4 / 2.0)
    assert clocks["goodput_share"] == pytest.approx(0.5)  # the second request's 1.2 s TTFT misses 1.0
    assert clocks["goodput"] == pytest.approx(1 / 2.0)
    assert clocks["live_bytes"] == 300
    assert clocks["live_bytes_mean"] == pytest.approx(200.0)
    assert clocks["peak_memory"] is None


def test_identical_traces_give_a_ratio_of_one_and_a_doubled_path_two() -> None:
    same = compare([trace(1.0)] * 3, [trace(1.0)] * 3, "tpot_p95", slo=(1, 1), resamples=300)
    assert same is not None and (same.point, same.low, same.high) == (1.0, 1.0, 1.0)
    doubled = compare([trace(1.0)] * 3, [trace(2.0)] * 3, "ttft_p50", slo=(1, 1), resamples=300)
    assert doubled is not None and doubled.point == pytest.approx(2.0)
    assert compare([trace(1.0)], [trace(1.0)], "peak_memory", slo=(1, 1)) is None  # not reported on CPU


def test_every_clock_can_be_budgeted_in_a_manifest() -> None:
    assert set(ClockName.__args__) == set(METRICS)  # type: ignore[attr-defined]
    with pytest.raises(ValidationError):
        Budget()
    base = ctx(path("dynamic"), path("dynamic")).manifest.model_dump(by_alias=True, mode="json")
    with pytest.raises(ValidationError):
        Manifest.model_validate({**base, "performance": {"tpot_p96": {"max_ratio": 1.05}}})
    good = Manifest.model_validate({**base, "performance": {"tpot_p95": {"max_ratio": 1.05}}})
    assert good.performance["tpot_p95"].max_ratio == 1.05


@pytest.mark.parametrize(
    ("low", "high", "budget", "show", "expected"),
    [
        (1.2, 2.9, Budget(max_ratio=1.05), False, "fail"),  # confidently over budget
        (0.9, 1.1, Budget(max_ratio=1.05), False, "within-noise"),  # straddles: passes, interval shown
        (0.9, 1.01, Budget(max_ratio=1.05), False, "pass"),
        (0.5, 0.7, Budget(max_ratio=0.6), True, "not-shown"),  # an approximation must show its saving
        (0.5, 0.7, Budget(max_ratio=0.6), False, "within-noise"),
        (0.25, 0.3, Budget(max_ratio=0.6), True, "pass"),
        (0.4, 0.6, Budget(min_ratio=0.95), False, "fail"),  # throughput confidently below its floor
        (2.0, 3.0, None, False, "regressed"),  # no budget: a confident 2.7x slowdown is never ok
        (0.9, 1.4, None, False, "ok"),
        (0.6, 8.3, None, False, "gross"),  # x2.4, unresolved at this noise: still never a green pass
        (1.06, 1.2, None, False, "ok"),  # confidently slower, but by less than min_effect
    ],
)
def test_budget_verdicts(low: float, high: float, budget: Budget | None, show: bool, expected: str) -> None:
    better = "higher" if budget is not None and budget.min_ratio is not None else "lower"
    interval = Interval(math.sqrt(low * high), low, high, 0.95, 4)
    assert _verdict(interval, budget, better, min_effect=0.10, show=show) == expected


def test_identical_paths_report_all_four_clocks_with_intervals() -> None:
    out = phase_performance(ctx(path("dynamic"), path("dynamic", seed=0, block_size=16)), QUICK)
    rows = {row["clock"]: row for row in out.evidence["clocks"]}
    assert set(rows) == set(METRICS)
    for name in ("ttft_p95", "tpot_p95", "itl_p50", "throughput", "live_bytes"):
        assert rows[name]["low"] <= rows[name]["ratio"] <= rows[name]["high"], name
    assert rows["live_bytes"]["ratio"] == pytest.approx(1.0, abs=0.35)
    assert rows["peak_memory"]["verdict"] == "not reported"  # CUDA only
    theory = out.evidence["kv_theory"]
    assert theory["reference"]["theory_bytes"] == 2 * 2 * 2 * 16 * theory["reference"]["tokens_at_peak"] * 4
    series = out.evidence["live_bytes_over_time"]["candidate"]
    assert len(series["t_s"]) == len(series["live_bytes"]) == len(series["theory_bytes"]) > 3
    assert out.evidence["latency_samples"]["reference"]["ttft_s"]
    assert out.exercise["requests_served"] == QUICK.repeats * out.evidence["scenario"]["requests"]
    assert out.status in ("pass", "warn")  # no budget: timing noise can only warn, never fail


class VirtualClock:
    """Stands in for the `time` module of the check's timer (gate.checks._serving.Timer reads
    `time.perf_counter`) and of the planted slowdown (`time.sleep`): every reading moves the clock by
    `tick_s`, so a timed step measures one tick (its model work, at a fixed cost) plus what it slept,
    and a sleep moves the clock without waiting."""

    def __init__(self, tick_s: float) -> None:
        self.now, self.tick_s = 0.0, tick_s

    def perf_counter(self) -> float:
        self.now += self.tick_s
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def virtual_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[VirtualClock]:
    """The check's clock replaced: every step costs 1 ms, the planted sleep costs its length, exactly."""
    clock = VirtualClock(tick_s=0.001)
    monkeypatch.setattr(gate.checks._serving, "time", clock)
    monkeypatch.setattr(benchmarks.planted, "time", clock)
    yield clock


@pytest.mark.usefixtures("virtual_clock")
def test_a_planted_slowdown_fails_its_budget_and_warns_without_one() -> None:
    slow = SlowPath(path("dynamic"), sleep_s=0.025)
    budgeted = ctx(path("dynamic"), slow)
    budgeted.manifest = budgeted.manifest.model_copy(update={"performance": {"tpot_p95": Budget(max_ratio=1.05)}})
    out = phase_performance(budgeted, QUICK)
    assert out.status == "fail", out.message
    assert "over budget: tpot_p95 x" in out.message and "[" in out.message
    assert out.metrics["tpot_p95_low"] > 1.05
    assert out.exercise["planted_steps"] > 0  # the wrapper really ran
    unbudgeted = phase_performance(ctx(path("dynamic"), slow), QUICK)
    assert unbudgeted.status == "warn", unbudgeted.message  # confidently worse, or gross and unresolved
    assert "tpot_p95 x" in unbudgeted.message


@pytest.mark.usefixtures("virtual_clock")
def test_a_policy_budget_applies_and_the_manifest_replaces_it() -> None:
    slow = SlowPath(path("dynamic"), sleep_s=0.025)
    lenient = QUICK.model_copy(update={"budgets": {"tpot_p95": Budget(max_ratio=10_000.0)}})
    assert "budgets held: tpot_p95" in phase_performance(ctx(path("dynamic"), slow), lenient).message
    strict = ctx(path("dynamic"), slow)
    strict.manifest = strict.manifest.model_copy(update={"performance": {"tpot_p95": Budget(max_ratio=1.05)}})
    assert phase_performance(strict, lenient).status == "fail"


def test_a_block_reusing_engine_gets_a_shared_prefix_several_blocks_long() -> None:
    chat = load_scenario("chat-shared-prefix")
    assert chat.system_prefix == 64
    assert shared_prefix_on(chat, None, 8192).system_prefix == 64  # reuses any prefix (llama.cpp) or unknown
    assert shared_prefix_on(chat, 16, 8192).system_prefix == 64  # already four 16-token blocks
    assert shared_prefix_on(chat, 32, 8192).system_prefix == PREFIX_BLOCKS * 32
    assert shared_prefix_on(chat, 128, 1024).system_prefix == 256  # held within a quarter of the context
    assert shared_prefix_on(chat, 128, 128).system_prefix == 64  # never shorter than the scenario's own
