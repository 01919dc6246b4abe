"""The aimed workload's planner (gate.checks._mechanisms): which lengths for which window, micro-batch
and checkpoint spacing; the mechanisms a geometry rules out, with why; what llama.cpp's log says its
cache did; and a mechanism counted reached only from the engine's own counters."""

from __future__ import annotations

from dataclasses import dataclass

from gate.adapters.openai.geometry import launch_geometry, logged_mechanisms
from gate.adapters.openai.model_meta import ModelMeta
from gate.checks._coverage import planned_coverage
from gate.checks._mechanisms import (
    CHECKPOINT_LEAD,
    MECHANISMS,
    POOL_BASE,
    log_counters,
    plan_mechanisms,
    reach,
)
from gate.protocols import CacheGeometry

SWA = ModelMeta(vocab_size=512, context_length=8192, sliding_window=64, sliding_layers=(0,), source="tiny_model")
SERVED = ["llama-server", "-m", "m.gguf", "-c", "8192", "-np", "5", "--kv-unified", "--cache-prompt"]


def _geometry(**fields: object) -> CacheGeometry:
    base = launch_geometry(SERVED, "llama.cpp", SWA)
    assert base is not None
    return base.model_copy(update=fields)


def test_llamacpp_flags_and_the_model_state_the_mechanisms_with_defaults_where_they_are_silent() -> None:
    g = launch_geometry(SERVED, "llama.cpp", SWA)
    assert g is not None
    assert (g.sliding_window, g.sliding_layers, g.slots, g.kv_unified) == (64, [0], 5, True)
    assert (g.ubatch, g.host_cache_mib, g.checkpoints, g.checkpoint_spacing) == (512, 8192, 32, 8192)
    assert g.mechanisms_from is not None and "-np" in g.mechanisms_from and "tiny_model" in g.mechanisms_from
    auto = launch_geometry(["llama-server", "-m", "m.gguf"], "llama.cpp", ModelMeta())
    assert auto is not None and (auto.slots, auto.kv_unified, auto.sliding_window) == (4, True, None)
    off = launch_geometry(
        [*SERVED, "--cache-ram", "0", "--no-kv-unified", "-ub", "128", "--ctx-checkpoints", "0"], "llama.cpp"
    )
    assert off is not None and (off.host_cache_mib, off.kv_unified, off.ubatch, off.checkpoints) == (0, False, 128, 0)
    nocache = launch_geometry(["llama-server", "--no-cache-prompt"], "llama.cpp")
    assert nocache is not None and nocache.host_cache_mib == 0 and nocache.prefix_caching is False


def test_the_start_up_log_states_slots_host_cache_and_checkpoints() -> None:
    log = (
        "I llama_kv_cache_iswa: creating     SWA KV cache, size = 768 cells\n"
        "I srv    load_model: initializing, n_slots = 4, n_ctx_slot = 8192, kv_unified = 'true'\n"
        "I srv    load_model: prompt cache is enabled, size limit: 8192 MiB\n"
        "I srv    load_model: context checkpoints enabled, max = 32, min spacing = 8192\n"
    )
    assert logged_mechanisms(log) == {
        "slots": 4,
        "kv_unified": True,
        "host_cache_mib": 8192,
        "checkpoints": 32,
        "checkpoint_spacing": 8192,
    }
    assert logged_mechanisms("I srv load_model: context checkpoints disabled\n") == {"checkpoints": 0}
    assert logged_mechanisms("") == {}


def test_a_sliding_window_model_at_llamacpps_defaults_is_aimed_at_the_window_edge_wrap_host_cache_and_edits() -> None:
    plan = plan_mechanisms(_geometry(), room=8183, width=6, turn_tokens=24)
    assert plan.aimed["window-edge"] == [64, 65, 66, 68]  # at the window and just past it
    assert plan.aimed["swa-cache-wrap"] == [640, 1152, 1728]  # past window + micro-batch (576)
    assert "host-cache-restore" in plan.aimed and plan.aimed["edited-turn"] == [12]
    # the default spacing (8192) is past what the context leaves for a prompt: listed, not aimed at
    assert set(plan.not_aimed) == {"checkpoint-interval"} and "8192" in plan.not_aimed["checkpoint-interval"]
    steps = [s for r in plan.rounds for s in r]
    assert all(len(r) <= 6 for r in plan.rounds)
    pool = [s for s in steps if s.mechanism == "pool"]
    assert len(pool) == 5 + 2  # more finished conversations than slots
    # each window-edge share takes a pooled conversation whose end-of-prompt checkpoint sits at the edge
    lengths = {s.conversation: s.length for s in pool}
    shares = [s for s in steps if s.mechanism == "window-edge"]
    assert [s.how for s in shares] == ["share"] * 4
    assert [lengths[s.source] - CHECKPOINT_LEAD for s in shares if s.source is not None] == [64, 65, 66, 68]
    # pooled conversations are resumed after the shares, then edited; the long prompts go last
    order = [s.mechanism for s in steps]
    assert order.index("host-cache-restore") > order.index("window-edge")
    assert order.index("edited-turn") > order.index("host-cache-restore")
    assert max(i for i, m in enumerate(order) if m != "swa-cache-wrap") < order.index("swa-cache-wrap")
    resumed = {s.conversation for s in steps if s.how == "resume"}
    assert resumed == {s.conversation for s in pool} and all(c >= POOL_BASE for c in resumed)
    wraps = [s for s in steps if s.mechanism == "swa-cache-wrap"]
    assert len(wraps) == 5 * 6 and min(s.length for s in wraps) > 64 + 512


def test_checkpoint_intervals_within_the_context_are_aimed_at_each_interval() -> None:
    plan = plan_mechanisms(_geometry(checkpoint_spacing=256), room=600, width=4, turn_tokens=24)
    assert plan.aimed["checkpoint-interval"] == [256, 257, 512, 513]
    shares = [s for r in plan.rounds for s in r if s.mechanism == "checkpoint-interval"]
    long = {s.conversation: s for r in plan.rounds for s in r if s.mechanism == "pool" and s.length > 513}
    assert [s.length for s in shares] == [256, 257, 512, 513] and all(s.source in long for s in shares)
    # a context too short for window + micro-batch + a window leaves the wrap unaimed, with why
    assert "swa-cache-wrap" in plan.not_aimed and "leaves 600 tokens" in plan.not_aimed["swa-cache-wrap"]


def test_what_a_geometry_rules_out_is_listed_with_why() -> None:
    full = plan_mechanisms(_geometry(sliding_window=None, sliding_layers=None), room=8183, width=6, turn_tokens=24)
    for name in ("window-edge", "checkpoint-interval", "swa-cache-wrap"):
        assert "no sliding window" in full.not_aimed[name]
    assert set(full.aimed) == {"host-cache-restore", "edited-turn"}
    no_host = plan_mechanisms(_geometry(host_cache_mib=0), room=8183, width=6, turn_tokens=24)
    assert no_host.not_aimed["host-cache-restore"] == "the host-memory prompt cache is off"
    off = plan_mechanisms(_geometry(prefix_caching=False), room=8183, width=6, turn_tokens=24)
    assert not off.rounds and set(off.not_aimed) == set(MECHANISMS)
    silent = plan_mechanisms(CacheGeometry(block_size=16), room=8183, width=6, turn_tokens=24)
    assert not silent.rounds and "states none of its reuse mechanisms" in silent.words()
    assert off.requests() == 0 < plan_mechanisms(_geometry(), room=8183, width=6, turn_tokens=24).requests()


def test_gate_plan_lists_the_aimed_lengths_and_the_unreachable_mechanisms() -> None:
    coverage = planned_coverage(
        "engine-concurrent-conversations", {}, {"candidate": (8192, "launch flag -c 8192")}, _geometry()
    )
    assert coverage is not None and coverage.reachable_longest == 8192 - 1 - 8
    assert {64, 65, 66, 68, 640, 1152, 1728} <= set(coverage.wanted)
    assert coverage.planned_on is not None
    assert "window-edge at 64, 65, 66, 68" in coverage.planned_on
    assert "checkpoint-interval not reachable: checkpoints are at least 8192 tokens apart" in coverage.planned_on
    off = planned_coverage("engine-concurrent-conversations", {"aim": False}, {"c": (8192, "x")}, _geometry())
    assert off is not None and off.wanted == [] and off.planned_on == "no aimed workload (aim: false)"


# a run's log at -lv 4 (b11549's lines, shortened), and at the default verbosity
RESTORED = "I slot   operator(): id  4 | task 9 | restored context checkpoint "
LOG = "\n".join(
    [
        "I slot   operator(): id  3 | task 20 | cached n_tokens = 65, memory_seq_rm [65, end)",
        RESTORED + "(pos_min = 16, pos_max = 78, n_tokens = 79, n_past = 78, size = 0.008 MiB)",
        RESTORED + "(pos_min = 0, pos_max = 62, n_tokens = 63, n_past = 62, size = 0.008 MiB)",
        RESTORED + "(pos_min = 133, pos_max = 272, n_tokens = 273, n_past = 272, size = 0.009 MiB)",
        "I srv          load:  - found better prompt with f_keep = 0.851, f_sim = 0.926",
        "I slot   operator(): id  0 | task 184 | forcing full prompt re-processing due to lack of cache data",
        "I slot create_check: id  1 | task 186 | created context checkpoint 4 of 32 (pos_min = 0, pos_max = 61)",
    ]
)


def test_the_log_counts_restores_host_cache_loads_recomputes_and_restores_short_of_the_window() -> None:
    counts = log_counters(LOG, window=64)
    assert counts == {
        "checkpoint_restores": 3,
        "host_cache_loads": 1,
        "full_recomputes": 1,
        "checkpoints_created": 1,
        # pos_min 16 > 78 - 64 + 1: the token at 78, recomputed, attends to position 15, which the state lacks
        "restores_short_of_window": 1,
    }
    assert (
        log_counters(LOG, window=None) is not None and log_counters(LOG, window=None)["restores_short_of_window"] == 0
    )
    default = "I slot print_timing: id  3 | task 0 | prompt eval time = 2.02 ms / 75 tokens\n"
    assert log_counters(default, window=64) is None  # the log does not say: counted from cached tokens alone


@dataclass
class _Sent:
    aim: str | None
    aimed_at: int | None
    round: int
    window: tuple[float, float]
    cached: int | None


def test_a_mechanism_is_reached_only_by_the_engines_counters() -> None:
    plan = plan_mechanisms(_geometry(), room=8183, width=6, turn_tokens=24)
    sent = [
        _Sent("window-edge", 65, -8, (0.0, 1.0), 64),  # reused the shared prefix up to its last token
        _Sent("window-edge", 66, -8, (0.0, 1.0), 0),
        _Sent("swa-cache-wrap", 640, -2, (0.0, 1.0), 0),
        _Sent("swa-cache-wrap", 704, -2, (0.5, 1.5), 0),  # in flight with the one above
        _Sent("host-cache-restore", 92, -5, (0.0, 1.0), 87),
        _Sent("edited-turn", 100, -4, (0.0, 1.0), 140),  # reused past the cut: not an edit inside the prompt
    ]
    by_name = {m.mechanism: m for m in reach(plan, sent, {"host_cache_loads": 0})}
    assert by_name["window-edge"].reached and "1 of 2" in by_name["window-edge"].evidence
    assert by_name["swa-cache-wrap"].reached
    # reused history but the log states no host-cache load: a slot served it, the tier was not reached
    assert not by_name["host-cache-restore"].reached and "0 loads" in by_name["host-cache-restore"].evidence
    assert not by_name["edited-turn"].reached
    assert not by_name["checkpoint-interval"].aimed and not by_name["checkpoint-interval"].reached
    loaded = {m.mechanism: m for m in reach(plan, sent, {"host_cache_loads": 3})}
    assert loaded["host-cache-restore"].reached
    apart = [_Sent("swa-cache-wrap", 640, -2, (0.0, 1.0), 0), _Sent("swa-cache-wrap", 704, -1, (2.0, 3.0), 0)]
    assert not {m.mechanism: m for m in reach(plan, apart, None)}["swa-cache-wrap"].reached
