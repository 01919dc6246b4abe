"""The diagnosis names what the evidence shows: a wrong query-to-KV-head map at read time (K/V right,
each query head returning another KV head's answer), a chunk's mask origin found by replaying the
check's chunks in the tracer, and lower-precision arithmetic decided from small differences with
clean K/V, whatever lengths the sweep visited."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch

from gate.adapters.reference.paths import ReferencePath
from gate.checks._diagnosis.layers import chunk_steps, progressive_cuts
from gate.checks.greedy_parity import GreedyParityParams, greedy_parity
from gate.checks.mask_oracle import MaskOracleParams, mask_oracle
from gate.checks.prefix_sweep import PrefixSweepParams, prefix_sweep
from tests.support.reference import MAX_LEN, ctx, path


def test_a_wrong_kv_head_map_at_read_time_is_named_by_the_oracle_and_the_tracer() -> None:
    faulty = path("static").with_fault("kv-head-map")
    oracle = mask_oracle(ctx(path("full"), faulty), MaskOracleParams())
    assert oracle.status == "fail" and oracle.diagnosis is not None
    assert oracle.diagnosis["bug_class"] == "kv-head-mapping", oracle.diagnosis
    gqa = [r for r in oracle.evidence["cases"] if r["case"] == "gqa-nonzero-scores"]
    assert gqa and all(r["read_map"] == [0, 1, 0, 1] for r in gqa)  # tiled, where 0, 0, 1, 1 was meant

    sweep = prefix_sweep(ctx(path("full"), faulty), PrefixSweepParams(longest=MAX_LEN - 1))
    assert sweep.diagnosis is not None and sweep.diagnosis["bug_class"] == "kv-head-mapping", sweep.diagnosis
    layer0 = sweep.diagnosis["layers"][0]
    # the stored K/V agree; the read is what is wrong
    assert layer0["component"] == "attention-output" and layer0["past_k_rows"] == layer0["past_v_rows"] == 0
    assert layer0["read_map"] == [0, 1, 0, 1] and layer0["heads_remapped"]


def test_the_right_map_is_not_called_remapped_under_other_attention_faults() -> None:
    for fault in ("mask-origin-reset", "chunk-mask-origin"):
        out = mask_oracle(ctx(path("full"), path("static").with_fault(fault)), MaskOracleParams())
        assert out.diagnosis is not None and out.diagnosis["bug_class"] == "mask-offset", fault


def test_progressive_cuts_follow_the_sweeps_one_growing_session() -> None:
    # prefill 1, token at 1; token at 2; chunk 3..5 then the token at 5
    assert progressive_cuts([0, 1, 2, 5], 5) == [1, 2, 3, 5]
    assert progressive_cuts([0, 1, 2, 5], 1) == [1]
    assert chunk_steps(path("static"), 5, [1, 2, 3, 5]) == [(3, 5)]
    chunked = path("chunked", chunk_size=16)
    assert chunk_steps(chunked, 40, []) == [(16, 32), (32, 40)]  # the path's own chunk edges


@pytest.mark.parametrize("kind", ["static", "chunked"])
def test_a_chunk_mask_origin_is_named_by_replaying_the_chunk_not_a_window(kind: str) -> None:
    options = {"chunk_size": 16} if kind == "chunked" else {}
    faulty = path(kind, **options).with_fault("chunk-mask-origin")
    out = prefix_sweep(ctx(path("full"), faulty), PrefixSweepParams(longest=MAX_LEN - 1))
    assert out.status == "fail" and out.diagnosis is not None
    assert out.diagnosis["bug_class"] == "mask-offset", out.diagnosis
    replayed = out.diagnosis["replayed_chunk"]
    assert replayed["tokens"] > 1 and replayed["start"] > 0
    assert out.diagnosis["first_diverging_layer"] == 0 and out.diagnosis["component"] == "attention-output"


def test_greedy_parity_replays_the_candidates_prompt_chunks() -> None:
    faulty = path("static").with_fault("chunk-mask-origin")
    params = GreedyParityParams(prompt_lengths=[40], tokens=[8], chunked_prompt=True)
    out = greedy_parity(ctx(path("full"), faulty), params)
    assert out.status == "fail" and out.diagnosis is not None
    assert out.diagnosis["bug_class"] == "mask-offset" and out.diagnosis["replayed_chunk"]["start"] > 0


def bf16_softmax(base: ReferencePath) -> ReferencePath:
    """The path with every attention softmax computed in bfloat16 (a precision bug, not a cache one)."""
    out = dataclasses.replace(base, name=f"{base.name}+bf16-softmax", model=copy.deepcopy(base.model))
    for block in out.model.blocks:
        core = block.attention.core

        def forward(
            q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, padding: torch.Tensor | None = None, core: object = core
        ) -> torch.Tensor:
            rep = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
            blocked = block_mask(core, q.shape[2], k.shape[2], q.device)
            scores = q.float() @ k.float().transpose(-1, -2) / math.sqrt(q.shape[-1])
            weights = scores.masked_fill(blocked, float("-inf")).to(torch.bfloat16).softmax(dim=-1).float()
            return (weights @ v.float()).to(q.dtype)

        core.forward = forward  # type: ignore[method-assign]
    return out


def block_mask(core: object, q_len: int, k_len: int, device: torch.device) -> torch.Tensor:
    blocked: torch.Tensor = core.mask_fn(q_len, k_len, core.window, device)  # type: ignore[attr-defined]
    return blocked


@pytest.mark.parametrize("seed", [0, 2])
def test_a_bfloat16_softmax_gets_the_same_class_whatever_lengths_were_swept(seed: int) -> None:
    reference, candidate = path("full", seed=seed), bf16_softmax(path("static", seed=seed))
    every = PrefixSweepParams(longest=MAX_LEN - 1, every_length_up_to=MAX_LEN - 1, max_lengths=None)
    few = PrefixSweepParams(lengths=[3, 40, 200], log_spaced=0, boundaries=False, longest=MAX_LEN - 1)
    classes, flips = [], []
    for params in (every, few):
        out = prefix_sweep(ctx(reference, candidate, seed=seed), params)
        assert out.status == "fail" and out.diagnosis is not None
        classes.append(out.diagnosis["bug_class"])
        flips.append(out.metrics["argmax_failures"])
    # every length visited: some argmax flips beyond the tie band; three lengths: none
    assert flips[0] > 0 and flips[1] == 0, flips
    assert classes == ["numeric-precision", "numeric-precision"], classes


class _Untraced:
    """A path seen without its LayerTracing: every other attribute is the path's own."""

    def __init__(self, path: object) -> None:
        self._path = path

    def __getattr__(self, name: str) -> object:
        if name in ("layer_states", "full_layer_states"):
            raise AttributeError(name)
        return getattr(self._path, name)


@pytest.mark.parametrize(
    ("fault", "steps", "bug_class", "traced_class"),
    [
        # a step over a cache, blind to the token before it
        ("chunk-mask-origin", [("prefill", 1), ("append", 2)], "mask-offset", "mask-offset"),
        ("mask-origin-reset", [("prefill", 3), ("append", 1)], "mask-offset", "mask-offset"),
        ("poisoned-tail-read", [("prefill", 1)], "read-past-valid-length", "read-past-valid-length"),
        # one token repeated, where no mask or position can move the answer, is still wrong: a KV-head
        # map (gate.checks._diagnosis.head_map); the trace's read map says the same
        ("kv-head-map", [("prefill", 1)], "kv-head-mapping", "kv-head-mapping"),
        # a positional fault sees the token before it: no mask named, and a single token over a cache
        # has no candidates list to offer; the trace sees the appended token's K move
        ("off-by-one-pos", [("prefill", 3), ("append", 1)], "uncertain", "positional-index"),
    ],
)
@pytest.mark.parametrize("traced", [False, True])
def test_a_shrunk_reproducer_is_named_only_as_far_as_the_evidence_supports(
    fault: str, steps: list[tuple[str, int]], bug_class: str, traced_class: str, traced: bool
) -> None:
    """Without a layer trace, model-level experiments alone; with one (both paths trace), the
    failing step replayed under it names what the experiments leave open, never another class."""
    from gate.checks._compare import Tolerance
    from gate.checks._diagnosis import diagnose_reproducer

    reference, candidate = path("full"), path("static").with_fault(fault)
    if not traced:
        reference, candidate = _Untraced(reference), _Untraced(candidate)  # type: ignore[assignment]
    failure = {"step": len(steps)}
    found = diagnose_reproducer(reference, candidate, steps, failure, Tolerance(1e-4, 1e-4, "test"), 0)
    assert found["bug_class"] == (traced_class if traced else bug_class), found
    if fault == "kv-head-map" and not traced:
        uniform = found["uniform_prompt"]
        assert uniform["position_free"] and uniform["deviating_lengths"] == [1, 9, 17], uniform
    if traced and fault == "kv-head-map":
        assert found["layers"][0]["read_map"] == [0, 1, 0, 1], found


def test_a_correct_path_is_never_blind_to_the_token_before_a_step() -> None:
    from gate.checks._compare import Tolerance
    from gate.checks._diagnosis.experiments import visibility

    for width in (1, 2):
        seen = visibility(path("full"), path("static"), 256, Tolerance(1e-4, 1e-4, "test"), 0, width)
        assert not seen["blind"] and seen["reference_moves"] > 0 and seen["candidate_moves"] > 0


def _tinylm(**options: object) -> object:
    from gate_plugin_tinylm import Options, TinyLMAdapter

    return TinyLMAdapter().build(Options(trace=True, **options), device="cpu", dtype="float32", seed=0)  # type: ignore[arg-type]


def test_tinylms_optional_trace_judges_the_read_time_head_map_and_replays_cuts() -> None:
    """tinylm (a plugin: learned positions, multi-head attention) with `trace: true`: per-head query
    and attention output are recorded, so the read-time head map is judged on it (each head reads
    its own KV head), and the prefix goes in as the cuts say (chunk replay)."""
    from gate.checks._diagnosis.layers import layer_divergence, read_map
    from gate.protocols import LayerTracing

    full, cached = _tinylm(engine="recompute"), _tinylm()
    assert isinstance(cached, LayerTracing) and not isinstance(_tinylm_untraced(), LayerTracing)
    tokens = torch.randint(0, 96, (1, 16), generator=torch.Generator().manual_seed(3))
    state = cached.layer_states(tokens, 9, cuts=[3, 6], width=2)[0]
    assert state["k"].shape[2] == 11 and state["q"].shape == state["attn"].shape == (1, 4, 1, 12)
    assert read_map(state, 1e-4) == [0, 1, 2, 3]
    same = layer_divergence(full, cached, tokens, 9, "float32", cuts=[3, 6], width=2)  # type: ignore[arg-type]
    assert same is not None and same["first"] is None and same["width"] == 2

    # positions restarting at each call: replaying the cuts, the prefix rows written by the later
    # chunks are wrong from the first cut on (one prefill would show only the appended token)
    restart = _tinylm(bug="positions-restart")
    replayed = layer_divergence(full, restart, tokens, 9, "float32", cuts=[3, 6])  # type: ignore[arg-type]
    assert replayed is not None and replayed["first"]["component"] == "past-kv", replayed["first"]
    assert replayed["first"]["first_past_row"] == 3
    one_shot = layer_divergence(full, restart, tokens, 9, "float32")  # type: ignore[arg-type]
    assert one_shot is not None and one_shot["first"]["component"] == "new-kv", one_shot["first"]


def _tinylm_untraced() -> object:
    from gate_plugin_tinylm import Options, TinyLMAdapter

    return TinyLMAdapter().build(Options(), device="cpu", dtype="float32", seed=0)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_the_hf_trace_judges_the_read_time_head_map_and_replays_a_chunk(attention: str) -> None:
    """The hf adapter's layer trace records each layer's last query and per-head attention output
    (the attention function wrapped while tracing, answers passed through) and replays a check's
    cuts: on Llama's grouped-query attention the read map is the one GQA assigns, and a chunk of 8
    appended after cuts is traced as that chunk (a chunk mask from its own origin is named a mask
    offset, its last query seeing too few keys for any head map to explain it)."""
    from gate.checks._diagnosis import classify
    from gate.checks._diagnosis.layers import layer_divergence, read_map
    from tests.adapters.hf.subjects import path as hf_path
    from tests.adapters.hf.subjects import tokens

    full, toks = hf_path("llama", path="dynamic", attn_implementation=attention), tokens()
    state = full.layer_states(toks, 12, cuts=[5], width=8)[0]  # type: ignore[attr-defined]
    assert state["k"].shape[2] == 20 and state["q"].shape == state["attn"].shape == (2, 4, 1, 16)
    assert read_map(state, 1e-4) == [0, 0, 1, 1]
    assert read_map(full.full_layer_states(toks, 20)[0], 1e-4) == [0, 0, 1, 1]  # type: ignore[attr-defined]
    same = layer_divergence(full, full, toks, 12, "float32", cuts=[5], width=8)
    assert same is not None and same["first"] is None and same["width"] == 8

    chunk = layer_divergence(full, full.with_fault("mask-origin-reset"), toks, 12, "float32", cuts=[5], width=8)
    assert chunk is not None and chunk["width"] == 8
    first = chunk["first"]
    assert first["layer"] == 0 and first["component"] == "attention-output" and not first["heads_remapped"]
    assert classify({"profile": "chunk-step"}, chunk) == "mask-offset"
